"""Audit retention (migration 035): one narrow path removes a tenant's audit rows older
than a bound, for the operator only, and records itself; the trigger still refuses
every other UPDATE, DELETE and TRUNCATE, for the application role and the owner."""

from __future__ import annotations

import json
import signal
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid import audit
from pgbraid.cli import app
from pgbraid.errors import BackendUnavailable, Forbidden, InvalidRequest

from .serving import Served, served, tenant_client  # noqa: F401  (fixture)
from .external import owned_database

runner = CliRunner()
CHANGES = ("UPDATE pgbraid.audit_log SET action = 'key.use'",
           "DELETE FROM pgbraid.audit_log",
           "TRUNCATE pgbraid.audit_log")


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        yield client


def _aged(client, target: str, age: timedelta, *, tenant: str | None = None) -> datetime:
    """An event recorded ``age`` ago (as if the log had been kept that long)."""
    at = datetime.now(timezone.utc) - age
    if tenant is None:
        audit.record(client._db, client.principal, "pipeline.create", target, at=at)
    else:
        audit.record(client._db, "anonymous", "key.refused", target, tenant=tenant, at=at)
    return at


def _targets(client, **query) -> list[str | None]:
    return [e["target"] for e in client.audit(limit=10_000, **query)]


def test_a_purge_removes_the_rows_older_than_the_bound_only_and_records_itself(tenant):
    bound = datetime.now(timezone.utc) - timedelta(days=30)
    for days in (400, 31):
        _aged(tenant, f"old-{days}", timedelta(days=days))
    audit.record(tenant._db, tenant.principal, "pipeline.create", "just-before",
                 at=bound - timedelta(microseconds=1))
    audit.record(tenant._db, tenant.principal, "pipeline.create", "at-the-bound", at=bound)
    _aged(tenant, "recent", timedelta(days=29))
    audit.record(tenant._db, tenant.principal, "pipeline.create", "now")

    done = tenant.purge_audit(before=bound.isoformat())

    assert done == {"tenant": tenant.tenant, "removed": 3, "before": bound.isoformat()}
    events = tenant.audit()
    assert [e["target"] for e in events[1:]] == ["now", "recent", "at-the-bound"]
    purged = events[0]
    assert (purged["action"], purged["principal"], purged["target"]) == (
        "audit.purged", "local", None)
    assert purged["detail"]["removed"] == 3
    assert datetime.fromisoformat(purged["detail"]["before"]) == bound


def test_the_purge_record_survives_every_later_purge(tenant):
    _aged(tenant, "old", timedelta(days=10))
    tenant.purge_audit(before="5d")
    first = [e for e in tenant.audit() if e["action"] == "audit.purged"]
    assert [e["detail"]["removed"] for e in first] == [1]
    # Backdated as if the first purge ran long ago: a later purge still keeps it.
    audit.record(tenant._db, tenant.principal, "pipeline.create", "older", at=datetime.now(
        timezone.utc) - timedelta(days=3))
    again = tenant.purge_audit(before=datetime.now(timezone.utc).isoformat())
    assert again["removed"] == 1
    records = [e for e in tenant.audit() if e["action"] == "audit.purged"]
    assert [e["detail"]["removed"] for e in records] == [1, 1]
    assert _targets(tenant) == [None, None]


def test_another_tenants_rows_are_untouched(tenant, data_dir):
    with tenant_client(data_dir) as other:
        _aged(other, "theirs", timedelta(days=90))
        _aged(tenant, "mine", timedelta(days=90))
        assert tenant.purge_audit(before="30d")["removed"] == 1
        assert _targets(other) == ["theirs"]
        assert "mine" not in _targets(tenant)


def test_the_refusals_of_unknown_keys_are_purged_apart(tenant):
    mark = f"anon-{uuid.uuid4().hex[:8]}"
    _aged(tenant, mark, timedelta(days=90), tenant=audit.ANONYMOUS_TENANT)
    _aged(tenant, "mine", timedelta(days=90))
    done = tenant.purge_audit(before="30d", unauthenticated=True)
    assert done["tenant"] == audit.ANONYMOUS_TENANT and done["removed"] >= 1
    assert mark not in _targets(tenant, unauthenticated=True)
    assert "mine" in _targets(tenant)


