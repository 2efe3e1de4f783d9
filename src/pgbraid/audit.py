"""The audit log: who did what, per tenant, in an append-only table (migration 020).

Recording an event, from anywhere that holds a connection or the database::

    from pgbraid import audit
    audit.record(conn, principal, "document.quarantine", "pipeline/doc-7", {"reason": "..."})
    audit.record(db, principal, "pipeline.delete", "docs")

``record(where, principal, action, target=None, detail=None)``:

- ``where`` is a ``psycopg.Connection`` inside a tenant session (``Database.session``):
  the row is written in that transaction, so it commits with the change it
  describes or not at all (use this for writes); or a ``Database``: the row is
  written in a session of its own for the principal's tenant, committed at once
  (use this for refusals, whose own transaction rolls back).
- ``principal`` is a ``scope.Principal`` (shown as ``key:<id>``, or ``local`` for
  the local process) or a string for a principal that is no ``Principal``.
- ``action`` is a key of ``ACTIONS`` (a new event adds its line there);
  ``target`` a short text (a pipeline, ``pipeline/document``, a key id);
  ``detail`` a JSON object. Neither may hold secrets: the tenant's admin reads them.

The tenant is the session's (row-level security checks it); ``tenant=`` on a
``Database`` records into another tenant (a key's tenant on refusal).

Requests are counted, not written one by one: ``Usage`` adds up each key's
requests per minute in the process (``key.use``) and writes one row per key per
minute (``count``, ``detail.operations``) once the minute is over (``pgbraid serve``
looks every 10 s; a library process at its next request), or when the process reads
the log or closes; so there is about one row per key,
minute and worker process (a flush by a read may split a minute in two), and a
process killed with -9 loses its last minute's counts.
Refusals are counted the same way, so a flood of refused requests is not a flood
of rows: those that name no known key under the tenant ``(no tenant)`` (``pgbraid
audit --unauthenticated``), a known key's that is revoked or expired (``key.refused``,
``detail.reasons``) and a known principal's 403s (``access.denied``, no target,
``detail.denials``: "operation: why" -> count) in the key's tenant; a row holds at most
``MAX_KINDS`` kinds, the rest counted under ``(other)``. Every write is a row of its
own.

The table takes INSERT and SELECT only: see migration 020 for how UPDATE,
DELETE and TRUNCATE are refused, even to the table's owner. One path removes rows:
``purge`` (migration 035's function), for the operator only, rows older than a bound
of one tenant, recorded as ``audit.purged``; ``purge_bound`` checks the bound
against ``PGBRAID_AUDIT_RETENTION_DAYS``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections import Counter
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, Callable, Mapping, Union

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .db.database import Database
from .errors import Forbidden, IntegrityFailure, InvalidRequest
from .models import parse_as_of, shown
from .scope import Principal

logger = logging.getLogger("pgbraid")

ACTIONS: dict[str, str] = {
    "key.create": "an API key was created (target: its id)",
    "key.revoke": "an API key was revoked (target: its id)",
    "key.use": "requests made with a key, counted per minute (count; detail.operations)",
    "key.refused": "requests with no valid key: unknown, revoked or expired (401), "
                   "counted per minute (count; detail.reasons)",
    "access.denied": "requests a principal lacked a permission or classification for (403), "
                     "counted per minute (count; detail.denials)",
    "pipeline.create": "a pipeline was created",
    "pipeline.delete": "a pipeline and everything in it was deleted",
    "pipeline.live": "a pipeline's live source was declared, changed or removed (detail: hosts)",
    "document.ingest": "documents were written (detail: added, updated, unchanged, failed)",
    "document.delete": "a document's current version was expired",
    "document.quarantine": "a document was quarantined",
    "document.release": "a document was released from quarantine",
    "graph.load": "vertices and edges were loaded",
    "graph.delete": "a vertex and its edges were deleted",
    "classification.define": "a classification and what it implies were (re)defined",
    "source.register": "an entity source was registered (its table granted to the tenant's role)",
    "source.remove": "an entity source was removed",
    "encryption.rotate": "a pipeline's encryption key was rotated",
    "encryption.refused": "a ciphertext failed to decrypt (tampered or wrong key)",
    "audit.purged": "rows older than a time were removed by the operator (detail: removed, "
                    "before); never purged itself",
}
COUNTED = {"key.use": "operations", "key.refused": "reasons", "access.denied": "denials"}
"""The actions ``Usage`` counts, and the detail key that holds the counts by kind."""
ANONYMOUS_TENANT = "(no tenant)"
"""Where refusals that name no known key are counted: no tenant can have this name (see
models.validate_name), and it is not the empty string a session leaves behind, so
neither a tenant nor a connection without one reads these rows."""
MAX_LIMIT = 10_000
MAX_KINDS = 50
"""Kinds (operations, reasons, denials) one counted row holds; the rest are ``(other)``."""
OTHER = "(other)"
MAX_KIND_CHARS = 200

PURGE_LOCK_TIMEOUT = "10s"
"""How long a purge waits for the log's lock behind open transactions that wrote to it
(then BackendUnavailable, SQLSTATE 55P03: run it again)."""

Where = Union[psycopg.Connection, Database]

# The id is drawn at random, as fragment ids are (migration 011): the table's identity
# sequence is shared by every tenant, so the gap between two of a tenant's ids would count
# the events of all the others in between. (Citus cannot drop an identity column from a
# reference table, so the sequence stays and is overridden; migration 058: the purge.)
_INSERT = ("INSERT INTO pgbraid.audit_log (id, principal, action, target, detail, count{at})"
           " OVERRIDING SYSTEM VALUE"
           " VALUES (pgbraid.random_fragment_id(), %s, %s, %s, %s, %s{at_value})")


def principal_label(principal: Principal | str) -> str:
    if isinstance(principal, str):
        return principal
    return f"key:{principal.key_id}" if principal.key_id else "local"


def record(where: Where, principal: Principal | str, action: str, target: str | None = None,
           detail: Mapping[str, Any] | None = None, *, tenant: str | None = None,
           count: int = 1, at: datetime | None = None) -> None:
    """Append one event (see the module docstring)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}: add it to audit.ACTIONS")
    columns = (", at", ", %s") if at is not None else ("", "")
    statement = _INSERT.format(at=columns[0], at_value=columns[1])
    values = [principal_label(principal), action, target, Jsonb(dict(detail or {})), count]
    if at is not None:
        values.append(at)
    if isinstance(where, Database):
        if tenant is None:
            if isinstance(principal, str):
                raise ValueError("record(db, ...) with a principal label needs tenant=")
            tenant = principal.tenant
        with where.session(tenant) as conn:
            conn.execute(statement, values)
    else:
        if tenant is not None:
            raise ValueError("a session records into its own tenant: pass the Database")
        where.execute(statement, values)


