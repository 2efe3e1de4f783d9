"""Refusals over HTTP: one error shape, the status from the error table, the field named,
no trace or SQL in a body, and nothing written by a refused request."""

from __future__ import annotations

import json
import uuid
import pytest

from .keys import expired_key
from .serving import served, tenant_client  # noqa: F401  (fixture)


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        yield client


@pytest.fixture()
def pipeline(tenant) -> str:
    name = f"p{uuid.uuid4().hex[:8]}"
    tenant.create_pipeline(name, embedder="none")
    tenant.define_classification("secret", implies=["internal"])
    tenant.ingest(name, [{"id": "open", "text": "pump maintenance guide"},
                         {"id": "inner", "text": "pump internals", "classification": ["internal"]},
                         {"id": "hidden", "text": "pump secrets", "classification": ["secret"]}])
    return name


@pytest.fixture()
def admin(tenant, served):
    key = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    with served.client(key["key"]) as http:
        yield http


def documents(superuser, tenant) -> int:
    """Documents of the tenant, counted past row-level security."""
    return superuser.execute("SELECT count(*) FROM pgbraid.documents WHERE tenant_id = %s",
                             (tenant.tenant,)).fetchone()[0]


def error_of(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert "Traceback" not in response.text and "SELECT" not in response.text
    return body["error"]


@pytest.mark.parametrize("content, fragment", [
    (b'{"query": "pump",', "not valid JSON"),
    (b"not json at all", "not valid JSON"),
    (b'{"query": "pump", "limit": 3}', "unknown field 'limit'"),
    (b'{"query": "pump", "params": {"k": "five"}}', "params.k"),
    (b'{"query": 5}', "query"),
    (b'{"query": "pump", "type": "warp"}', "unknown search type"),
    (b'{"query": "pump", "group_by": "page"}', "group_by"),
    # checked whatever the type, not only where a vector leg runs (trial2: bm25 answered 200)
    (b'{"query": "pump", "type": "bm25", "distance_strategy": "manhattan"}', "distance_strategy"),
    (b'{"query": "pump", "type": "fulltext", "distance_strategy": "l2"}', "distance_strategy"),
    (b'{"query": "a\\u0000b"}', "NUL"),
    (b'{"query": "a\\ud800b"}', "surrogates"),
    (b"[1, 2]", "the body must be a JSON object"),
    (b"", "body is required"),
    (b'{"query": "pump", "params": ' + b'{"a": ' * 100_000 + b'1' + b'}' * 100_001,
     "the body nests too deeply"),
])
def test_bad_search_bodies_are_400_naming_what_is_wrong(admin, pipeline, content, fragment):
    response = admin.post(f"/pipelines/{pipeline}/search", content=content,
                          headers={"content-type": "application/json"})
    assert fragment in error_of(response, 400, "invalid_request")["message"]


@pytest.mark.parametrize("path", ["/pipelines/{p}/search", "/keys", "/ground"])
def test_a_json_body_sent_as_a_form_names_the_content_type(admin, pipeline, path):
    """``curl -d '{...}'`` without a header sends application/x-www-form-urlencoded."""
    response = admin.post(path.format(p=pipeline), content=b'{"query": "pump"}',
                          headers={"content-type": "application/x-www-form-urlencoded"})
    error = error_of(response, 400, "invalid_request")
    assert error["details"]["field"] == "body"
    assert "Content-Type: application/json" in error["message"], error


@pytest.mark.parametrize("path, body", [
    ("/pipelines", {"name": "x", "embeder": "none"}),
    ("/keys", {"permissions": ["read"], "pipelines": "*"}),
    ("/ground", {"entity": "e", "value": "v", "scopes": {}}),
    ("/ground", {"entity": "e", "valeu": "v"}),  # the typo is named, not "value" missing
    ("/sources/any/search", {"query": "q", "kk": 3}),
])
def test_unknown_fields_are_refused_by_name_everywhere(admin, path, body):
    wrong = next(k for k in body if k not in ("name", "permissions", "entity", "value", "query"))
    error = error_of(admin.post(path, json=body), 400, "invalid_request")
    assert error["message"] == f"unknown field {wrong!r}" and error["details"]["field"] == wrong


@pytest.mark.parametrize("path, body", [
    ("/pipelines", {"name": "bad name!", "embedder": "none"}),
    ("/keys", {"pipeline": "a b", "permissions": ["read"]}),
])
def test_a_bad_pipeline_name_gets_the_cli_s_message_not_a_regex(admin, path, body):
    """The CLI and the Client say what a name may hold; HTTP said pydantic's
    "String should match pattern '^[A-Za-z0-9]...'" (trial2)."""
    error = error_of(admin.post(path, json=body), 400, "invalid_request")
    assert "1-63 letters, digits" in error["message"] and "pattern" not in error["message"]
    schema = admin.get("/openapi.json").json()["components"]["schemas"]
    field = {"/pipelines": ("PipelineCreate", "name"), "/keys": ("KeyCreate", "pipeline")}[path]
    assert "pattern" in schema[field[0]]["properties"][field[1]]  # still declared


def test_a_bad_ingestion_body_is_refused_whole_and_writes_nothing(admin, pipeline, tenant,
                                                                 superuser):
    before = documents(superuser, tenant)
    lines = b'{"id": "n1", "text": "fine"}\n{"id": "n2", "text": "fine", "tags": ["x"]}\n'
    error = error_of(admin.post(f"/pipelines/{pipeline}/documents", content=lines,
                                headers={"content-type": "application/x-ndjson"}), 400,
                     "invalid_request")
    assert error["message"].startswith("line 2: unknown field 'tags'")
    for body in ([{"id": "n3", "text": 5}], [{"id": "n4"}], [{"id": "../etc", "text": "t"}], [],
                 [{"id": True, "text": "t"}], [{"id": 5.0, "text": "t"}]):  # not stored as "1"
        error_of(admin.post(f"/pipelines/{pipeline}/documents", json=body), 400, "invalid_request")
    error_of(admin.post(f"/pipelines/{pipeline}/documents", content=b"id,text\n1,x",
                        headers={"content-type": "text/csv"}), 400, "invalid_request")
    assert documents(superuser, tenant) == before


@pytest.mark.parametrize("path", [
    "/pipelines/{p}/documents/a/%2E%2E/%2E%2E/etc/passwd", "/pipelines/{p}/documents/a/%2e%2e",
    "/pipelines/{p}/documents/%2Fetc%2Fpasswd", "/pipelines/{p}/documents/a%00b",
    "/pipelines/{p}/documents/a%ED%A0%80b", "/pipelines/{p}/versions/a/%2E/b",
    "/pipelines/{p}/documents?after=a%00b", "/pipelines/{p}/documents?limit=0",
    "/pipelines/{p}/fragments/abc", "/pipelines/{p}/fragments/0",
    "/pipelines/{p}/documents/open?version=0", "/pipelines/{p}/documents/open?as_of=yesterday",
    "/pipelines/bad%20name", "DELETE /pipelines/{p}/graph/vertices/t/a%2F%2E%2E",
    "DELETE /pipelines/{p}/documents/%2E%2E",
])
def test_bad_ids_in_paths_and_queries_are_400(admin, pipeline, path):
    # '..' goes percent-encoded: a client normalises a plain one away, a hostile one does not.
    method, _, path = path.rpartition(" ")
    error_of(admin.request(method or "GET", path.format(p=pipeline)), 400, "invalid_request")


def test_unknown_routes_and_methods_have_the_one_shape(admin):
    error_of(admin.get("/nowhere"), 404, "not_found")
    error_of(admin.put("/pipelines"), 405, "method_not_allowed")
    error_of(admin.delete("/healthz"), 405, "method_not_allowed")


def test_401_without_a_key_with_a_bad_one_a_revoked_one_and_an_expired_one(
        served, tenant, pipeline, superuser):
    search = f"/pipelines/{pipeline}/search"
    body = {"query": "pump"}
    with served.client() as anonymous:
        response = anonymous.post(search, json=body)
        assert "unauthorized" == error_of(response, 401, "unauthorized")["code"]
        assert response.headers["www-authenticate"] == "Bearer"
        for header in ("Bearer", "Basic dXNlcjpwdw==", "Bearer pgb_" + "A" * 43, "Bearer x" * 3,
                       ("Bearer pgb_" + "é" * 43).encode()):
            error_of(anonymous.post(search, json=body, headers={"Authorization": header}), 401,
                     "unauthorized")
    revoked = tenant.create_key(pipeline=pipeline, permissions="read,execute")
    tenant.revoke_key(revoked["id"])
    expired = expired_key(tenant, pipeline=pipeline, permissions="read,execute")
    for key, why in ((revoked, "revoked"), (expired, "expired")):
        with served.client(key["key"]) as http:
            assert why in error_of(http.post(search, json=body), 401, "unauthorized")["message"]
    before = documents(superuser, tenant)
    with served.client(revoked["key"]) as http:
        error_of(http.post(f"/pipelines/{pipeline}/documents", json={"id": "z", "text": "t"}), 401,
                 "unauthorized")
    assert documents(superuser, tenant) == before


def test_403_without_execute_beyond_the_classifications_or_without_write(
        served, tenant, pipeline, superuser):
    read_only = tenant.create_key(pipeline=pipeline, permissions="read")
    internal = tenant.create_key(pipeline=pipeline, permissions="read,execute,write",
                                 classification="internal")
    with served.client(read_only["key"]) as http:
        error = error_of(http.post(f"/pipelines/{pipeline}/search", json={"query": "pump"}), 403,
                         "forbidden")
        assert error["details"]["missing"] == ["execute"]
        assert http.get(f"/pipelines/{pipeline}/documents/open").status_code == 200
        before = documents(superuser, tenant)
        error_of(http.post(f"/pipelines/{pipeline}/documents", json={"id": "w", "text": "t"}),
                 403, "forbidden")
        error_of(http.post("/pipelines", json={"name": "mine"}), 403, "forbidden")
        error_of(http.get("/keys"), 403, "forbidden")
        assert documents(superuser, tenant) == before
    with served.client(internal["key"]) as http:
        hits = http.post(f"/pipelines/{pipeline}/search", json={"query": "pump"}).json()["hits"]
        assert {h["document_id"] for h in hits} == {"open", "inner"}
        error_of(http.post(f"/pipelines/{pipeline}/search",
                           json={"query": "pump", "classification": ["secret"]}), 403, "forbidden")
        error_of(http.get(f"/pipelines/{pipeline}/documents/hidden"), 404, "not_found")
        error_of(http.post("/keys", json={"permissions": ["read"]}), 403, "forbidden")


def test_another_tenants_key_gets_404_for_this_tenants_pipeline(served, data_dir, pipeline):
    with tenant_client(data_dir) as other:
        every = other.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
        other.create_pipeline(pipeline, embedder="none")  # the same name, in its own tenant
        other.ingest(pipeline, [{"id": "theirs", "text": "pump of the other tenant"}])
        named = other.create_key(pipeline=pipeline, permissions="read,execute")
        with served.client(every["key"]) as http:
            for path in (f"/pipelines/{pipeline}x", f"/pipelines/{pipeline}x/documents/open"):
                error_of(http.get(path), 404, "not_found")
            error_of(http.post(f"/pipelines/{pipeline}x/search", json={"query": "pump"}), 404,
                     "not_found")
        with served.client(named["key"]) as http:
            hits = http.post(f"/pipelines/{pipeline}/search", json={"query": "pump"}).json()["hits"]
            assert [h["document_id"] for h in hits] == ["theirs"]  # never this tenant's
            error_of(http.get(f"/pipelines/{pipeline}/documents/open"), 404, "not_found")


def test_another_tenants_star_key_sees_none_of_this_tenants_pipelines(served, data_dir, pipeline):
    with tenant_client(data_dir) as other:
        every = other.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
        with served.client(every["key"]) as http:
            assert http.get("/pipelines").json() == []
            error_of(http.get(f"/pipelines/{pipeline}"), 404, "not_found")
            error_of(http.post(f"/pipelines/{pipeline}/search", json={"query": "pump"}), 404,
                     "not_found")
            error_of(http.delete(f"/pipelines/{pipeline}"), 404, "not_found")


def test_409_413_and_501(admin, pipeline, tenant, superuser):
    error_of(admin.post("/pipelines", json={"name": pipeline, "embedder": "none"}), 409, "conflict")
    before = documents(superuser, tenant)
    big = json.dumps([{"id": f"b{i}", "text": "x" * 1000} for i in range(10_000)]).encode()
    assert len(big) > 10_000_000
    error = error_of(admin.post(f"/pipelines/{pipeline}/documents", content=big,
                                headers={"content-type": "application/json"}), 413,
                     "payload_too_large")
    assert "PGBRAID_MAX_BODY_BYTES" in error["message"]
    assert documents(superuser, tenant) == before
    error_of(admin.post(f"/pipelines/{pipeline}/search", json={"query": "q" * 10_001}), 413,
             "payload_too_large")
    error = error_of(admin.post(f"/pipelines/{pipeline}/search",
                                json={"query": "pump", "type": "similarity"}), 501, "not_enabled")
    assert "no embedder" in error["message"]
