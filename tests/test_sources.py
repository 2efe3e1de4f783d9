"""Entity sources as a security boundary: what may be registered, who reads, per-tenant names.

Every table, view and role here is created through a direct superuser
connection (the ``superuser`` fixture or ``_su``), never through pgbraid.
"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

import pgbraid
from pgbraid import Forbidden, InvalidRequest, NotEnabled, NotFound
from pgbraid.cli import app
from pgbraid.errors import Conflict
from pgbraid import sources
from pgbraid.sources import Source, reading, role_name

OTHER = "other"
runner = CliRunner()


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@contextmanager
def _su(server):
    with psycopg.connect(server.status().dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def migrated(data_dir, server):
    """pgbraid's schema exists (it is created on a client's first use)."""
    with pgbraid.connect(data_dir=data_dir) as client:
        client.sources()


def _table(su, name: str, rows: list[str], schema: str = "public") -> str:
    su.execute(sql.SQL("CREATE TABLE {} (id serial PRIMARY KEY, name text NOT NULL,"
                       " tenant_id text)").format(sql.Identifier(schema, name)))
    for row in rows:
        su.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s)").format(sql.Identifier(schema, name)),
                   (row,))
    return name


def _indexes(su, schema: str, table: str) -> list[str]:
    return sorted(r[0] for r in su.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s", (schema, table)))


def _footprint(su, schema: str, table: str) -> tuple:
    """Everything a registration could write: catalog rows, claims, indexes, grants to source roles."""
    grants = su.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,"
        " aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee"
        " WHERE n.nspname = %s AND c.relname = %s AND r.rolname LIKE 'pgbraid\\_src\\_%%'",
        (schema, table)).fetchone()[0]
    return (su.execute("SELECT count(*) FROM pgbraid.entity_sources").fetchone()[0],
            su.execute("SELECT count(*) FROM pgbraid.entity_source_tables").fetchone()[0],
            _indexes(su, schema, table), grants)


@pytest.fixture(scope="module")
def traps(server, migrated):
    """Relations of an allowed schema that must still be refused."""
    uid = _uid()
    names = {"view": f"versions_view_{uid}", "matview": f"versions_mat_{uid}",
             "plain_view": f"plain_view_{uid}", "parent": f"parent_{uid}"}
    with _su(server) as su:
        su.execute(sql.SQL("CREATE VIEW {} AS SELECT id, tenant_id, body FROM pgbraid.versions")
                   .format(sql.Identifier(names["view"])))
        su.execute(sql.SQL("CREATE MATERIALIZED VIEW {} AS SELECT id, body FROM pgbraid.versions")
                   .format(sql.Identifier(names["matview"])))
        _table(su, names["parent"], ["parent row"])
        su.execute(sql.SQL("CREATE VIEW {} AS SELECT id, name FROM {}").format(
            sql.Identifier(names["plain_view"]), sql.Identifier(names["parent"])))
        yield names


REFUSED = [  # (schema, table, key, text, create_indexes, message fragment): InvalidRequest
    ("pgbraid", "versions", "tenant_id", "body", False, "pgbraid's or PostgreSQL's"),
    ("pg_catalog", "pg_authid", "oid", "rolname", False, "pgbraid's or PostgreSQL's"),
    ("information_schema", "tables", "table_name", "table_name", False, "own schema"),
    ("pgbraid", "classifications", "name", "name", True, "pgbraid's or PostgreSQL's"),
    ("public", "{view}", "id", "body", False, "is a view"),
    ("public", "{view}", "id", "body", True, "is a view"),
    ("public", "{matview}", "id", "body", True, "is a materialized view"),
    ("public", "{plain_view}", "id", "name", False, "is a view"),
]


def _case(traps, case):
    schema, table, *rest = case
    return (schema, table.format(**traps), *rest)


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: f"{c[0]}.{c[1]}{'+indexes' if c[4] else ''}")
def test_refused_relations_write_nothing(client, superuser, traps, case):
    schema, table, key, text, indexes, fragment = _case(traps, case)
    before = _footprint(superuser, schema, table)
    with pytest.raises(InvalidRequest, match=fragment) as refused:
        client.add_source(f"leak_{_uid()}", table=f"{schema}.{table}", key=key, text=text,
                          create_indexes=indexes)
    assert refused.type is InvalidRequest
    assert _footprint(superuser, schema, table) == before


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: f"{c[0]}.{c[1]}{'+indexes' if c[4] else ''}")
def test_refused_relations_over_the_cli(env, superuser, traps, case):
    schema, table, key, text, indexes, fragment = _case(traps, case)
    before = _footprint(superuser, schema, table)
    args = ["source", "add", f"leak_{_uid()}", "--table", f"{schema}.{table}", "--key", key,
            "--text", text, *(["--create-indexes"] if indexes else [])]
    result = runner.invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 2, result.stdout
    body = json.loads(result.stdout)
    assert set(body) == {"error"} and body["error"]["code"] == "invalid_request"
    assert fragment in body["error"]["message"]
    human = runner.invoke(app, args, env=env)
    assert human.exit_code == 2 and "error:" in human.stdout
    assert _footprint(superuser, schema, table) == before


def test_a_table_with_a_child_in_a_reserved_schema_is_refused(client, superuser):
    """Reading a parent reads its children with the parent's grant and without their RLS."""
    parent = _table(superuser, f"inherited_{_uid()}", ["visible"])
    superuser.execute(sql.SQL("CREATE TEMP TABLE {} () INHERITS ({})").format(
        sql.Identifier(f"{parent}_child"), sql.Identifier(parent)))
    before = _footprint(superuser, "public", parent)
    with pytest.raises(InvalidRequest, match="pg_temp.*under public"):
        client.add_source(f"inh_{_uid()}", table=parent, key="id", text="name", create_indexes=True)
    assert _footprint(superuser, "public", parent) == before


