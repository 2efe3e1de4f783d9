"""API keys: what the database holds (a digest, never the key), who can read the table,
and what a key becomes (a Principal)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from starlette.exceptions import HTTPException
from typer.testing import CliRunner

from pgbraid.api.errors import raise_as_pgbraid
from pgbraid.cli import app
from pgbraid.errors import Forbidden, InvalidRequest, MethodNotAllowed, NotFound, Unauthorized

from .keys import expired_key
from .serving import served, tenant_client  # noqa: F401  (fixture)


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        client.create_pipeline("notes", embedder="none")
        yield client


def test_the_database_holds_the_digest_and_a_prefix_never_the_key(data_dir, tenant, superuser):
    result = CliRunner().invoke(app, ["keys", "create", "--pipeline", "notes", "--permissions",
                                      "read,execute", "--json"],
                                env={"PGBRAID_DATA_DIR": str(data_dir),
                                     "PGBRAID_TENANT": tenant.tenant})
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    key = created["key"]
    assert key.startswith("pgb_") and len(key) == 47  # 32 random bytes, URL-safe base64
    digest, prefix, row = superuser.execute(
        "SELECT digest, prefix, row_to_json(k)::text FROM pgbraid.api_keys k WHERE id = %s",
        (created["id"],)).fetchone()
    assert bytes(digest) == hashlib.sha256(key.encode()).digest()
    assert prefix == key[:12] and key not in row and key[12:] not in row
    assert tenant.authenticate(key).key_id == created["id"]


def test_a_key_becomes_the_principal_it_was_created_as(tenant):
    key = tenant.create_key(pipeline="notes", permissions=["read", "execute"],
                            classification="internal,public")
    principal = tenant.authenticate(key["key"])
    assert principal.tenant == tenant.tenant and principal.key_id == key["id"]
    assert principal.permissions == {"notes": frozenset({"read", "execute"})}
    assert principal.classifications == ("internal", "public") and not principal.tenant_admin
    admin = tenant.authenticate(tenant.create_key(pipeline="*", permissions="read",
                                                  admin=True)["key"])
    assert admin.tenant_admin and admin.classifications is None


def test_unknown_revoked_and_expired_keys_are_unauthorized(tenant):
    for token in (None, "", "pgb_" + "A" * 43, "not-a-key", "pgb_" + "\x00" * 43):
        with pytest.raises(Unauthorized):
            tenant.authenticate(token)
    key = tenant.create_key(pipeline="notes", permissions="read")
    tenant.revoke_key(key["id"])
    with pytest.raises(Unauthorized, match="revoked"):
        tenant.authenticate(key["key"])
    expired = expired_key(tenant, pipeline="notes", permissions="read")
    with pytest.raises(Unauthorized, match="expired"):
        tenant.authenticate(expired["key"])
    later = tenant.create_key(pipeline="notes", permissions="read", expires="2999-01-01")
    assert tenant.authenticate(later["key"]).key_id == later["id"]


def test_keys_are_checked_before_anything_is_stored(tenant, superuser):
    before = superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0]
    for bad in ({"permissions": "read,fly"}, {"permissions": ""},
                {"permissions": "read", "classification": "Bad Name"},
                {"permissions": "read", "expires": "someday"},
                {"permissions": "read", "pipeline": "no such/name"}):
        with pytest.raises(InvalidRequest):
            tenant.create_key(**{"pipeline": "notes", **bad})
    with pytest.raises(NotFound):
        tenant.create_key(pipeline="missing", permissions="read")
    bounded = tenant.acting_as(tenant.authenticate(tenant.create_key(
        pipeline="*", permissions="read", classification="internal", admin=True)["key"]))
    with pytest.raises(Forbidden):
        bounded.create_key(pipeline="notes", permissions="read", classification="secret")
    with pytest.raises(Forbidden):
        bounded.create_key(pipeline="notes", permissions="read")  # unbounded: more than it holds
    reader = tenant.acting_as(tenant.authenticate(tenant.create_key(
        pipeline="notes", permissions="read")["key"]))
    for call in (reader.keys, lambda: reader.revoke_key("x"),
                 lambda: reader.create_key(pipeline="notes", permissions="read")):
        with pytest.raises(Forbidden):
            call()
    assert superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0] == before + 2


def test_a_key_cannot_be_created_expired(tenant, superuser):
    before = superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0]
    now = datetime.now(timezone.utc)
    for past in (now - timedelta(minutes=1), "2020-01-01", (now - timedelta(seconds=1)).isoformat()):
        with pytest.raises(InvalidRequest, match="expires must be in the future") as refused:
            tenant.create_key(pipeline="notes", permissions="read", expires=past)
        assert refused.value.details == {"field": "expires"}
    assert superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0] == before
    soon = tenant.create_key(pipeline="notes", permissions="read", expires=now + timedelta(minutes=5))
    assert tenant.authenticate(soon["key"]).key_id == soon["id"]


def test_the_app_role_cannot_list_keys_only_look_one_up_by_digest(tenant, superuser):
    key = tenant.create_key(pipeline="notes", permissions="read")
    digest = hashlib.sha256(key["key"].encode()).digest()
    with superuser.transaction():
        superuser.execute("SET LOCAL ROLE pgbraid_app")
        for setting in ("", f"other-{uuid.uuid4().hex[:6]}"):
            superuser.execute("SELECT set_config('pgbraid.tenant', %s, true),"
                              " set_config('pgbraid.key_lookup', 'on', true),"
                              " set_config('pgbraid.key_digest', %s, true)",
                              (setting, digest.hex()))
            assert superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0] == 0
        found = superuser.execute("SELECT id, tenant_id FROM pgbraid.api_key_by_digest(%s)",
                                  (digest,)).fetchall()
        assert found == [(key["id"], tenant.tenant)]
        assert superuser.execute("SELECT count(*) FROM pgbraid.api_key_by_digest(NULL)"
                                 ).fetchone()[0] == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege), superuser.transaction():
        superuser.execute("SET LOCAL ROLE pgbraid_app")
        superuser.execute("DELETE FROM pgbraid.api_keys")


def test_revoking_another_tenants_key_is_not_found(data_dir, tenant):
    key = tenant.create_key(pipeline="notes", permissions="read")
    with tenant_client(data_dir) as other:
        with pytest.raises(NotFound):
            other.revoke_key(key["id"])
    assert tenant.authenticate(key["key"]).key_id == key["id"]


def test_framework_http_errors_become_the_error_they_are():
    with pytest.raises(MethodNotAllowed):
        raise_as_pgbraid(HTTPException(405))
    with pytest.raises(NotFound):
        raise_as_pgbraid(HTTPException(404))
    with pytest.raises(InvalidRequest):
        raise_as_pgbraid(HTTPException(400, "There was an error parsing the body"))
    with pytest.raises(RuntimeError):  # not ours: it shows as internal error
        raise_as_pgbraid(HTTPException(502))


# -- a key holds no more than its creator (security review finding 2) -------------------

def _bounded_admin(tenant, **grants):
    key = tenant.create_key(admin=True, **grants)
    return key, tenant.acting_as(tenant.authenticate(key["key"]))


def test_an_admin_bounded_to_a_pipeline_creates_keys_within_it_only(tenant, superuser):
    tenant.create_pipeline("other", embedder="none")
    _, notes_admin = _bounded_admin(tenant, pipeline="notes", permissions="read",
                                    classification="public")
    before = superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0]
    for beyond in ({"pipeline": "*", "permissions": "read"},
                   {"pipeline": "notes", "permissions": "read,write,execute,admin"},
                   {"pipeline": "notes", "permissions": "write"},
                   {"pipeline": "other", "permissions": "read"},
                   {"pipeline": "no-such-pipeline", "permissions": "read"},  # Forbidden, not 404
                   {"pipeline": "notes", "permissions": "read", "classification": "secret"},
                   {"pipeline": "notes", "permissions": "read", "classification": None}):
        with pytest.raises(Forbidden):
            notes_admin.create_key(**{"classification": "public", **beyond})
    assert superuser.execute("SELECT count(*) FROM pgbraid.api_keys").fetchone()[0] == before
    within = notes_admin.create_key(pipeline="notes", permissions="read", classification="public")
    assert tenant.authenticate(within["key"]).permissions == {"notes": frozenset({"read"})}
    denied = [k for e in tenant.audit(action="access.denied") for k in e["detail"]["denials"]]
    assert len(denied) == 7 and {k.split(":")[0] for k in denied} == {"create_key"}


def test_pipeline_admin_and_every_pipeline_imply_what_they_hold(tenant):
    _, admin = _bounded_admin(tenant, pipeline="notes", permissions="admin")
    assert admin.create_key(pipeline="notes", permissions="read,write,execute,admin")
    with pytest.raises(Forbidden):
        admin.create_key(pipeline="*", permissions="read")
    _, every = _bounded_admin(tenant, pipeline="*", permissions="read,execute")
    assert every.create_key(pipeline="notes", permissions="read,execute")
    assert every.create_key(pipeline="*", permissions="read")
    with pytest.raises(Forbidden):
        every.create_key(pipeline="notes", permissions="write")


def test_a_bounded_admin_cannot_widen_its_bound_by_redefining_classifications(tenant):
    """The hierarchy is the tenant's: "public implies secret" would give every holder of
    public (every reader) the secret documents, the bounded admin included. A raw session
    (row-level security only) would read them directly."""
    tenant.define_classification("secret")
    tenant.ingest("notes", [{"id": "s", "text": "the vault code", "classification": ["secret"]}])
    _, internal = _bounded_admin(tenant, pipeline="*", permissions="admin",
                                 classification="internal")
    _, notes = _bounded_admin(tenant, pipeline="notes", permissions="admin")
    for admin in (internal, notes):
        for name, implies in (("public", ["secret"]), ("internal", ["secret"])):
            with pytest.raises(Forbidden, match="unrestricted admin"):
                admin.define_classification(name, implies=implies)
        with pytest.raises(Forbidden, match="unrestricted admin"):  # raw SQL: every row
            admin.session()
    with pytest.raises(Forbidden):
        internal.search("notes", "vault", classification="secret")
    assert not internal.search("notes", "vault", type="bm25").hits
    tenant.define_classification("internal", implies=["public"])  # the unrestricted admin may


def test_a_bounded_admin_lists_only_the_keys_it_could_revoke(tenant):
    """Each key names its pipeline: a pipeline's admin listing every key would learn of the
    tenant's other pipelines, which it never sees (GET /pipelines shows it its own)."""
    tenant.create_pipeline("hr-layoffs", embedder="none")
    hidden = tenant.create_key(pipeline="hr-layoffs", permissions="read")
    wide = tenant.create_key(pipeline="notes", permissions="read", classification="secret")
    mine, notes = _bounded_admin(tenant, pipeline="notes", permissions="admin",
                                 classification="public")
    made = notes.create_key(pipeline="notes", permissions="read", classification="public")
    listed = notes.keys()
    assert {k["id"] for k in listed} == {mine["id"], made["id"]}, listed
    assert "hr-layoffs" not in json.dumps(listed)
    everything = {k["id"] for k in tenant.keys()}
    assert {hidden["id"], wide["id"], mine["id"], made["id"]} <= everything