def record_quietly(db: Database, principal: Principal | str, action: str,
                   target: str | None = None, detail: Mapping[str, Any] | None = None, *,
                   tenant: str | None = None) -> None:
    """``record`` on its own session, logging (not raising) a failure: for an event beside
    an error, which must still reach the caller."""
    try:
        record(db, principal, action, target, detail, tenant=tenant)
    except Exception:  # noqa: BLE001
        logger.exception("could not record %s in the audit log", action)


def denied(usage: "Usage", principal: Principal, exc: Exception, operation: str) -> None:
    """Count a refusal (Forbidden) of a known principal: ``operation: message`` (the
    message names the pipeline, the permission or classification missing). No target:
    pipeline names are the caller's to choose, and each target would be a row a minute."""
    usage.add(principal.tenant, principal, "access.denied",
              f"{operation}: {getattr(exc, 'message', str(exc))}")


def listing(conn: psycopg.Connection, *, since: Any = None, action: str | None = None,
            limit: int = 100) -> list[dict[str, Any]]:
    """The session's tenant's events, newest first."""
    since_at = _moment(since)
    if action is not None and action not in ACTIONS:
        raise InvalidRequest(f"unknown audit action {shown(action)}; use one of "
                             f"{', '.join(ACTIONS)}", field="action")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT id, at, principal, action, target, detail, count FROM pgbraid.audit_log"
            " WHERE (%(since)s::timestamptz IS NULL OR at >= %(since)s)"
            " AND (%(action)s::text IS NULL OR action = %(action)s)"
            " ORDER BY at DESC, id DESC LIMIT %(limit)s",
            {"since": since_at, "action": action, "limit": limit}).fetchall()
    for row in rows:
        row["at"] = row["at"].isoformat()
    return rows


def _moment(value: Any, name: str = "since") -> datetime | None:
    """An ISO-8601 date or time (UTC without an offset), or a span back from now: 30s,
    15m, 2h, 7d."""
    if value is None:
        return None
    if isinstance(value, str) and value[:-1].isdigit() and value[-1:] in _SPANS:
        return datetime.now(timezone.utc) - timedelta(**{_SPANS[value[-1]]: int(value[:-1])})
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time.min)
    try:
        return parse_as_of(value)
    except InvalidRequest:
        raise InvalidRequest(f"{name} must be an ISO-8601 date or time or a span such as 15m, "
                             f"2h, 7d; got {shown(value)}", field=name) from None


_SPANS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


# -- retention (migration 035) -----------------------------------------------------------