def test_the_reported_attack_finds_no_secret(env, data_dir, server):
    """Tenant other holds a secret; tenant default registers pgbraid.versions and searches it."""
    with pgbraid.connect(data_dir=data_dir, tenant=OTHER) as other:
        pipeline = f"secrets-{_uid()}"
        other.create_pipeline(pipeline, embedder="none")
        other.ingest(pipeline, [{"id": "s1", "text": "the vault code is ZEBRA-SECRET-42"}])
    added = runner.invoke(app, ["source", "add", "leak", "--table", "pgbraid.versions", "--key",
                                "tenant_id", "--text", "body", "--json"], env=env)
    assert added.exit_code == 2 and json.loads(added.stdout)["error"]["code"] == "invalid_request"
    found = runner.invoke(app, ["source", "search", "leak", "ZEBRA-SECRET-42", "--type",
                                "fulltext", "--json"], env=env)
    assert found.exit_code == 2 and json.loads(found.stdout)["error"]["code"] == "not_found"
    assert "ZEBRA" not in added.stdout + found.stdout


def test_source_schemas_allow_list(data_dir, server, superuser):
    table = _table(superuser, f"listed_{_uid()}", ["a"])
    with pgbraid.connect(data_dir=data_dir, source_schemas="app, crm") as client:
        with pytest.raises(InvalidRequest, match="PGBRAID_SOURCE_SCHEMAS allows"):
            client.add_source(f"l_{_uid()}", table=table, key="id", text="name")
    assert _footprint(superuser, "public", table)[2:] == ([f"{table}_pkey"], 0)


# -- tenants ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_tenants(data_dir, server):
    """One source name, registered by each tenant over a table of its own, with indexes."""
    uid = _uid()
    name, mine, theirs = f"supplier_{uid}", f"mine_{uid}", f"theirs_{uid}"
    with _su(server) as su:
        _table(su, mine, ["Acme Metal Fabrication", "Globex Industrial"])
        _table(su, theirs, ["Initech Software", "Umbrella Pharmaceuticals"])
    with pgbraid.connect(data_dir=data_dir) as client:
        client.add_source(name, table=mine, key="id", text="name", create_indexes=True)
    return name, mine, theirs


def test_another_tenant_cannot_see_or_search_a_source(data_dir, two_tenants):
    name, _, _ = two_tenants
    with pgbraid.connect(data_dir=data_dir, tenant=f"nobody-{_uid()}") as other:
        with pytest.raises(NotFound):
            other.source(name)
        with pytest.raises(NotFound):
            other.search_source(name, "Acme", type="fulltext")
        with pytest.raises(NotFound):
            other.ground(name, "Acme Metal Fabrication")
        with pytest.raises(NotFound):
            other.remove_source(name)
        assert name not in {s["name"] for s in other.sources()}


