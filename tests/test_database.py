"""The pool: opened once under concurrent first requests, sized and timed from settings."""

from __future__ import annotations

import threading
import uuid

from psycopg_pool import ConnectionPool

import pgbraid
from pgbraid.db import database, transaction_settings


def test_concurrent_first_searches_open_one_pool(server, pipeline, superuser, monkeypatch):
    opened: list[ConnectionPool] = []

    class CountedPool(ConnectionPool):  # the real pool, counted
        def __init__(self, *args, **kwargs) -> None:
            opened.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(database, "ConnectionPool", CountedPool)
    app_name = f"open-race-{uuid.uuid4().hex[:8]}"
    dsn = f"{server.status().dsn} application_name={app_name}"
    errors: list[BaseException] = []
    start = threading.Barrier(12)
    with pgbraid.connect(dsn=dsn, pool_size=2) as fresh:

        def first_search() -> None:
            start.wait()
            try:
                fresh.search(pipeline, "pump")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=first_search) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(opened) == 1
        (connections,) = superuser.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (app_name,)).fetchone()
        assert 1 <= connections <= 2


def test_pool_size_and_timeout_come_from_settings(monkeypatch, data_dir, server):
    monkeypatch.setenv("PGBRAID_POOL_SIZE", "3")
    monkeypatch.setenv("PGBRAID_POOL_TIMEOUT", "2.5")
    with pgbraid.connect(data_dir=data_dir) as client:
        client.pipelines()
        assert (client._db._pool.max_size, client._db._pool.timeout) == (3, 2.5)
    with pgbraid.connect(data_dir=data_dir) as client:
        assert client.settings.pool_size == 3
    monkeypatch.delenv("PGBRAID_POOL_SIZE")
    with pgbraid.connect(data_dir=data_dir) as client:
        assert client.settings.pool_size == 16 and client._db._max_size == 16


def test_a_database_migrated_by_another_build_is_refused_by_name(server, superuser):
    """Two builds that both number a migration 015 must not skip each other's."""
    import psycopg
    import pytest

    from pgbraid import BackendUnavailable
    from pgbraid.db.migrations import migrate, migration_files

    name = f"other_build_{uuid.uuid4().hex[:8]}"
    superuser.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    dsn = server.status().dsn.replace("dbname=postgres", f"dbname={name}")
    last, last_name, _ = migration_files()[-1]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            conn.execute("UPDATE pgbraid.schema_migrations SET name = 'x_other_build.sql'"
                         " WHERE version = %s", (last,))
            with pytest.raises(BackendUnavailable, match=f"{last} as x_other_build.sql.*{last_name}"):
                migrate(conn)
    finally:
        superuser.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))


def test_a_sessions_tenant_role_and_timeout_hold_for_its_transaction_only(client):
    """A session's settings hold in its transaction and end with it, whichever way they
    were sent: one set_config statement on a plain server, SET LOCAL each on a Citus
    coordinator (only those reach its workers)."""
    db = client._db
    db.open()
    citus = "citus" in db.extensions
    settings = ("SELECT current_user, current_setting('pgbraid.tenant', true),"
                " (SELECT setting FROM pg_settings WHERE name = 'statement_timeout')")
    with db.admin() as conn:
        login, _, timeout = conn.execute(settings).fetchone()
        with db.within(conn, "acme"):
            inside = conn.execute(settings).fetchone()
        assert inside == (database.APP_ROLE if db._drop_role else login, "acme",
                          str(db.statement_timeout_ms))
        assert conn.execute(settings).fetchone() in ((login, None, timeout),
                                                     (login, "", timeout))
        sent = transaction_settings._set_local_statements(conn, (("pgbraid.tenant", "acme"),),
                                              "pgbraid_app", citus)
        if citus:
            assert sent[0].startswith(b"SET LOCAL citus.propagate_set_commands")
            assert b'SET LOCAL ROLE "pgbraid_app"' in sent and len(sent) == 3
        else:
            assert sent == ((b"SELECT set_config('role', 'pgbraid_app', true),"
                             b" set_config('pgbraid.tenant', 'acme', true)"),)
        assert transaction_settings._set_local_statements(conn, (), database.LOGIN_ROLE,
                                                          True)[1] == \
            b"SET LOCAL ROLE NONE"