def purge_bound(before: Any, retention_days: int | None) -> datetime:
    """The time before which a purge removes rows: ``before`` (an ISO-8601 date or time, or
    a span back from now such as 90d), else the retention policy's (``retention_days``
    back from now). Never after now, and never inside the days the policy keeps."""
    now = datetime.now(timezone.utc)
    kept = now - timedelta(days=retention_days) if retention_days else None
    if before is None:
        if kept is None:
            raise InvalidRequest("give before (an ISO-8601 date or time, or a span such as "
                                 "90d), or set PGBRAID_AUDIT_RETENTION_DAYS", field="before")
        return kept
    bound = _moment(before, "before")
    if bound > now:
        raise InvalidRequest(f"before must not be in the future (got {bound.isoformat()}): a "
                             "purge removes only rows already in the log", field="before")
    if kept is not None and bound > kept:
        raise InvalidRequest(f"before must be at least {retention_days} days ago: "
                             "PGBRAID_AUDIT_RETENTION_DAYS keeps the rows since "
                             f"{kept.isoformat()}", field="before",
                             setting="PGBRAID_AUDIT_RETENTION_DAYS")
    return bound


def purge(db: Database, tenant: str, principal: Principal | str,
          bound: datetime) -> dict[str, Any]:
    """Remove ``tenant``'s rows older than ``bound`` through migration 035's function, on
    the owner's connection (the one caller it allows), which records the purge
    (``audit.purged``) in the same transaction."""
    with db.admin() as conn, conn.transaction():
        # Waiting for the lock queues every audit write behind the purge: wait a bounded time.
        conn.execute("SELECT set_config('pgbraid.tenant', %s, true),"
                     " set_config('lock_timeout', %s, true)", (tenant, PURGE_LOCK_TIMEOUT))
        removed = conn.execute("SELECT pgbraid.audit_purge(%s, %s)",
                               (bound, principal_label(principal))).fetchone()[0]
    return {"tenant": tenant, "removed": removed, "before": bound.isoformat()}


class Usage:
    """Requests counted per (tenant, principal, action, target) and minute, written as one
    row each once their minute is over (``add``), or all at once (``flush``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str, str | None, datetime], Counter] = {}

    def add(self, tenant: str, principal: Principal | str, action: str, kind: str,
            target: str | None = None) -> None:
        """Count one ``action`` (a key of ``COUNTED``) of this ``kind`` (an operation, a
        reason); write the minutes that are over."""
        if action not in COUNTED:
            raise ValueError(f"audit action {action!r} is not counted: see audit.COUNTED")
        now = _minute(datetime.now(timezone.utc))
        key = (tenant, principal_label(principal), action, target, now)
        kind = kind[:MAX_KIND_CHARS]
        with self._lock:
            counts = self._counts.setdefault(key, Counter())
            counts[kind if kind in counts or len(counts) < MAX_KINDS else OTHER] += 1
        self.write_due()

    def flush(self) -> None:
        with self._lock:
            due = list(self._counts)
        self._write(due)

    def write_due(self) -> None:
        """Write the minutes that are over (``pgbraid serve`` calls this every few seconds,
        so an idle server's last counts reach the log without waiting for a request)."""
        now = _minute(datetime.now(timezone.utc))
        with self._lock:
            due = [k for k in self._counts if k[4] < now]
        if due:
            self._write(due)

    def _write(self, keys: list) -> None:
        with self._lock:
            taken = [(k, self._counts.pop(k)) for k in keys if k in self._counts]
        for (tenant, label, action, target, minute), kinds in taken:
            try:
                record(self._db, label, action, target, {COUNTED[action]: dict(kinds)},
                       tenant=tenant, count=sum(kinds.values()), at=minute)
            except Exception:  # noqa: BLE001  (counting must not fail the request)
                logger.exception("could not write %s counts to the audit log", action)


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def audits_denials(cls: type) -> type:
    """Class decorator: each public method of ``cls`` (with ``_db``, ``_usage``, ``principal``)
    records a Forbidden (access.denied) or an IntegrityFailure (encryption.refused) it
    raises, once, however deeply its methods call each other."""
    wrapped: set[str] = set()
    for klass in cls.__mro__[:-1]:  # its bases' methods too (not object's)
        for name, member in list(vars(klass).items()):
            if not name.startswith("_") and inspect.isfunction(member) and name not in wrapped:
                wrapped.add(name)
                setattr(cls, name, _recording_denials(member))
    return cls


def _recording_denials(method: Callable) -> Callable:
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (Forbidden, IntegrityFailure) as exc:
            if not getattr(exc, "audited", False):
                exc.audited = True  # type: ignore[attr-defined]
                try:
                    named = signature.bind(self, *args, **kwargs).arguments.get("pipeline")
                except TypeError:
                    named = None
                named = named if isinstance(named, str) else None
                if isinstance(exc, Forbidden):
                    denied(self._usage, self.principal, exc, method.__name__)
                else:  # a tampered ciphertext: refused, and the tenant's admin should know
                    record_quietly(self._db, self.principal, "encryption.refused", named,
                                   {"operation": method.__name__, "message": exc.message})
            raise
    return wrapper