def test_a_pipeline_bounded_admin_creates_no_pipeline_beyond_its_own(tenant):
    """409 "already exists" against 201 would tell it which names the tenant uses."""
    tenant.create_pipeline("hr-layoffs", embedder="none")
    _, notes = _bounded_admin(tenant, pipeline="notes", permissions="admin")
    for name in ("hr-layoffs", "never-made"):
        with pytest.raises(Forbidden, match="admin permission on pipeline"):
            notes.create_pipeline(name, embedder="none")
    assert "never-made" not in [p.name for p in tenant.pipelines()]
    notes.delete_pipeline("notes")
    assert notes.create_pipeline("notes", embedder="none").name == "notes"


def test_a_key_expires_no_later_than_its_creator(tenant):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    _, admin = _bounded_admin(tenant, pipeline="*", permissions="admin", expires=soon)
    for expires in (None, soon + timedelta(minutes=1)):
        with pytest.raises(Forbidden, match="outlives"):
            admin.create_key(pipeline="notes", permissions="read", expires=expires)
    assert admin.create_key(pipeline="notes", permissions="read", expires=soon)


def test_revoking_is_bounded_like_creating(tenant):
    unrestricted = tenant.create_key(pipeline="*", permissions="read,write,execute,admin",
                                     admin=True)
    other = tenant.create_key(pipeline="notes", permissions="read,write")
    own, admin = _bounded_admin(tenant, pipeline="notes", permissions="read",
                                classification="public")
    mine = admin.create_key(pipeline="notes", permissions="read", classification="public")
    for key in (unrestricted, other):
        with pytest.raises(NotFound):  # as an unused id is (tests/test_apikeys_revoke.py)
            admin.revoke_key(key["id"])
        assert tenant.authenticate(key["key"]).key_id == key["id"]  # still valid
    assert admin.revoke_key(mine["id"]) == {"revoked": mine["id"]}
    assert admin.revoke_key(own["id"]) == {"revoked": own["id"]}  # its own key is within it
    with pytest.raises(Unauthorized):
        tenant.authenticate(own["key"])


