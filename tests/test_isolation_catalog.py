"""The table-owner bypass is closed: every table of pgbraid's schema, read from the
catalog (so a new table is covered the day it is added), shows no row to the
application role without a tenant, whether that role is ``pgbraid_app`` (the
embedded server's sessions) or the login that owns the tables (an external
server, where the login migrates and so owns everything)."""

from __future__ import annotations

import hashlib
import uuid

import psycopg
import pytest
from psycopg import sql

import pgbraid
from pgbraid import audit

from .external import owned_database

NOT_TENANT_DATA = {"schema_migrations"}
"""Tables that hold no tenant's rows: the application role may not read them at all."""
UNSET = ("a connection that never set a tenant", None)
RESET = ("a connection whose last session set one", "")


def _tables(conn: psycopg.Connection) -> list[tuple[str, bool, bool, bool]]:
    """(name, row level security, forced, has tenant_id) of every table-like relation."""
    return conn.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
        " EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
        "         AND a.attname = 'tenant_id' AND NOT a.attisdropped)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgbraid' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        " ORDER BY c.relname").fetchall()


def _stock(client: pgbraid.Client) -> None:
    """A row in as many tables as the public API can reach."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    client.define_classification("secret", ["internal"])
    client.ingest(name, [{"id": f"d{i}", "text": f"owner bypass probe {i}",
                          "classification": ["secret"] if i else ["public"]} for i in range(3)])
    client.delete_document(name, "d2")
    client.load_graph_records(name, [("org", "acme", "Acme", ["d0"]),
                                     ("org", "globex", "Globex", [])],
                              [("org", "acme", "supplies", "org", "globex")])
    client.create_key(pipeline=name, permissions="read")
    audit.record(client._db, client.principal, "pipeline.create", name)
    client.search(name, "probe")


def _counts(conn: psycopg.Connection, tables: list[str]) -> dict[str, int | None]:
    """Rows each table shows this connection (None: it may not read the table at all)."""
    seen: dict[str, int | None] = {}
    for table in tables:
        try:
            with conn.transaction():
                seen[table] = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier("pgbraid", table))).fetchone()[0]
        except psycopg.errors.InsufficientPrivilege:
            seen[table] = None
    return seen


def _without_tenant(conn: psycopg.Connection, value: str | None) -> None:
    if value is not None:
        conn.execute("SELECT set_config('pgbraid.tenant', %s, false)", (value,))
    assert conn.execute("SELECT coalesce(current_setting('pgbraid.tenant', true), 'unset')"
                        ).fetchone()[0] == ("unset" if value is None else value)


def test_every_tenant_table_forces_row_level_security(client, superuser):
    client.pipelines()  # migrated
    tables = _tables(superuser)
    assert len(tables) >= 15
    for name, enabled, forced, tenant_column in tables:
        if name in NOT_TENANT_DATA:
            assert not tenant_column, name
            continue
        assert tenant_column and enabled and forced, (name, enabled, forced, tenant_column)


@pytest.mark.parametrize(("case", "value"), [UNSET, RESET], ids=["unset", "reset"])
def test_pgbraid_app_sees_no_row_of_any_table_without_a_tenant(client, server, superuser,
                                                                case, value):
    _stock(client)
    names = [t[0] for t in _tables(superuser)]
    stored = _counts(superuser, names)
    with psycopg.connect(server.status().dsn, autocommit=True) as conn:
        conn.execute("SET ROLE pgbraid_app")
        _without_tenant(conn, value)
        seen = _counts(conn, names)
    assert {t: n for t, n in seen.items() if n} == {}, case
    assert {t for t, n in seen.items() if n is None} == NOT_TENANT_DATA
    populated = {t for t, n in stored.items() if n and t not in NOT_TENANT_DATA}
    assert {"pipelines", "documents", "versions", "fragments", "bm25_postings", "api_keys",
            "audit_log", "edges", "vertices", "classifications"} <= populated


def test_the_owner_of_the_tables_sees_no_row_without_a_tenant_and_cannot_rewrite_the_log(
        server, superuser):
    with owned_database(server, superuser) as dsn:
        with pgbraid.connect(dsn=dsn, tenant="owner-probe") as client:
            _stock(client)
        with psycopg.connect(dsn, autocommit=True) as conn:
            owner = conn.execute("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles"
                                 " WHERE rolname = current_user").fetchone()
            tables = _tables(conn)
            owned = conn.execute("SELECT bool_and(pg_get_userbyid(relowner) = current_user)"
                                 " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                                 " WHERE n.nspname = 'pgbraid' AND c.relkind = 'r'").fetchone()[0]
            assert owner[1:] == (False, False) and owned
            names = [t[0] for t in tables if t[0] not in NOT_TENANT_DATA]
            for _, value in (UNSET, RESET):
                _without_tenant(conn, value)
                assert {t: n for t, n in _counts(conn, names).items() if n} == {}
            _without_tenant(conn, "owner-probe")  # the same reads with the tenant: rows
            assert {"pipelines", "fragments", "audit_log"} <= {
                t for t, n in _counts(conn, names).items() if n}
            for statement in ("UPDATE pgbraid.audit_log SET action = 'key.use'",
                              "DELETE FROM pgbraid.audit_log", "TRUNCATE pgbraid.audit_log"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                    conn.execute(statement)
            assert _counts(conn, ["audit_log"])["audit_log"] >= 1


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def test_the_owner_reads_no_key_row_it_does_not_hold_the_token_of(server, superuser):
    """On an external server the request sessions are the owner's: whatever setting
    such a session turns on, it lists no key row of any tenant; only the digest lookup
    (which needs the token) answers, with that one key's row and nothing left set."""
    with owned_database(server, superuser) as dsn:
        keys = {}
        for tenant in ("keys-a", "keys-b"):
            with pgbraid.connect(dsn=dsn, tenant=tenant) as client:
                client.create_pipeline("notes", embedder="none")
                keys[tenant] = client.create_key(pipeline="notes", permissions="read")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for setting in ("pgbraid.key_lookup", "pgbraid.key_digest"):
                conn.execute("SELECT set_config(%s, 'on', false)", (setting,))
            for value in (None, "", "keys-a"):
                if value is not None:
                    conn.execute("SELECT set_config('pgbraid.tenant', %s, false)", (value,))
                seen = {row[0] for row in conn.execute("SELECT tenant_id FROM pgbraid.api_keys")}
                assert seen == ({"keys-a"} if value == "keys-a" else set()), value
            conn.execute("SELECT set_config('pgbraid.tenant', '', false)")
            with conn.transaction():
                found = conn.execute("SELECT id, tenant_id FROM pgbraid.api_key_by_digest(%s)",
                                     (_digest(keys["keys-b"]["key"]),)).fetchall()
                assert found == [(keys["keys-b"]["id"], "keys-b")]
                assert conn.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0] == 0
        with pgbraid.connect(dsn=dsn, tenant="keys-a") as client:
            assert client.authenticate(keys["keys-b"]["key"]).tenant == "keys-b"
