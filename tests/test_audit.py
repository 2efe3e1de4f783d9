"""The audit log: append-only for every role that could try, tenant-scoped, and
holding the events of keys, refusals and writes (Python, CLI and HTTP)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from typer.testing import CliRunner

from pgbraid import audit
from pgbraid.cli import app
from pgbraid.errors import Forbidden, InvalidRequest, Unauthorized

from .serving import served, tenant_client  # noqa: F401  (fixture)

runner = CliRunner()


def _uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        yield client


def _actions(client, **query) -> list[tuple[str, str | None]]:
    return [(e["action"], e["target"]) for e in client.audit(**query)]


# -- append-only ----------------------------------------------------------------------

CHANGES = ("UPDATE pgbraid.audit_log SET action = 'key.use'",
           "DELETE FROM pgbraid.audit_log",
           "TRUNCATE pgbraid.audit_log")


def test_the_application_role_may_insert_and_select_but_never_change(tenant):
    audit.record(tenant._db, tenant.principal, "pipeline.create", "kept")
    for statement in CHANGES:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with tenant.session() as conn:  # as pgbraid_app, the tenant set
                assert conn.execute("SELECT current_user").fetchone()[0] == "pgbraid_app"
                conn.execute(statement)
    assert _actions(tenant) == [("pipeline.create", "kept")]


def test_even_the_owner_and_a_superuser_are_refused(tenant, superuser):
    audit.record(tenant._db, tenant.principal, "pipeline.create", "kept")
    owner = superuser.execute("SELECT pg_get_userbyid(relowner) FROM pg_class"
                              " WHERE oid = 'pgbraid.audit_log'::regclass").fetchone()[0]
    assert owner == superuser.execute("SELECT current_user").fetchone()[0]
    for statement in CHANGES:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            superuser.execute(statement)
    assert _actions(tenant) == [("pipeline.create", "kept")]


def test_a_session_cannot_write_into_another_tenant(tenant):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with tenant.session() as conn:
            conn.execute("INSERT INTO pgbraid.audit_log (tenant_id, principal, action)"
                         " VALUES ('someone-else', 'local', 'key.use')")


def test_an_events_id_does_not_count_other_tenants_events(tenant, data_dir):
    """A sequence would: the gap between two of a tenant's ids would be how many events
    every other tenant wrote in between (fragment ids are random for the same reason)."""
    audit.record(tenant._db, tenant.principal, "pipeline.create", "first")
    with tenant_client(data_dir) as other:
        for n in range(5):
            audit.record(other._db, other.principal, "pipeline.create", f"other-{n}")
    audit.record(tenant._db, tenant.principal, "pipeline.create", "second")
    ids = {e["target"]: e["id"] for e in tenant.audit()}
    assert ids["second"] - ids["first"] != 6, ids
    assert 0 < min(ids.values()) and max(ids.values()) < 2 ** 53  # exact in JSON


def test_record_refuses_an_unknown_action_and_a_tenant_beside_a_session(tenant):
    with pytest.raises(ValueError, match="audit.ACTIONS"):
        audit.record(tenant._db, tenant.principal, "made.up")
    with pytest.raises(ValueError, match="own tenant"), tenant.session() as conn:
        audit.record(conn, tenant.principal, "key.use", tenant="x")


# -- the events -----------------------------------------------------------------------

def test_writes_keys_and_refusals_are_recorded_in_their_tenant_only(tenant, data_dir):
    tenant.create_pipeline("docs", embedder="none")
    key = tenant.create_key(pipeline="docs", permissions="read")
    tenant.ingest("docs", [{"id": "a", "text": "hello audit"}])
    tenant.delete_document("docs", "a")
    reader = tenant.acting_as(tenant.authenticate(key["key"]))
    with pytest.raises(Forbidden):
        reader.delete_pipeline("docs")
    with pytest.raises(Forbidden):  # a classification beyond the key's: the engine's refusal
        tenant.acting_as(tenant.authenticate(tenant.create_key(
            pipeline="docs", permissions="read,execute", classification="public")["key"])
        ).search("docs", "hello", classification="secret")
    tenant.revoke_key(key["id"])
    with pytest.raises(Unauthorized):
        tenant.authenticate(key["key"])
    tenant.delete_pipeline("docs")
    events = tenant.audit()
    public = [e["target"] for e in reversed(events) if e["action"] == "key.create"][1]
    assert [(e["action"], e["target"]) for e in reversed(events)
            if e["action"] not in audit.COUNTED] == [
        ("pipeline.create", "docs"), ("key.create", key["id"]), ("document.ingest", "docs"),
        ("document.delete", "docs/a"), ("key.create", public), ("key.revoke", key["id"]),
        ("pipeline.delete", "docs")]
    by_action = {e["action"]: e for e in events}
    created = by_action["pipeline.create"]["detail"]  # typed as JSON types them, not "True"
    assert created["embedder"] is None and created["encryption"] is None
    assert all(not isinstance(v, str) or v not in ("True", "False", "None")
               for v in created.values()), created
    assert by_action["document.ingest"]["detail"] == {"added": 1, "updated": 0,
                                                      "unchanged": 0, "failed": 0}
    # Refusals are counted per key and minute (one each here: one row each).
    denied = {e["principal"]: e for e in events if e["action"] == "access.denied"}
    assert set(denied) == {f"key:{key['id']}", f"key:{public}"}
    assert all(e["count"] == 1 and e["target"] is None for e in denied.values())
    (reader_denial,) = denied[f"key:{key['id']}"]["detail"]["denials"]
    assert reader_denial.startswith("delete_pipeline: ")
    (public_denial,) = denied[f"key:{public}"]["detail"]["denials"]
    assert public_denial.startswith("search: ") and "secret" in public_denial
    assert by_action["key.refused"]["target"] == key["id"]
    assert by_action["key.refused"]["detail"] == {"reasons": {"this API key was revoked": 1}}
    assert all(key["key"] not in json.dumps(e) for e in events)  # never the token
    with tenant_client(data_dir) as other:
        assert other.audit() == []


def test_a_flood_of_refusals_is_counted_per_key_and_minute_not_a_row_each(tenant):
    tenant.create_pipeline("flood", embedder="none")
    revoked = tenant.create_key(pipeline="flood", permissions="read")
    reader = tenant.acting_as(tenant.authenticate(
        tenant.create_key(pipeline="flood", permissions="read")["key"]))
    tenant.revoke_key(revoked["id"])
    for n in range(50):
        with pytest.raises(Unauthorized):
            tenant.authenticate(revoked["key"])
        with pytest.raises(Forbidden):
            reader.delete_pipeline("flood")
        with pytest.raises(Forbidden):  # a pipeline name of the caller's each time
            reader.search(f"other-{n}", "x")
    events = tenant.audit(limit=audit.MAX_LIMIT)
    refused = [e for e in events if e["action"] == "key.refused"]
    denied = [e for e in events if e["action"] == "access.denied"]
    assert sum(e["count"] for e in refused) == 50 and sum(e["count"] for e in denied) == 100
    assert 1 <= len(refused) <= 2 and 1 <= len(denied) <= 2  # 2: the minute turned over
    kinds = Counter()
    for event in denied:
        kinds.update(event["detail"]["denials"])
        assert len(event["detail"]["denials"]) <= audit.MAX_KINDS + 1
    assert sum(n for k, n in kinds.items() if k.startswith("delete_pipeline: ")) == 50
    if len(denied) == 1:  # 51 kinds in one minute: the last ones are counted as (other)
        assert kinds[audit.OTHER] == 1


def test_since_action_and_limit_filter_and_bad_values_are_refused(tenant):
    for n in range(3):
        audit.record(tenant._db, tenant.principal, "pipeline.create", f"p{n}")
    audit.record(tenant._db, tenant.principal, "pipeline.delete", "p0")
    assert _actions(tenant, action="pipeline.delete") == [("pipeline.delete", "p0")]
    assert len(tenant.audit(limit=2)) == 2
    assert len(tenant.audit(since="1h")) == 4
    later = (datetime.now(timezone.utc) + timedelta(minutes=5)).isoformat()
    assert tenant.audit(since=later) == []
    for bad in ({"action": "nope"}, {"since": "yesterday"}, {"limit": 0}, {"limit": True}):
        with pytest.raises(InvalidRequest):
            tenant.audit(**bad)


def test_unknown_keys_are_counted_per_minute_under_no_tenant(tenant):
    before = sum(e["count"] for e in tenant.audit(unauthenticated=True, limit=10_000,
                                                  action="key.refused"))
    for token in (None, "not-a-key", "pgb_" + "A" * 43):
        with pytest.raises(Unauthorized):
            tenant.authenticate(token)
    after = tenant.audit(unauthenticated=True, limit=10_000, action="key.refused")
    assert sum(e["count"] for e in after) == before + 3
    assert after[0]["principal"] == "anonymous" and "reasons" in after[0]["detail"]
    key = tenant.create_key(pipeline="*", permissions="read", admin=True)
    keyed = tenant.acting_as(tenant.authenticate(key["key"]))
    with pytest.raises(Forbidden):  # a key's admin reads its own tenant only
        keyed.audit(unauthenticated=True)


def test_the_cli_prints_the_log_and_its_json(tenant, env):
    tenant.create_pipeline("cli-docs", embedder="none")
    environment = {**env, "PGBRAID_TENANT": tenant.tenant}
    result = runner.invoke(app, ["audit", "--json", "--action", "pipeline.create"],
                           env=environment)
    assert result.exit_code == 0, result.output
    assert [(e["action"], e["target"]) for e in json.loads(result.stdout)] == [
        ("pipeline.create", "cli-docs")]
    text = runner.invoke(app, ["audit", "--since", "10m"], env=environment)
    assert text.exit_code == 0 and "pipeline.create" in text.stdout and "cli-docs" in text.stdout
    bad = runner.invoke(app, ["audit", "--json", "--action", "drop table"], env=environment)
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["details"]["field"] == "action"


# -- over HTTP -----------------------------------------------------------------------

def test_get_audit_is_for_the_admin_key_and_counts_each_keys_use(tenant, served):
    tenant.create_pipeline("web", embedder="none")
    admin = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    reader = tenant.create_key(pipeline="web", permissions="read,execute")
    with served.client(reader["key"]) as http:
        for _ in range(3):
            assert http.post("/pipelines/web/search", json={"query": "x"}).status_code == 200
        refused = http.get("/audit")
        assert refused.status_code == 403
    with served.client(admin["key"]) as http:
        events = http.get("/audit", params={"since": "10m"}).json()
        assert http.get("/audit", params={"limit": 0}).status_code == 400
        assert http.get("/audit", params={"bogus": 1}).status_code == 400
    used = [e for e in events if e["action"] == "key.use" and e["principal"] ==
            f"key:{reader['id']}"]
    assert sum(e["count"] for e in used) == 4
    assert sum(e["detail"]["operations"].get("POST /pipelines/{pipeline}/search", 0)
               for e in used) == 3
    denied = [e for e in events if e["action"] == "access.denied"]
    assert denied and denied[0]["principal"] == f"key:{reader['id']}"
    assert [k.split(":")[0] for k in denied[0]["detail"]["denials"]] == ["audit"]



def test_only_an_unrestricted_admin_reads_the_log(tenant, served):
    """Security review finding 10: rows name every pipeline and document id."""
    tenant.create_pipeline("notes", embedder="none")
    tenant.ingest("notes", [{"id": "sec2", "text": "x", "classification": "secret"}])
    tenant.delete_document("notes", "sec2")
    bounded = [tenant.create_key(pipeline="*", permissions="admin", admin=True,
                                 classification="public"),
               tenant.create_key(pipeline="notes", permissions="admin", admin=True),
               tenant.create_key(pipeline="*", permissions="read,write,execute", admin=True)]
    unrestricted = tenant.create_key(pipeline="*", permissions="admin", admin=True)
    for key in bounded:
        with pytest.raises(Forbidden, match="unrestricted admin"):
            tenant.acting_as(tenant.authenticate(key["key"])).audit()
        with served.client(key["key"]) as http:
            answer = http.get("/audit")
            assert answer.status_code == 403 and "sec2" not in answer.text
    with served.client(unrestricted["key"]) as http:
        assert "notes/sec2" in http.get("/audit").text


def test_an_idle_server_writes_its_last_minute_of_counts_without_another_request(
        tenant, served):
    """key.use counts reach the log once their minute is over, read by another process
    (no read through the server, which would flush them), with no request after them."""
    import time
    tenant.create_pipeline("idle", embedder="none")
    reader = tenant.create_key(pipeline="idle", permissions="read,execute")
    with served.client(reader["key"]) as http:
        assert http.post("/pipelines/idle/search", json={"query": "x"}).status_code == 200
    label = f"key:{reader['id']}"
    deadline = time.monotonic() + 60 + 2 * 10 + 15  # the minute, two beats, slack
    while time.monotonic() < deadline:
        used = [e for e in tenant.audit(action="key.use") if e["principal"] == label]
        if used:
            break
        time.sleep(2)
    assert sum(e["count"] for e in used) == 1


def test_key_create_records_what_the_key_holds_in_one_shape_from_cli_and_http(env, client, pipeline):
    made = CliRunner().invoke(app, ["keys", "create", "--pipeline", pipeline, "--permissions",
                                    "read,execute", "--classification", "internal",
                                    "--expires", "2999-01-01T00:00:00Z", "--json"], env=env)
    assert made.exit_code == 0, made.stdout
    by_cli = json.loads(made.stdout)["id"]
    by_api = client.create_key(pipeline=pipeline, permissions=["read", "execute"],
                               classification=["internal"], expires="2999-01-01T00:00:00+00:00")
    admin = client.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    details = {e["target"]: e["detail"] for e in client.audit(action="key.create")}
    expected = {"pipeline": pipeline, "permissions": ["read", "execute"],
                "classification": ["internal"], "admin": False,
                "expires": "2999-01-01T00:00:00+00:00"}
    assert details[by_cli] == expected and details[by_api["id"]] == expected
    assert details[admin["id"]] == {"pipeline": "*", "permissions": ["read", "write", "execute",
                                                                     "admin"],
                                    "classification": None, "admin": True, "expires": None}
    for key in (by_cli, by_api["id"], admin["id"]):
        client.revoke_key(key)