def test_a_refused_revocation_says_nothing_of_the_key_it_names(tenant):
    tenant.create_pipeline("quarterly-merger", embedder="none")
    beyond = [tenant.create_key(pipeline="quarterly-merger", permissions="read,execute"),
              tenant.create_key(pipeline="notes", permissions="read,write",
                                classification="restricted-board")]
    _, admin = _bounded_admin(tenant, pipeline="notes", permissions="read",
                              classification="public")
    for key in beyond:
        with pytest.raises(NotFound) as refused:
            admin.revoke_key(key["id"])
        said = f"{refused.value} {refused.value.details}"
        for secret in ("quarterly-merger", "restricted-board", "execute", "write"):
            assert secret not in said, said  # a bounded admin learns no pipeline, grant or bound
        assert key["id"] in said
    tenant.delete_pipeline("quarterly-merger")


def test_over_http_a_pipeline_admin_cannot_mint_a_tenant_wide_key(tenant, served):
    key = tenant.create_key(pipeline="notes", permissions="read", classification="public",
                            admin=True)
    unrestricted = tenant.create_key(pipeline="*", permissions="admin", admin=True)
    with served.client(key["key"]) as http:
        escalate = http.post("/keys", json={"pipeline": "*", "admin": True,
                                            "permissions": ["read", "write", "execute", "admin"]})
        assert (escalate.status_code, escalate.json()["error"]["code"]) == (403, "forbidden")
        assert http.delete(f"/keys/{unrestricted['id']}").status_code == 404  # as if unused
        within = http.post("/keys", json={"pipeline": "notes", "permissions": ["read"],
                                          "classification": "public"})
        assert within.status_code == 201
        assert http.delete(f"/keys/{within.json()['id']}").status_code == 200
        assert http.delete("/pipelines/notes").status_code == 403
    assert tenant.pipeline("notes").name == "notes"
    assert tenant.authenticate(unrestricted["key"]).key_id == unrestricted["id"]