def test_one_name_two_tenants_two_tables_two_sets_of_indexes(data_dir, superuser, two_tenants):
    name, mine, theirs = two_tenants
    with pgbraid.connect(data_dir=data_dir, tenant=OTHER) as other:
        shown = other.add_source(name, table=theirs, key="id", text="name", create_indexes=True)
        assert shown["missing_indexes"] == [] and shown["table"] == f"public.{theirs}"
        hits = other.search_source(name, "Umbrella", type="fulltext")
        assert [h["text"] for h in hits] == ["Umbrella Pharmaceuticals"]
        assert other.search_source(name, "Acme", type="fulltext") == []
    with pgbraid.connect(data_dir=data_dir) as client:
        assert client.source(name)["missing_indexes"] == []
        assert [h["text"] for h in client.search_source(name, "Acme", type="fulltext")] == \
            ["Acme Metal Fabrication"]
    ours, theirs_ = _indexes(superuser, "public", mine), _indexes(superuser, "public", theirs)
    assert len(ours) == len(theirs_) == 3  # the primary key, trigram and tsvector
    assert not set(ours) & set(theirs_)


def test_a_table_another_tenant_registered_is_refused(data_dir, superuser, two_tenants):
    _, mine, _ = two_tenants
    before = _footprint(superuser, "public", mine)
    with pgbraid.connect(data_dir=data_dir, tenant=OTHER) as other:
        with pytest.raises(Conflict, match="another tenant"):
            other.add_source(f"steal_{_uid()}", table=mine, key="id", text="name",
                             create_indexes=True)
    assert _footprint(superuser, "public", mine) == before


def test_index_names_are_per_tenant_and_short():
    long = "n" * 63
    a = Source("default", long, "public", "t", "id", ["name"], [], "english").index_names()
    b = Source("other", long, "public", "t", "id", ["name"], [], "english").index_names()
    assert set(a.values()).isdisjoint(b.values())
    assert all(len(n) <= 63 for n in [*a.values(), *b.values()])


# -- the source role ----------------------------------------------------------------

@pytest.fixture(scope="module")
def probed(data_dir, server):
    """A source whose RLS policy records, from inside each reading session, who reads and
    whether that reader is refused pgbraid.versions. A superuser skips RLS (records
    nothing); pgbraid_app has no grant on the table (the read fails)."""
    uid = _uid()
    table, log = f"probed_{uid}", f"probe_log_{uid}"
    with _su(server) as su:
        _table(su, table, ["Acme Metal Fabrication", "Globex Industrial"])
        su.execute(sql.SQL("CREATE TABLE {} (reader text, superuser bool, denied bool)").format(
            sql.Identifier(log)))
        su.execute(sql.SQL(
            "CREATE FUNCTION {log}(r text, s bool, d bool) RETURNS bool LANGUAGE sql"
            " SECURITY DEFINER AS $$ INSERT INTO public.{log} VALUES (r, s, d) RETURNING true $$"
        ).format(log=sql.Identifier(log)))
        su.execute(sql.SQL("""
            CREATE FUNCTION {probe}() RETURNS bool LANGUAGE plpgsql AS $$
            DECLARE denied bool := false;
            BEGIN
                BEGIN PERFORM 1 FROM pgbraid.versions LIMIT 1;
                EXCEPTION WHEN insufficient_privilege THEN denied := true; END;
                RETURN public.{log}(current_user::text,
                    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), denied);
            END $$""").format(probe=sql.Identifier(f"{log}_probe"), log=sql.Identifier(log)))
        su.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(sql.Identifier(table)))
        su.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(sql.Identifier(table)))
        su.execute(sql.SQL("CREATE POLICY probe ON {} USING ({}())").format(
            sql.Identifier(table), sql.Identifier(f"{log}_probe")))
    with pgbraid.connect(data_dir=data_dir) as client:
        client.add_source(f"p_{uid}", table=table, key="id", text="name")
    return f"p_{uid}", table, log


def _readers(superuser, log) -> set[tuple]:
    rows = superuser.execute(sql.SQL("DELETE FROM {} RETURNING reader, superuser, denied").format(
        sql.Identifier(log))).fetchall()
    return set(rows)


