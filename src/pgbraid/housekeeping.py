"""What a write does after its commit, where a failure must not make the call an error.

An ingest's batches and a pipeline's deletion are committed before these run: merging
GIN pending lists and refreshing planner statistics after an ingest (writes.py), and
dropping a deleted pipeline's HNSW indexes and Apache AGE mirror (``drop_deleted``).
Each runs in a transaction of its own under ``lock_timeout``
(``PGBRAID_HOUSEKEEPING_LOCK_TIMEOUT_MS``): behind a session that holds a lock it needs
(DROP INDEX waits for every running search of ``pgbraid.embeddings``; a REINDEX holds a
GIN index) it gives up instead of keeping the caller waiting. A failure there is not the
call's: the call returns its normal result with a warning, ``{"step", "message"}``, in
its ``warnings`` (the ingest report, the pipeline delete's answer; the same over Python,
CLI ``--json`` and HTTP), and the log. So a committed write is never reported as failed,
and retried for nothing.

A deleted pipeline's objects that could not be dropped are listed in
``pgbraid.leftovers`` (migration 055), by the login role, and the tenant's next
pipeline delete drops them (logged, not shown: they were shown when they were left).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import psycopg

from .db.database import Database
from .errors import PgbraidError, describe

logger = logging.getLogger("pgbraid")

StepWarning = dict[str, str]
"""``{"step", "message"}``: one step that did not finish (not the builtin ``Warning``)."""

WHAT = {"vector_indexes": "HNSW indexes", "graph_mirror": "Apache AGE graph mirror"}


@dataclass(frozen=True)
class Leftover:
    deleted: int
    """The deleted pipeline's id."""
    kind: str
    graph: str | None = None


def attempt(db: Database, lock_timeout_ms: int, step: str, what: str,
            work: Callable[[psycopg.Connection], None]) -> list[StepWarning]:
    """Run ``work`` on a login-role connection in one transaction under ``lock_timeout``;
    nothing when it succeeds, else one warning (``what``, then why), logged too."""
    try:
        with db.admin() as conn, conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)",
                         (f"{int(lock_timeout_ms)}ms",))
            work(conn)
    except (PgbraidError, psycopg.Error) as exc:
        why = _why(exc, lock_timeout_ms)
        logger.warning("after a commit, %s: %s (%s)", step, what, why)
        return [{"step": step, "message": f"{what}: {why}"}]
    return []


def _why(exc: BaseException, lock_timeout_ms: int) -> str:
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if isinstance(cause, psycopg.errors.LockNotAvailable):
        return (f"another session held a lock it needs for over {int(lock_timeout_ms)} ms "
                "(PGBRAID_HOUSEKEEPING_LOCK_TIMEOUT_MS)")
    return describe(exc).message  # a driver error not translated: "internal error", logged


def drop_deleted(db: Database, tenant: str, name: str, left: list[Leftover],
                 lock_timeout_ms: int) -> list[StepWarning]:
    """Drop the objects of pipeline ``name``, deleted and committed, and those earlier
    deletes of the tenant left; warnings for this pipeline's that stay."""
    warnings: list[StepWarning] = []
    for item in left:
        failed = attempt(db, lock_timeout_ms, f"drop_{item.kind}",
                         f"pipeline {name!r} is deleted, but its {WHAT[item.kind]} could not be "
                         "dropped now (the tenant's next pipeline delete drops them)",
                         lambda conn, item=item: _drop(conn, item))
        if failed:
            _remember(db, tenant, item)
        warnings += failed
    _retry(db, tenant, lock_timeout_ms, skip=set(left))
    return warnings


def _drop(conn: psycopg.Connection, item: Leftover) -> None:
    if item.kind == "vector_indexes":
        from .strategies.vector import store

        store.drop_indexes(conn, item.deleted)
    else:  # a graph is a schema: the login role's
        from .strategies.graph.age import drop_mirror

        assert item.graph is not None
        drop_mirror(conn, item.graph)


def _remember(db: Database, tenant: str, item: Leftover) -> None:
    try:
        with db.admin() as conn, conn.transaction():
            _as_tenant(conn, tenant)
            conn.execute("INSERT INTO pgbraid.leftovers (tenant_id, deleted, kind, graph)"
                         " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                         (tenant, item.deleted, item.kind, item.graph))
    except (PgbraidError, psycopg.Error):
        logger.exception("could not list the %s of deleted pipeline %d for a later drop",
                         WHAT[item.kind], item.deleted)


def _retry(db: Database, tenant: str, lock_timeout_ms: int, skip: set[Leftover]) -> None:
    """Drop what earlier deletes of the tenant left (quietly: logged on failure)."""
    try:
        left = leftovers(db, tenant)
    except (PgbraidError, psycopg.Error):
        logger.exception("could not read the leftovers of deleted pipelines")
        return
    for item in left:
        if item in skip or attempt(db, lock_timeout_ms, f"drop_{item.kind}",
                                   f"the {WHAT[item.kind]} of a deleted pipeline ({item.deleted})"
                                   " could still not be dropped", lambda c, i=item: _drop(c, i)):
            continue
        try:
            with db.admin() as conn, conn.transaction():
                _as_tenant(conn, tenant)
                conn.execute("DELETE FROM pgbraid.leftovers WHERE tenant_id = %s"
                             " AND deleted = %s AND kind = %s", (tenant, item.deleted, item.kind))
        except (PgbraidError, psycopg.Error):  # dropped: the next retry finds nothing to drop
            logger.exception("could not forget a dropped leftover")


def _as_tenant(conn: psycopg.Connection, tenant: str) -> None:
    """The tenant for row-level security (an external server's login owns the table)."""
    conn.execute("SELECT set_config('pgbraid.tenant', %s, true)", (tenant,))


def leftovers(db: Database, tenant: str) -> list[Leftover]:
    """What the tenant's deletes left undropped, the oldest first."""
    with db.admin() as conn, conn.transaction():
        _as_tenant(conn, tenant)
        rows = conn.execute("SELECT deleted, kind, graph FROM pgbraid.leftovers"
                            " WHERE tenant_id = %s ORDER BY left_at", (tenant,)).fetchall()
    return [Leftover(*row) for row in rows]
