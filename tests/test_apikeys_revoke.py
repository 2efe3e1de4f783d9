"""Revoking a key the caller may not see answers exactly as revoking an id that does not
exist (Python, HTTP, CLI): a bounded admin, whose listing hides the keys beyond it, learns
no key id from a refusal; the refusal is still in the audit log."""

from __future__ import annotations

import json
import secrets

import pytest
from typer.testing import CliRunner

from pgbraid.cli import app
from pgbraid.errors import NotFound, PgbraidError, describe

from .serving import served, tenant_client  # noqa: F401  (fixture)


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        client.create_pipeline("notes", embedder="none")
        client.create_pipeline("quarterly-merger", embedder="none")
        yield client


def _unused_id() -> str:
    return secrets.token_hex(8)  # the shape of a real key id (apikeys.create)


def _blind(answer, key_id: str):
    """An answer with the id it names replaced: what is left must not depend on the id."""
    return json.loads(json.dumps(answer).replace(key_id, "ID"))


def _python(client, key_id: str):
    with pytest.raises(PgbraidError) as caught:
        client.revoke_key(key_id)
    d = describe(caught.value)
    return type(caught.value), _blind([d.code, d.status, d.exit, d.body()], key_id)


def _bounded(tenant):
    key = tenant.create_key(pipeline="notes", permissions="admin", classification="public",
                            admin=True)
    return key, tenant.acting_as(tenant.authenticate(key["key"]))


def test_a_key_beyond_a_bounded_admin_is_not_found_as_an_unused_id_is(tenant):
    beyond = [tenant.create_key(pipeline="quarterly-merger", permissions="read"),
              tenant.create_key(pipeline="notes", permissions="read,write"),
              tenant.create_key(pipeline="*", permissions="admin", admin=True)]
    _, admin = _bounded(tenant)
    unused = _python(admin, _unused_id())
    assert unused[0] is NotFound and unused[1][:3] == ["not_found", 404, 2], unused
    for key in beyond:
        assert _python(admin, key["id"]) == unused
        assert tenant.authenticate(key["key"]).key_id == key["id"]  # still valid
    denials = [row["detail"]["denials"] for row in tenant.audit(action="access.denied")]
    said = json.dumps(denials)
    for key in beyond:  # each refusal is recorded, for the unrestricted admin to read
        assert f"revoke_key: this principal may not revoke API key '{key['id']}'" in said
    # the unrestricted admin gets the same answer for an unused id
    assert _python(tenant, _unused_id()) == unused


def test_over_http_a_key_beyond_the_caller_answers_as_an_unused_id(tenant, served):
    beyond = tenant.create_key(pipeline="quarterly-merger", permissions="read")
    own, _ = _bounded(tenant)
    unused = _unused_id()
    with served.client(own["key"]) as http:
        answers = {key_id: http.delete(f"/keys/{key_id}") for key_id in (beyond["id"], unused)}
    shapes = {key_id: (r.status_code, _blind(r.json(), key_id), r.headers["content-type"])
              for key_id, r in answers.items()}
    assert shapes[beyond["id"]] == shapes[unused]
    assert shapes[unused][0] == 404 and shapes[unused][1]["error"]["code"] == "not_found"
    assert tenant.authenticate(beyond["key"]).key_id == beyond["id"]


def test_the_cli_answers_another_tenants_key_as_an_unused_id(data_dir, tenant, env):
    with tenant_client(data_dir) as other:
        theirs = other.create_key(pipeline="*", permissions="read")
    answers = {}
    for key_id in (theirs["id"], _unused_id()):
        result = CliRunner().invoke(app, ["keys", "revoke", key_id, "--json"],
                                    env={**env, "PGBRAID_TENANT": tenant.tenant})
        answers[key_id] = (result.exit_code, _blind(json.loads(result.stdout), key_id))
    first, second = answers.values()
    assert first == second and first[0] == 2 and first[1]["error"]["code"] == "not_found"