def test_the_cascade_and_source_search_read_as_the_tenant_source_role(client, env, superuser,
                                                                      probed):
    name, _, log = probed
    expected = {(role_name("default"), False, True)}
    _readers(superuser, log)
    result = client.ground(name, "Acme Metal Fabricaton", strategies=["exact", "fuzzy", "bm25"])
    assert result["status"] == "clarification_needed"
    assert _readers(superuser, log) == expected
    for kind in ("exact", "fuzzy", "fulltext", "bm25"):
        assert client.search_source(name, "Globex Industrial", type=kind), kind
        assert _readers(superuser, log) == expected, kind
    cli = runner.invoke(app, ["source", "search", name, "Globex Industrail", "--json"], env=env)
    assert cli.exit_code == 0 and json.loads(cli.stdout)["candidates"]
    assert _readers(superuser, log) == expected


def test_the_source_role_holds_only_its_tables(client, superuser, probed):
    name, table, _ = probed
    role = role_name("default")
    attributes = superuser.execute(
        "SELECT rolsuper, rolbypassrls, rolcanlogin, has_schema_privilege(oid, 'pgbraid', 'USAGE'),"
        " (SELECT count(*) FROM pg_auth_members WHERE member = r.oid)"
        " FROM pg_roles r WHERE rolname = %s", (role,)).fetchone()
    assert attributes == (False, False, False, False, 0)
    with reading(client._db, _loaded(client, name)) as conn:
        assert conn.execute("SELECT current_user::text, rolsuper FROM pg_roles"
                            " WHERE rolname = current_user").fetchone() == (role, False)
        count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        assert count.fetchone()[0] == 2
    with pytest.raises(Forbidden):
        with reading(client._db, _loaded(client, name)) as conn:
            conn.execute("SELECT body FROM pgbraid.versions LIMIT 1")
    with pytest.raises(Forbidden):
        with reading(client._db, _loaded(client, name)) as conn:
            conn.execute("SELECT name FROM pgbraid.entity_sources LIMIT 1")


def _loaded(client, name) -> Source:
    with client.session() as conn:
        return sources.get(conn, name)


def test_a_revoked_grant_is_forbidden_not_read_as_the_login_role(client, superuser, two_tenants):
    name, mine, _ = two_tenants
    role = sql.Identifier(role_name("default"))
    superuser.execute(sql.SQL("REVOKE SELECT ON {} FROM {}").format(sql.Identifier(mine), role))
    try:
        with pytest.raises(Forbidden, match="cannot be read"):
            client.search_source(name, "Acme", type="fulltext")
        with pytest.raises(Forbidden, match="cannot be read"):
            client.ground(name, "Acme Metal Fabrication")
    finally:
        superuser.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(mine), role))
    assert client.search_source(name, "Acme", type="fulltext")


def test_a_missing_source_role_is_forbidden_not_read_as_the_login_role(data_dir, superuser):
    tenant = f"gone-{_uid()}"
    table = _table(superuser, f"gone_{_uid()}", ["Acme Metal Fabrication"])
    with pgbraid.connect(data_dir=data_dir, tenant=tenant) as client:
        client.add_source("gone", table=table, key="id", text="name")
        role = sql.Identifier(role_name(tenant))
        superuser.execute(sql.SQL("DROP OWNED BY {}").format(role))
        superuser.execute(sql.SQL("DROP ROLE {}").format(role))
        with pytest.raises(Forbidden, match="cannot be read"):
            client.search_source("gone", "Acme", type="fulltext")
        with pytest.raises(Forbidden, match="cannot be read"):
            client.ground("gone", "Acme Metal Fabrication")
        with pytest.raises(Forbidden, match="cannot be read"):
            client.source("gone")


def test_a_source_role_with_extra_rights_is_refused(data_dir, superuser):
    tenant = f"odd-{_uid()}"
    table = _table(superuser, f"odd_{_uid()}", ["a"])
    superuser.execute(sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE pgbraid_app").format(
        sql.Identifier(role_name(tenant))))
    try:
        with pgbraid.connect(data_dir=data_dir, tenant=tenant) as client:
            with pytest.raises(NotEnabled, match="more rights"):
                client.add_source("odd", table=table, key="id", text="name")
            assert client.sources() == []
    finally:
        superuser.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role_name(tenant))))


# -- removal ------------------------------------------------------------------------

