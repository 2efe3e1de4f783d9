"""Connections: a lazily opened pool, migrations on first use, and tenant sessions.

A session is one transaction in which the tenant is set (``pgbraid.tenant``) and,
when the login role could bypass row-level security (a superuser, as on the
embedded server), the role drops to ``pgbraid_app`` so RLS always applies. A
session for an entity source names its own role (the tenant's source reader),
which it always takes, whatever the login role.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import BackendTimeout, BackendUnavailable, InvalidRequest, PgbraidError
from . import pipelining
from .liveness import in_words, lost
from .migrations import migrate, superuser_steps
from .transaction_settings import LOGIN_ROLE, set_local

logger = logging.getLogger("pgbraid.db")
logger.addHandler(logging.NullHandler())
"""Where a connection failure's DSN goes: the server's log (``serve`` gives the
``pgbraid`` logger a stderr handler); the CLI and Python print nothing of it unless
the application configures logging."""
APP_ROLE = "pgbraid_app"
LEG_WAIT_S = 0.2
"""How long a leg waits for a pooled connection of its own before it runs, in turn,
on the search's main session instead (same snapshot either way)."""


class Database:
    def __init__(self, dsn: str, *, statement_timeout_ms: int = 30_000, max_size: int = 16,
                 timeout: float = 10.0, standby: bool = False) -> None:
        self.dsn = dsn
        self.standby = standby
        """A read replica (replicas.py): never migrated, every transaction read-only."""
        self.statement_timeout_ms = statement_timeout_ms
        self.timeout = timeout
        """Seconds to wait for a pooled connection (and for the first one)."""
        self._max_size = max_size
        self._pool: ConnectionPool | None = None
        self._opening = threading.Lock()
        self._drop_role = False
        self.extensions: frozenset[str] = frozenset()
        self.migrated: list[str] = []
        """The migrations this process applied when it opened the pool."""
        self.superuser_steps: list[str] = []
        """What a superuser still has to run here (migrations.needs_superuser), as text."""

    def open(self) -> None:
        """Open the pool and migrate, once: concurrent first requests wait for one opener."""
        if self._pool is not None:
            return
        with self._opening:
            if self._pool is None:
                self._pool = self._open_pool()

    def _open_pool(self) -> ConnectionPool:
        kwargs: dict = {"autocommit": True}
        if "application_name" not in _conninfo(self.dsn):
            kwargs["application_name"] = "pgbraid"
        if self.standby:  # no write reaches it, even if it was promoted meanwhile
            kwargs["options"] = (_conninfo(self.dsn).get("options", "")
                                 + " -c default_transaction_read_only=on").strip()
        # Every planner or session setting is SET LOCAL inside the transaction, so
        # server-side prepared statements (after 5 runs) are safe and save planning.
        pool = ConnectionPool(self.dsn, min_size=1, max_size=self._max_size,
                              configure=_register_vector, kwargs=kwargs, open=False,
                              timeout=self.timeout,
                              name="pgbraid-read" if self.standby else "pgbraid")
        try:
            pool.open(wait=True, timeout=self.timeout)
        except PoolTimeout as exc:
            pool.close()
            # Where it tried goes to the server's log only: a client (HTTP, /readyz
            # without a key, CLI, Python) never learns the user, database, host or options.
            logger.error("cannot connect to PostgreSQL (%s) within %g s",
                         logged_dsn(self.dsn), self.timeout)
            raise BackendUnavailable(f"cannot connect to PostgreSQL within {self.timeout:g} s "
                                     "(where it tried is logged, not shown)") from None
        try:
            with translate_errors(), pool.connection() as conn:
                self._inspect(conn)
        except BaseException:
            pool.close()
            raise
        return pool

    def _inspect(self, conn: psycopg.Connection) -> None:
        from .cluster import active_workers

        if active_workers(conn) == 0:
            logger.error("PostgreSQL at %s is a Citus coordinator without active workers",
                         logged_dsn(self.dsn))
            raise BackendUnavailable(
                "the server is a Citus coordinator without active workers: add "
                "them (citus_add_node, or pgbraid cluster start --workers 2)")
        if not self.standby:
            self.migrated = migrate(conn)
            self.superuser_steps = superuser_steps(conn)
        _register_vector(conn)  # the extension may have been created just now
        row = conn.execute(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        self._drop_role = bool(row and row[0])
        self.extensions = frozenset(r[0] for r in conn.execute("SELECT extname FROM pg_extension"))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """``ConnectionPool.connection`` (commit or roll back at the end, then return it),
        over ``checkout``: never a connection that died while it sat in the pool."""
        self.open()
        assert self._pool is not None
        conn = self.checkout()
        try:
            with conn:
                yield conn
        finally:
            self._pool.putconn(conn)

    def checkout(self, timeout: float | None = None) -> psycopg.Connection:
        """A pooled connection (``putconn`` it back) that the server has not closed while
        it was idle. A restart leaves every idle connection dead: when one is, the pool
        probes the others at once (``check``) and replaces the dead ones, so no request
        after a restart fails on a connection of the old server. PoolTimeout, chained
        from why the connection was lost, when no new one comes in time."""
        assert self._pool is not None
        conn = self._pool.getconn(timeout)
        why = lost(conn)
        if why is None:
            return conn
        self._pool.putconn(conn)  # broken: the pool discards it and connects anew
        logger.warning("a pooled connection was dead: %s; probing the others", in_words(why))
        self._pool.check()
        try:
            return self._pool.getconn(timeout)
        except PoolTimeout as exc:
            raise exc from why

    @contextmanager
    def session(self, tenant: str, *, role: str | None = None) -> Iterator[psycopg.Connection]:
        """One transaction under the tenant's row-level security (as ``role`` when given)."""
        with self._workers_named(), translate_errors(), self._connection() as conn, \
                conn.transaction():
            self._enter(conn, tenant, role)
            yield conn

    @contextmanager
    def within(self, conn: psycopg.Connection, tenant: str) -> Iterator[psycopg.Connection]:
        """One transaction under the tenant's row-level security on a connection the caller
        holds across transactions (``admin()``: a session-level advisory lock outlives each)."""
        with translate_errors(), conn.transaction():
            self._enter(conn, tenant)
            yield conn

    def _enter(self, conn: psycopg.Connection, tenant: str, role: str | None = None) -> None:
        if role is None:
            role = APP_ROLE if self._drop_role else LOGIN_ROLE
        set_local(conn, {"pgbraid.tenant": tenant,
                         "statement_timeout": str(self.statement_timeout_ms)},
                  role=role, citus="citus" in self.extensions)

    @contextmanager
    def snapshot(self, tenant: str, opening: Callable[[psycopg.Connection], Any] | None = None
                 ) -> Iterator["Snapshot"]:
        """A read-only REPEATABLE READ transaction under the tenant's row-level
        security: every statement of a search sees one snapshot, and legs on other
        sessions can share it (``Snapshot.leg``). BEGIN, the tenant's settings and
        what ``opening`` sends (it returns its cursors: ``Snapshot.opened``) travel
        in one round trip (a pipeline); their rows are read after it."""
        with self._workers_named(), translate_errors(), self._connection() as conn:
            def first() -> Any:
                self._enter(conn, tenant)
                return opening(conn) if opening is not None else None

            with _explicit(conn, (SNAPSHOT,), first) as opened:
                yield Snapshot(self, conn, tenant, opened)

    @contextmanager
    def _workers_named(self) -> Iterator[None]:
        """On a Citus coordinator, a lost connection names the workers it cannot reach
        (by pg_dist_node id: their host and port go to the server's log only)."""
        try:
            yield
        except BackendUnavailable as exc:
            if "citus" not in self.extensions or not isinstance(exc.__cause__, psycopg.Error):
                raise
            down = unreachable_workers(self.dsn)
            if not down:
                raise
            for node, host, port in down:
                logger.error("Citus worker node %s (%s:%s) is unreachable", node, host, port)
            named = ", ".join(str(node) for node, _, _ in down)
            raise BackendUnavailable(
                f"Citus worker node {named} (pg_dist_node.nodeid) cannot be reached: the "
                "search was not answered (no partial result)", workers=[n for n, _, _ in down]
            ) from exc

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection]:
        """A connection as the login role, outside RLS (index builds, diagnostics)."""
        with translate_errors(), self._connection() as conn:
            yield conn


    def ready(self) -> None:
        """Reachable, and every migration applied (BackendUnavailable otherwise)."""
        from .migrations import pending

        with self.admin() as conn:
            missing = pending(conn)
        if missing:
            raise BackendUnavailable(f"migrations not applied: {', '.join(missing)}")


