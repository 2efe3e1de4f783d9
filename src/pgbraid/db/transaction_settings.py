"""A transaction's settings: the tenant's, the role's, the planner's, sent in one round
trip and composed once per process (db/database.py sessions, strategies' thresholds)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import psycopg
from psycopg import pq, sql

SET_LOCALS = 256
"""How many composed sets of settings statements a process keeps (set_local)."""
_SET_LOCALS: OrderedDict[tuple, tuple[bytes, ...]] = OrderedDict()
_SET_LOCALS_LOCK = threading.Lock()


def set_local(conn: psycopg.Connection, settings: dict[str, str], role: str | None = None,
              *, citus: bool = True) -> None:
    """Each setting (and the role, unless None; LOGIN_ROLE: the login role's own) for the
    rest of the transaction, in one round trip.

    ``citus`` (the server may be a Citus coordinator): ``SET LOCAL`` statements, one
    each, since only ``SET LOCAL`` reaches the workers, and only with
    ``citus.propagate_set_commands = 'local'`` (a setting a plain server keeps as an
    unused placeholder); without it a worker would check row-level security with no
    tenant (no rows: failing closed) and rank with its default thresholds. Otherwise
    one ``SELECT set_config(..., true)`` sets them all, the role too, with the same
    effect in the transaction (measured: ~200 us less a search than four statements
    in the same pipeline, docs/benchmarks.md)."""
    statements = _set_local_statements(conn, tuple(settings.items()), role, citus)
    # One statement each (a multi-statement string cannot be prepared, and a snapshot
    # sends these in pipeline mode, which prepares), in one round trip all the same.
    # Inside a pipeline already (a snapshot's opening), they are queued in it: psycopg
    # syncs on entering a nested pipeline with commands queued and again on leaving it,
    # two round trips more. An error still stops every statement queued after them
    # (PostgreSQL skips a pipeline's statements after an error until its sync).
    if conn.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        for statement in statements:
            conn.execute(statement)
        return
    with conn.pipeline():
        for statement in statements:
            conn.execute(statement)


LOGIN_ROLE = "none"
"""The role name (``SET ROLE NONE``, ``set_config('role', 'none', ...)``) that returns
to the session's login role."""


def _set_local_statements(conn: psycopg.Connection, settings: tuple[tuple[str, str], ...],
                          role: str | None, citus: bool) -> tuple[bytes, ...]:
    """The statements, composed once per (settings, role, kind, encoding) in this
    process (every search sends the tenant's; composing them anew cost more client
    time than the server spent running them: docs/benchmarks.md)."""
    key = (settings, role, citus, conn.info.encoding)
    with _SET_LOCALS_LOCK:
        found = _SET_LOCALS.get(key)
        if found is not None:
            _SET_LOCALS.move_to_end(key)
            return found
    if citus:
        statements = [sql.SQL("SET LOCAL citus.propagate_set_commands = 'local'")]
        if role is not None:
            statements.append(sql.SQL("SET LOCAL ROLE {}").format(
                sql.SQL("NONE") if role == LOGIN_ROLE else sql.Identifier(role)))
        statements += [sql.SQL("SET LOCAL {} = {}").format(
            sql.SQL(".").join(map(sql.Identifier, name.split("."))), sql.Literal(value))
            for name, value in settings]
    else:
        pairs = ([("role", role)] if role is not None else []) + list(settings)
        statements = [sql.SQL("SELECT {}").format(sql.SQL(", ").join(
            sql.SQL("set_config({}, {}, true)").format(sql.Literal(name), sql.Literal(value))
            for name, value in pairs))]
    composed = tuple(statement.as_bytes(conn) for statement in statements)
    with _SET_LOCALS_LOCK:
        _SET_LOCALS[key] = composed
        while len(_SET_LOCALS) > SET_LOCALS:
            _SET_LOCALS.popitem(last=False)
    return composed