def test_keys_list_shows_each_keys_classifications_and_expiry_never_its_secret(data_dir, tenant):
    later = (datetime.now(timezone.utc) + timedelta(days=30)).replace(microsecond=0)
    bounded = tenant.create_key(pipeline="notes", permissions="read",
                                classification="internal,secret", expires=later.isoformat())
    unbounded = tenant.create_key(pipeline="notes", permissions="read,execute")
    lapsed = expired_key(tenant, pipeline="notes", permissions="read", expired_at="2020-01-01")
    tenant.revoke_key(unbounded["id"])
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": tenant.tenant}
    shown = CliRunner().invoke(app, ["keys", "list"], env=env)
    assert shown.exit_code == 0, shown.output
    lines = {line.split()[0]: line for line in shown.output.splitlines() if line.strip()}
    assert "holds internal,secret" in lines[bounded["id"]]
    assert f"expires {later.isoformat()}" in lines[bounded["id"]]
    assert lines[bounded["id"]].endswith("active")
    assert "holds any classification" in lines[unbounded["id"]]
    assert "never expires" in lines[unbounded["id"]] and "revoked 20" in lines[unbounded["id"]]
    assert "expires 2020-01-01T00:00:00+00:00" in lines[lapsed["id"]]
    assert lines[lapsed["id"]].endswith("expired")
    listed = CliRunner().invoke(app, ["keys", "list", "--json"], env=env)
    body = {key["id"]: key for key in json.loads(listed.output)}
    assert body[bounded["id"]]["classifications"] == ["internal", "secret"]
    assert body[bounded["id"]]["expires_at"] == later.isoformat()
    assert [body[k["id"]]["expired"] for k in (bounded, unbounded, lapsed)] == [False, False, True]
    for key in (bounded, unbounded, lapsed):  # never the key, nor its digest
        secret, digest = key["key"], hashlib.sha256(key["key"].encode()).hexdigest()
        assert secret not in shown.output + listed.output
        assert digest not in shown.output + listed.output and secret[12:] not in listed.output


def test_entity_sources_are_the_unrestricted_admins_to_register_and_remove(tenant):
    """Sources are tenant-wide (every pipeline's grounding reads them): an admin bounded
    to a pipeline or a classification is refused before the name is looked up, so no
    409 'already registered' or 404 tells it which sources exist."""
    for grants in ({"pipeline": "notes", "permissions": "admin"},
                   {"pipeline": "*", "permissions": "admin", "classification": "public"}):
        _, bounded = _bounded_admin(tenant, **grants)
        with pytest.raises(Forbidden, match="unrestricted admin"):
            bounded.add_source("suppliers", table="suppliers", key="id", text="name")
        with pytest.raises(Forbidden, match="unrestricted admin"):
            bounded.remove_source("suppliers")
