"""Connections: a lazily opened pool, migrations on first use, and tenant sessions.

A session is one transaction in which the tenant is set (``pgbraid.tenant``) and,
when the login role could bypass row-level security (a superuser, as on the
embedded server), the role drops to ``pgbraid_app`` so RLS always applies.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import BackendTimeout, BackendUnavailable, PgbraidError
from .migrations import migrate

APP_ROLE = "pgbraid_app"


class Database:
    def __init__(self, dsn: str, *, statement_timeout_ms: int = 30_000, max_size: int = 4) -> None:
        self.dsn = dsn
        self.statement_timeout_ms = statement_timeout_ms
        self._max_size = max_size
        self._pool: ConnectionPool | None = None
        self._drop_role = False
        self.extensions: frozenset[str] = frozenset()

    def open(self) -> None:
        if self._pool is not None:
            return
        pool = ConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self._max_size,
            configure=_register_vector,
            # Every planner or session setting is SET LOCAL inside the transaction, so
            # server-side prepared statements (after 5 runs) are safe and save planning.
            kwargs={"autocommit": True},
            open=False,
            name="pgbraid",
        )
        try:
            pool.open(wait=True, timeout=15)
        except PoolTimeout as exc:
            pool.close()
            raise BackendUnavailable(f"cannot connect to PostgreSQL ({_safe_dsn(self.dsn)})") from exc
        with pool.connection() as conn:
            migrate(conn)
            _register_vector(conn)  # the extension may have been created just now
            row = conn.execute(
                "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
            self._drop_role = bool(row and row[0])
            self.extensions = frozenset(
                r[0] for r in conn.execute("SELECT extname FROM pg_extension")
            )
        self._pool = pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextmanager
    def session(self, tenant: str, *, read_only: bool = False) -> Iterator[psycopg.Connection]:
        """One transaction under the tenant's row-level security; ``read_only``: one
        snapshot for all its statements (BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY)."""
        self.open()
        assert self._pool is not None
        with self._pool.connection() as conn, translate_errors(), _snapshot(conn, read_only), \
                conn.transaction():
            conn.execute(
                "SELECT set_config('role', %s, true), set_config('pgbraid.tenant', %s, true),"
                " set_config('statement_timeout', %s, true)",
                (APP_ROLE if self._drop_role else "none", tenant, str(self.statement_timeout_ms)),
            )
            yield conn

    @contextmanager
    def admin(self) -> Iterator[psycopg.Connection]:
        """A connection as the login role, outside RLS (index builds, diagnostics)."""
        self.open()
        assert self._pool is not None
        with self._pool.connection() as conn, translate_errors():
            yield conn


@contextmanager
def _snapshot(conn: psycopg.Connection, read_only: bool) -> Iterator[None]:
    """The next BEGIN opens a read-only repeatable-read transaction (reset afterwards:
    the connection goes back to the pool)."""
    if not read_only:
        yield
        return
    conn.isolation_level, conn.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
    try:
        yield
    finally:
        conn.isolation_level, conn.read_only = None, None


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
    except psycopg.errors.QueryCanceled as exc:
        raise BackendTimeout("PostgreSQL cancelled the statement (statement timeout)") from exc
    except psycopg.OperationalError as exc:
        raise BackendUnavailable(f"PostgreSQL is unavailable: {exc.sqlstate or 'connection lost'}") from exc


def _safe_dsn(dsn: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "invalid DSN"
    info.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in info.items())