class Snapshot:
    """One search's snapshot: its main session, and sessions that import it."""

    def __init__(self, db: Database, conn: psycopg.Connection, tenant: str,
                 opened: Any = None) -> None:
        self.db = db
        self.conn = conn
        self.tenant = tenant
        self.opened = opened
        """What ``Database.snapshot``'s ``opening`` returned (its statements' cursors)."""
        self._exported: str | None = None

    def export(self) -> None:
        """Export the snapshot (on the main session, before legs start in threads)."""
        if self._exported is None:
            self._exported = self.conn.execute("SELECT pg_export_snapshot()").fetchone()[0]

    @contextmanager
    def leg(self) -> Iterator[psycopg.Connection | None]:
        """A session of its own in this snapshot, or None when the pool has none free
        soon (the caller then runs the leg on the main session)."""
        assert self._exported is not None and self.db._pool is not None
        if "citus" in self.db.extensions:
            # An imported snapshot is the coordinator's only: each session's workers take
            # their own. On the main session every leg reads the one worker transaction.
            yield None
            return
        try:
            conn = self.db.checkout(LEG_WAIT_S)
        except PoolTimeout:
            yield None
            return
        try:
            begin = (SNAPSHOT, sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                sql.Literal(self._exported)))
            with translate_errors(), _explicit(conn, begin,
                                               lambda: self.db._enter(conn, self.tenant)):
                yield conn
        finally:
            self.db._pool.putconn(conn)


SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


class SnapshotEnded(Exception):
    """A strategy needs another statement after ``run_last`` ended its snapshot: the
    engine runs the search again, with nothing ending it early. Internal: never raised
    to a caller."""


@contextmanager
def _explicit(conn: psycopg.Connection, begin: tuple[str | sql.Composable, ...],
              first: Callable[[], Any]) -> Iterator[Any]:
    """A transaction begun by our own statements (psycopg's begins have no snapshot
    import), sent in one pipeline with ``first``'s (yielded: what it returned);
    committed on success, unless its last statement ended it already (``run_last``),
    and rolled back on any error."""
    try:
        with pipelining.batched(conn):
            for statement in begin:
                conn.execute(statement)
            opened = first()
        yield opened
    except BaseException:
        if not conn.closed:
            conn.rollback()
        raise
    conn.commit()  # nothing to do when run_last committed


def run_last(conn: psycopg.Connection, statement: sql.Composable | str, params: dict[str, Any],
             **cursor_options: Any) -> list[Any]:
    """The rows of a snapshot's last statement, its COMMIT sent in the same round trip
    (a pipeline, one write: pipelining.py): the snapshot ends with it, so nothing may run
    in it afterwards."""
    with pipelining.batched(conn):
        cur = conn.cursor(**cursor_options)
        cur.execute(statement, params)
        conn.execute("COMMIT")
    return cur.fetchall()


def unreachable_workers(dsn: str) -> list[tuple[int, str, int]]:
    """The active Citus workers the coordinator at ``dsn`` cannot connect to."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(
                "SELECT nodeid, nodename, nodeport FROM pg_dist_node WHERE isactive"
                " AND groupid <> 0 AND NOT citus_check_connection_to_node(nodename, nodeport)"
                " ORDER BY nodeid").fetchall()
    except psycopg.Error:
        return []  # the coordinator itself is gone: the error says so already


def _register_vector(conn: psycopg.Connection) -> None:
    """Binary vector adapters (numpy <-> pgvector) when the extension exists."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass  # no pgvector here: vector strategies report it


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise driver errors as the most specific pgbraid error."""
    try:
        yield
    except PgbraidError:
        raise
    except PoolTimeout as exc:
        if isinstance(exc.__cause__, psycopg.Error):  # Database.checkout: one died, none came
            raise BackendUnavailable(f"PostgreSQL is unavailable: {in_words(exc.__cause__)}; no "
                                     "new connection came in time") from exc
        raise BackendUnavailable("no PostgreSQL connection came in time: the server is down "
                                 "or every pooled connection is busy") from exc
    except psycopg.errors.QueryCanceled as exc:
        raise BackendTimeout("PostgreSQL cancelled the statement (statement timeout)") from exc
    except psycopg.OperationalError as exc:
        raise BackendUnavailable(f"PostgreSQL is unavailable: {in_words(exc)}") from exc
    except psycopg.DataError as exc:  # class 22: a value PostgreSQL cannot take
        raise InvalidRequest(f"PostgreSQL refused a value of the request "
                             f"(SQLSTATE {exc.sqlstate or 'none: NUL byte'})") from exc
    except UnicodeEncodeError as exc:  # a lone surrogate cannot be sent as UTF-8
        raise InvalidRequest("text must not contain lone surrogates (invalid Unicode)") from exc


def _conninfo(dsn: str) -> dict:
    try:
        return psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return {}


SECRET_DSN_PARTS = ("password", "sslpassword")


def logged_dsn(dsn: str) -> str:
    """The DSN for the server's log: every part but the secrets (never for a client)."""
    info = _conninfo(dsn)
    if not info:
        return "invalid DSN"
    for part in SECRET_DSN_PARTS:
        info.pop(part, None)
    return " ".join(f"{k}={v}" for k, v in info.items())