def _can_read(su, role: str, table: str) -> bool:
    return su.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", (role, table)).fetchone()[0]


def test_remove_source_revokes_the_grant_drops_its_indexes_and_frees_the_table(
        client, env, data_dir, superuser):
    table = _table(superuser, f"removable_{_uid()}", ["Acme"])
    role = role_name("default")
    first, second = f"r1_{_uid()}", f"r2_{_uid()}"
    client.add_source(first, table=table, key="id", text="name", create_indexes=True)
    client.add_source(second, table=table, key="id", text="name")
    client.remove_source(first)  # the second source still reads the table
    assert _indexes(superuser, "public", table) == [f"{table}_pkey"]
    assert _can_read(superuser, role, table) and client.search_source(second, "Acme")
    with pytest.raises(NotFound):
        client.source(first)
    result = runner.invoke(app, ["source", "delete", second, "--json"], env=env)
    assert result.exit_code == 0 and json.loads(result.stdout) == {"deleted": second}
    assert not _can_read(superuser, role, table)
    again = runner.invoke(app, ["source", "delete", second, "--json"], env=env)
    assert again.exit_code == 2 and json.loads(again.stdout)["error"]["code"] == "not_found"
    with pgbraid.connect(data_dir=data_dir, tenant=OTHER) as other:  # the claim is released
        other.add_source(f"r3_{_uid()}", table=table, key="id", text="name")
        assert _can_read(superuser, role_name(OTHER), table)


# -- a login role that is not superuser (an external server) -------------------------

@contextmanager
def _login_role(server, superuser, *, createrole: bool):
    login = f"ext_{_uid()}"
    superuser.execute(sql.SQL("CREATE ROLE {} LOGIN {} IN ROLE pgbraid_app").format(
        sql.Identifier(login), sql.SQL("CREATEROLE" if createrole else "NOCREATEROLE")))
    # what migrate() needs of an external login: CREATE on the database and pgbraid's schema
    superuser.execute(sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(login)))
    superuser.execute(sql.SQL("GRANT CREATE ON SCHEMA pgbraid TO {}").format(sql.Identifier(login)))
    # and reading the migration record, which an external login owns (pgbraid_app may not)
    superuser.execute(sql.SQL("GRANT SELECT ON pgbraid.schema_migrations TO {}").format(
        sql.Identifier(login)))
    dsn = server.status().dsn.replace("user=postgres", f"user={login}")
    try:
        yield login, dsn
    finally:
        superuser.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(login)))
        superuser.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))


def test_a_login_role_that_cannot_create_roles_gets_a_clear_error(server, superuser, migrated,
                                                                 two_tenants):
    name, _, _ = two_tenants
    table = _table(superuser, f"ext_{_uid()}", ["Acme"])
    with _login_role(server, superuser, createrole=False) as (_, dsn):
        with pgbraid.connect(dsn=dsn) as client:
            before = _footprint(superuser, "public", table)
            with pytest.raises(NotEnabled, match="CREATEROLE"):
                client.add_source(f"x_{_uid()}", table=table, key="id", text="name")
            assert _footprint(superuser, "public", table) == before
            # tenant default's source exists, but this login may not take its role
            with pytest.raises(Forbidden, match="cannot be read"):
                client.search_source(name, "Acme", type="fulltext")
            with pytest.raises(Forbidden, match="cannot be read"):
                client.ground(name, "Acme Metal Fabrication")


def test_a_createrole_login_that_owns_the_table_registers_and_reads(server, superuser, migrated):
    tenant = f"ext-{_uid()}"
    table = _table(superuser, f"owned_{_uid()}", ["Acme Metal Fabrication"])
    with _login_role(server, superuser, createrole=True) as (login, dsn):
        superuser.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(
            sql.Identifier(table), sql.Identifier(login)))
        superuser.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(login)))
        try:
            with pgbraid.connect(dsn=dsn, tenant=tenant) as client:
                shown = client.add_source("owned", table=table, key="id", text="name",
                                          create_indexes=True)
                assert shown["missing_indexes"] == []
                assert client.search_source("owned", "Acme", type="fulltext")
                client.remove_source("owned")
                assert not _can_read(superuser, role_name(tenant), table)
        finally:
            superuser.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(
                sql.Identifier(role_name(tenant))))