def test_no_api_key_may_purge_not_even_the_unrestricted_admin(tenant, served):
    _aged(tenant, "kept", timedelta(days=90))
    admin = tenant.create_key(pipeline="*", permissions="admin", admin=True)
    keyed = tenant.acting_as(tenant.authenticate(admin["key"]))
    with pytest.raises(Forbidden, match="only the operator"):
        keyed.purge_audit(before="30d")
    with served.client(admin["key"]) as http:
        answer = http.post("/audit/purge", json={"before": "30d"})
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "forbidden"
    assert "kept" in _targets(tenant)
    denials = [d for e in tenant.audit(action="access.denied") for d in e["detail"]["denials"]]
    assert any(d.startswith("purge_audit: only the operator") for d in denials), denials


def test_a_bounded_local_principal_may_not_purge(tenant):
    bounded = pgbraid.Principal(tenant.tenant, {"*": frozenset({"admin"})}, ("public",), True)
    with pytest.raises(Forbidden, match="unrestricted admin"):
        tenant.acting_as(bounded).purge_audit(before="30d")


def test_the_trigger_still_refuses_the_app_role_and_the_owner_after_a_purge(tenant, superuser):
    _aged(tenant, "old", timedelta(days=90))
    tenant.purge_audit(before="30d")
    _aged(tenant, "kept", timedelta(days=90))
    enabled = superuser.execute("SELECT tgenabled FROM pg_trigger WHERE tgname = 'append_only'"
                                " AND tgrelid = 'pgbraid.audit_log'::regclass").fetchone()[0]
    assert enabled == "O"
    for statement in CHANGES:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with tenant.session() as conn:  # as pgbraid_app, the tenant set
                conn.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            with superuser.transaction():  # the owner (a superuser here), the tenant set too
                superuser.execute("SELECT set_config('pgbraid.tenant', %s, true)",
                                  (tenant.tenant,))
                superuser.execute(statement)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="audit_purge"):
        with tenant.session() as conn:  # the application role may not call the function
            conn.execute("SELECT pgbraid.audit_purge(now(), 'local')")
    assert "kept" in _targets(tenant)


