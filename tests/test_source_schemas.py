"""Which tables a tenant may register as entity sources: the operator's allow-list
PGBRAID_SOURCE_SCHEMAS, deny by default (security review finding 3). The login role can
read every table of the database (superuser on the embedded server), so a tenant's admin
must not pick any of them."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from pgbraid import source_schemas as sources
from pgbraid.errors import Forbidden, InvalidRequest

from .serving import Served, served, tenant_client  # noqa: F401  (fixture)


def _uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def crm(server):
    """Two schemas, one per tenant, each with a users table holding a password hash."""
    uid = _uid()
    names = {"a": f"crm_a_{uid}", "b": f"crm_b_{uid}"}
    with psycopg.connect(server.status().dsn, autocommit=True) as su:
        for schema in names.values():
            su.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            su.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, email text,"
                               " password_hash text)").format(sql.Identifier(schema, "app_users")))
            su.execute(sql.SQL("INSERT INTO {} VALUES (1, 'root@example.com', 'HASH-{}')").format(
                sql.Identifier(schema, "app_users"), sql.SQL(schema)))
        yield names
        for schema in names.values():
            su.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _claims(server, schema: str) -> int:
    with psycopg.connect(server.status().dsn, autocommit=True) as su:
        return su.execute("SELECT count(*) FROM pgbraid.entity_source_tables"
                          " WHERE table_schema = %s", (schema,)).fetchone()[0]


def test_the_setting_parses_per_tenant_every_tenant_and_the_bare_form():
    assert sources.schema_map("") == {}
    assert sources.schema_map("alpha=crm_a, shared; beta=crm_b") == {
        "alpha": {"crm_a", "shared"}, "beta": {"crm_b"}}
    assert sources.schema_map("app, crm") == {"*": {"app", "crm"}}
    assert sources.allowed_schemas("*=shared;alpha=crm_a", "alpha", embedded=False) == {
        "crm_a", "shared"}
    for bad in ("alpha=", "Bad Tenant=crm"):
        with pytest.raises(InvalidRequest):
            sources.schema_map(bad)


def test_with_no_setting_only_the_embedded_default_tenant_registers(data_dir, server, crm):
    assert sources.allowed_schemas("", "default", embedded=True) == frozenset()  # any schema
    with pytest.raises(Forbidden):
        sources.allowed_schemas("", "default", embedded=False)  # an external server
    with tenant_client(data_dir) as alpha:
        with pytest.raises(Forbidden, match="PGBRAID_SOURCE_SCHEMAS"):
            alpha.add_source("users", table=f"{crm['a']}.app_users", key="id", text="email")
        denied = [k for e in alpha.audit(action="access.denied") for k in e["detail"]["denials"]]
        assert [k.split(":")[0] for k in denied] == ["add_source"]
        with pytest.raises(Forbidden):
            alpha.add_source("users", table=f"{crm['a']}.app_users", key="id", text="email")
    assert _claims(server, crm["a"]) == 0


def test_each_tenant_registers_in_its_own_schemas_only(data_dir, server, crm):
    alpha, beta = f"alpha-{_uid()}", f"beta-{_uid()}"
    mapping = f"{alpha}={crm['a']};{beta}={crm['b']}"
    with tenant_client(data_dir, alpha, source_schemas=mapping) as a, \
            tenant_client(data_dir, beta, source_schemas=mapping) as b:
        shown = a.add_source("users", table=f"{crm['a']}.app_users", key="id", text="email")
        assert shown["table"] == f"{crm['a']}.app_users"
        # beta asking for alpha's table is told about the allow-list, not about alpha
        with pytest.raises(InvalidRequest, match="PGBRAID_SOURCE_SCHEMAS allows") as refused:
            b.add_source("users", table=f"{crm['a']}.app_users", key="id", text="email")
        assert "another tenant" not in refused.value.message and alpha not in refused.value.message
        with pytest.raises(InvalidRequest, match="PGBRAID_SOURCE_SCHEMAS allows"):
            a.add_source("theirs", table=f"{crm['b']}.app_users", key="id", text="email")
        assert b.add_source("users", table=f"{crm['b']}.app_users", key="id", text="email")
        assert [c["text"] for c in b.search_source("users", "root@example.com", type="fuzzy")] == [
            "root@example.com"]
        a.remove_source("users")
        b.remove_source("users")
    assert _claims(server, crm["a"]) == _claims(server, crm["b"]) == 0


def test_over_http_deny_by_default_and_the_allow_list(data_dir, server, crm, served, tmp_path):
    with tenant_client(data_dir) as tenant:
        key = tenant.create_key(pipeline="*", permissions="admin", admin=True)
        body = {"name": "users", "table": f"{crm['a']}.app_users", "key": "id", "text": "email"}
        with served.client(key["key"]) as http:  # no PGBRAID_SOURCE_SCHEMAS
            refused = http.post("/sources", json=body)
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
            assert "HASH" not in refused.text
        process = Served(data_dir, tmp_path / "serve.log",
                         env={"PGBRAID_SOURCE_SCHEMAS": f"{tenant.tenant}={crm['a']}"})
        try:
            with process.client(key["key"]) as http:
                outside = http.post("/sources", json={**body, "table": f"{crm['b']}.app_users"})
                assert outside.status_code == 400
                assert http.post("/sources", json=body).status_code == 201
                assert http.delete("/sources/users").status_code == 200
        finally:
            process.stop()
