"""What a Client does as its tenant's admin, and how its key is checked: API keys,
classifications, the audit log. A base of ``client.Client`` (which holds ``_db``,
``principal``, ``settings``, ``_usage`` and ``_session``); kept apart so each file stays short."""

from __future__ import annotations

from typing import Any, Iterable

from . import apikeys, audit
from .errors import Forbidden
from .models import parse_classifications
from .scope import CLOSE_CLASSIFICATIONS, Principal


class TenantAdmin:
    def authenticate(self, token: str | None) -> Principal:
        """The principal an API key stands for (Unauthorized when none, revoked or expired:
        counted per minute in the key's tenant, or under no tenant when no key is known)."""
        return apikeys.authenticate(lambda: self._db.session(""), token, self._refused)

    def _refused(self, row: dict[str, Any] | None, why: str) -> None:
        if row is None:
            self._usage.add(audit.ANONYMOUS_TENANT, "anonymous", "key.refused", why)
        else:
            # Counted per key and minute: a flood of a revoked key is not a flood of rows.
            self._usage.add(row["tenant_id"], f"key:{row['id']}", "key.refused", why,
                            target=row["id"])

    def require(self, pipeline: str, *permissions: str, operation: str) -> None:
        """Refuse (Forbidden, counted in the audit log as ``operation``) unless this client's
        principal holds ``permissions`` on ``pipeline``: a check before a request's input
        is read (HTTP ingestion checks write before it parses the body)."""
        try:
            self.principal.require(pipeline, *permissions)
        except Forbidden as exc:
            exc.audited = True  # type: ignore[attr-defined]  (here, as the operation named)
            audit.denied(self._usage, self.principal, exc, operation)
            raise

    def note_use(self, operation: str) -> None:
        """Count one request of this client's key (audit.Usage: a row per key per minute)."""
        self._usage.add(self.tenant, self.principal, "key.use", operation)

    def define_classification(self, name: str, implies: Iterable[str] = ()) -> None:
        """Declare that holding ``name`` also grants ``implies`` (e.g. secret -> internal).

        The unrestricted admin's only: the hierarchy is the whole tenant's, so a bounded
        admin defining "public implies secret" would widen its own bound, and every
        reader's, to secret."""
        self.principal.require_unrestricted_admin("defining a classification")
        (name,) = parse_classifications([name])
        implied = list(parse_classifications(list(implies))) if implies else []
        with self._session() as conn:
            # One definition at a time per tenant, so each recomputation of the
            # closures sees every definition committed before it.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgbraid.classifications'),"
                         " hashtext(current_setting('pgbraid.tenant')))")
            conn.execute(
                "INSERT INTO pgbraid.classifications (name, implies) VALUES (%s, %s)"
                " ON CONFLICT (tenant_id, name) DO UPDATE SET implies = EXCLUDED.implies",
                (name, implied))
            conn.execute(CLOSE_CLASSIFICATIONS)
            audit.record(conn, self.principal, "classification.define", name,
                         {"implies": implied})

    # -- API keys (see apikeys.py) -------------------------------------------------

    def create_key(self, **grants: Any) -> dict[str, str]:
        """A new key of this tenant, ``{"id", "key"}`` (the key is shown only now):
        ``pipeline`` (or "*"), ``permissions``, ``classification``, ``expires``, ``admin``."""
        with self._session() as conn:
            created = apikeys.create(conn, self.principal, **grants)
            audit.record(conn, self.principal, "key.create", created["id"],
                         _stored_grants(conn, created["id"]))
            return created

    def keys(self) -> list[dict[str, Any]]:
        with self._session() as conn:
            return apikeys.listing(conn, self.principal)

    def revoke_key(self, key_id: str) -> dict[str, str]:
        """Revoke a key: the next request that presents it is refused. A key beyond this
        principal's grants is NotFound, as an unknown id is (its refusal is audited)."""
        with self._session() as conn:
            revoked = apikeys.revoke(conn, self.principal, key_id, lambda exc: audit.denied(
                self._usage, self.principal, exc, "revoke_key"))
            audit.record(conn, self.principal, "key.revoke", key_id)
            return revoked

    # -- the audit log (see audit.py) ------------------------------------------------

    def audit(self, *, since: Any = None, action: str | None = None, limit: int = 100,
              unauthenticated: bool = False) -> list[dict[str, Any]]:
        """The tenant's audit log, newest first (the tenant's unrestricted admin: its rows name
        every pipeline and document); ``unauthenticated``: the refusals that named no known
        key (the local process only)."""
        self.principal.require_unrestricted_admin("reading the audit log")
        tenant = self.tenant
        if unauthenticated:
            if self.principal.key_id is not None:
                raise Forbidden("only the local process reads the refusals of unknown keys",
                                action="reading the audit log")
            tenant = audit.ANONYMOUS_TENANT
        self._usage.flush()
        with self._db.session(tenant) as conn:
            return audit.listing(conn, since=since, action=action, limit=limit)

    def purge_audit(self, *, before: Any = None, unauthenticated: bool = False) -> dict[str, Any]:
        """Remove the tenant's audit rows older than ``before`` (an ISO-8601 date or time, or
        a span such as 90d; default: ``PGBRAID_AUDIT_RETENTION_DAYS`` back), recorded as
        ``audit.purged`` (audit.purge); ``unauthenticated``: the refusals of unknown keys.

        The operator's only (the local process, which holds the database's credentials):
        no API key may purge, not even the tenant's unrestricted admin, since the log is
        what shows a stolen admin key's use; that key could otherwise erase it."""
        if self.principal.key_id is not None:
            raise Forbidden("only the operator (the local process, not an API key) purges the "
                            "audit log", action="purging the audit log")
        self.principal.require_unrestricted_admin("purging the audit log")
        bound = audit.purge_bound(before, self.settings.audit_retention_days)
        self._usage.flush()  # counted minutes are written first, then purged like the rest
        tenant = audit.ANONYMOUS_TENANT if unauthenticated else self.tenant
        return audit.purge(self._db, tenant, self.principal, bound)


def _stored_grants(conn: Any, key_id: str) -> dict[str, Any]:
    """What a new key holds, as stored (not as its creator spelled it: "read,execute" from
    the CLI, a list over HTTP, permissions left to --admin's default): the audit's
    ``key.create`` detail has one shape whoever made the key."""
    pipeline, permissions, classifications, admin, expires = conn.execute(
        "SELECT pipeline, permissions, classifications, tenant_admin, expires_at"
        " FROM pgbraid.api_keys WHERE id = %s", (key_id,)).fetchone()
    return {"pipeline": pipeline, "permissions": list(permissions),
            "classification": None if classifications is None else list(classifications),
            "admin": bool(admin), "expires": None if expires is None else expires.isoformat()}