def test_an_owner_that_is_no_superuser_purges_through_the_function_only(server, superuser):
    with owned_database(server, superuser) as dsn:
        with pgbraid.connect(dsn=dsn, tenant="owner-purge") as client:
            _aged(client, "old", timedelta(days=90))
            _aged(client, "kept", timedelta(days=10))
            assert client.purge_audit(before="30d")["removed"] == 1
            assert _targets(client) == [None, "kept"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in CHANGES:
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                    with conn.transaction():
                        conn.execute("SELECT set_config('pgbraid.tenant', 'owner-purge', true)")
                        conn.execute(statement)
            with conn.transaction():
                conn.execute("SELECT set_config('pgbraid.tenant', 'owner-purge', true)")
                assert conn.execute("SELECT count(*) FROM pgbraid.audit_log").fetchone()[0] == 2


def test_a_purge_waits_a_bounded_time_behind_an_open_audit_write(tenant, superuser,
                                                                 monkeypatch):
    _aged(tenant, "old", timedelta(days=90))
    monkeypatch.setattr(audit, "PURGE_LOCK_TIMEOUT", "200ms")
    with superuser.transaction():  # a write's transaction that recorded its row, still open
        superuser.execute("SELECT set_config('pgbraid.tenant', %s, true)", (tenant.tenant,))
        superuser.execute("INSERT INTO pgbraid.audit_log (principal, action, target)"
                          " VALUES ('local', 'pipeline.create', 'open')")
        with pytest.raises(BackendUnavailable, match="55P03"):
            tenant.purge_audit(before="30d")
    assert _targets(tenant) == ["open", "old"]
    assert tenant.purge_audit(before="30d")["removed"] == 1


def test_bad_bounds_are_refused_by_name_and_remove_nothing(tenant):
    _aged(tenant, "old", timedelta(days=90))
    future = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    for bad in (future, "2999-01-01", "yesterday", "-5d", "", 42, None):
        with pytest.raises(InvalidRequest) as caught:
            tenant.purge_audit(before=bad)
        assert caught.value.details["field"] == "before", bad
    assert _targets(tenant) == ["old"]


def test_the_retention_policy_is_the_default_bound_and_a_floor(data_dir, server):
    with tenant_client(data_dir, audit_retention_days=30) as client:
        _aged(client, "old", timedelta(days=31))
        _aged(client, "kept", timedelta(days=29))
        with pytest.raises(InvalidRequest, match="at least 30 days ago") as caught:
            client.purge_audit(before="7d")
        assert caught.value.details["setting"] == "PGBRAID_AUDIT_RETENTION_DAYS"
        assert _targets(client) == ["kept", "old"]
        assert client.purge_audit()["removed"] == 1
        assert _targets(client) == [None, "kept"]
        assert client.purge_audit(before="60d")["removed"] == 0


@pytest.mark.parametrize("days", ["-1", "0", "many"])
def test_a_bad_retention_setting_is_refused_by_name(data_dir, days, monkeypatch):
    monkeypatch.setenv("PGBRAID_AUDIT_RETENTION_DAYS", days)
    with pytest.raises(InvalidRequest) as caught:
        pgbraid.connect(data_dir=data_dir)
    assert caught.value.details["setting"] == "PGBRAID_AUDIT_RETENTION_DAYS"


def test_the_cli_purges_and_refuses_in_the_one_shape(tenant, env):
    _aged(tenant, "old", timedelta(days=90))
    environment = {**env, "PGBRAID_TENANT": tenant.tenant}
    bad = runner.invoke(app, ["audit", "purge", "--before", "2999-01-01", "--json"],
                        env=environment)
    assert bad.exit_code == 2, bad.output
    assert json.loads(bad.stdout)["error"]["details"]["field"] == "before"
    done = runner.invoke(app, ["audit", "purge", "--before", "30d", "--json"], env=environment)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["removed"] == 1
    text = runner.invoke(app, ["audit", "purge", "--before", "30d"], env=environment)
    assert text.exit_code == 0 and "0 audit rows" in text.stdout
    listed = runner.invoke(app, ["audit", "--json"], env=environment)  # the log, as before
    assert [e["action"] for e in json.loads(listed.stdout)] == ["audit.purged", "audit.purged"]


@pytest.fixture(scope="module")
def operator(data_dir, server, tmp_path_factory):
    """``serve --no-auth``: every request is the local process, the operator."""
    name = f"t{uuid.uuid4().hex[:10]}"
    process = Served(data_dir, tmp_path_factory.mktemp("purge") / "serve.log", "--no-auth",
                     env={"PGBRAID_TENANT": name})
    yield name, process
    assert process.stop() in (0, -signal.SIGTERM)


def test_post_audit_purge_for_the_operator_over_http(operator, data_dir):
    name, process = operator
    with tenant_client(data_dir, name) as client:
        _aged(client, "old", timedelta(days=90))
        with process.client() as http:
            for body, field in (({"before": "30d", "bogus": 1}, "bogus"),
                                ({"before": "2999-01-01"}, "before"),
                                ({"before": 7}, "before")):
                answer = http.post("/audit/purge", json=body)
                assert answer.status_code == 400, answer.text
                error = answer.json()["error"]
                assert error["code"] == "invalid_request" and field in json.dumps(error), error
            assert _targets(client) == ["old"]
            done = http.post("/audit/purge", json={"before": "30d"})
        assert done.status_code == 200, done.text
        assert done.json()["removed"] == 1 and done.json()["tenant"] == name
        assert [e["action"] for e in client.audit()] == ["audit.purged"]
