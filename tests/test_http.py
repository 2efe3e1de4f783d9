"""The HTTP API over a real ``pgbraid serve`` process: every endpoint's happy path, and
search's body equal to the CLI's --json output."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from typer.testing import CliRunner

from pgbraid.cli import app

from .serving import Served, served, tenant_client  # noqa: F401  (fixture)

runner = CliRunner()
DOCS = [{"id": f"doc-{i}", "title": title, "text": text, "metadata": {"n": i}}
        for i, (title, text) in enumerate([
            ("Pumps", "centrifugal pump maintenance guide"),
            ("Valves", "valve maintenance and inspection"),
            ("Boilers", "boiler water treatment and blowdown"),
            ("Keys", "rotate the credentials monthly and revoke leaked keys"),
            ("Backups", "nightly backup and restore drills")])]


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        yield client


@pytest.fixture()
def admin(tenant, served):
    key = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    with served.client(key["key"]) as http:
        yield http


@pytest.fixture()
def stocked(tenant, admin) -> str:
    name = f"p{uuid.uuid4().hex[:8]}"
    assert admin.post("/pipelines", json={"name": name, "embedder": "none"}).status_code == 201
    assert admin.post(f"/pipelines/{name}/documents", json=DOCS).json()["added"] == 5
    return name


def without_timings(value):
    """A body with its timings (ms, *_ms) removed: they differ between two runs."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items()
                if k != "ms" and not k.endswith("_ms")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def test_health_readiness_and_the_openapi_document(served):
    assert served.client().get("/healthz").json() == {"status": "ok"}
    assert served.client().get("/readyz").json() == {"status": "ready"}
    document = served.client().get("/openapi.json").json()
    search = document["paths"]["/pipelines/{pipeline}/search"]["post"]
    assert search["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SearchResponse"}
    assert {"400", "401", "403", "404", "413", "501", "503", "504"} <= set(search["responses"])
    operations = [op for ops in document["paths"].values() for op in ops.values()]
    assert not any("422" in op["responses"] for op in operations)
    assert document["components"]["schemas"]["SearchBody"]["additionalProperties"] is False
    assert "HTTPBearer" in document["components"]["securitySchemes"]
    refs, stack = set(), [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            refs.update([node["$ref"]] if isinstance(node.get("$ref"), str) else [])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    missing = {r for r in refs if r.rsplit("/", 1)[-1] not in document["components"]["schemas"]}
    assert "#/components/schemas/DocumentIn" in refs and not missing


def test_pipelines_create_list_show_delete(admin):
    name = f"p{uuid.uuid4().hex[:8]}"
    created = admin.post("/pipelines", json={"name": name, "embedder": "none",
                                             "language": "german"})
    assert created.status_code == 201
    assert created.json()["language"] == "german" and created.json()["embedder"] is None
    assert [p["name"] for p in admin.get("/pipelines").json()] == [name]
    assert admin.get(f"/pipelines/{name}").json()["documents"] == 0
    assert admin.delete(f"/pipelines/{name}").json() == {"deleted": name, "warnings": []}
    assert admin.get(f"/pipelines/{name}").status_code == 404


def test_ingest_an_object_an_array_and_ndjson_then_list_every_page(admin, stocked):
    one = admin.post(f"/pipelines/{stocked}/documents", json={"id": "solo", "text": "one alone"})
    assert one.json()["added"] == 1
    lines = b'{"id": "nd-1", "text": "first line"}\n\n{"id": "nd-2", "text": "second line"}\n'
    ndjson = admin.post(f"/pipelines/{stocked}/documents", content=lines,
                        headers={"content-type": "application/x-ndjson"})
    assert ndjson.json()["added"] == 2
    again = admin.post(f"/pipelines/{stocked}/documents", json=DOCS)
    assert again.json()["unchanged"] == 5 and again.json()["added"] == 0
    seen, after, pages = [], None, 0
    while True:
        page = admin.get(f"/pipelines/{stocked}/documents",
                         params={"limit": 3, **({"after": after} if after else {})}).json()
        seen += [d["document_id"] for d in page["documents"]]
        pages += 1
        after = page["next"]
        if after is None:
            break
    assert seen == sorted([d["id"] for d in DOCS] + ["solo", "nd-1", "nd-2"]) and pages == 3


def test_document_read_versions_point_in_time_and_delete(admin, stocked):
    first = admin.get(f"/pipelines/{stocked}/documents/doc-3").json()
    assert first["version"] == 1 and first["text"].startswith("rotate")
    changed = {**DOCS[3], "text": "rotate the credentials weekly"}
    assert admin.post(f"/pipelines/{stocked}/documents", json=changed).json()["updated"] == 1
    versions = admin.get(f"/pipelines/{stocked}/versions/doc-3").json()
    assert [(v["version"], v["current"]) for v in versions] == [(1, False), (2, True)]
    then = admin.get(f"/pipelines/{stocked}/documents/doc-3",
                     params={"as_of": versions[0]["valid_from"]}).json()
    assert then["version"] == 1 and "monthly" in then["text"]
    for type_ in ("bm25", "fulltext", "auto"):  # a search as of that time finds version 1
        past = admin.post(f"/pipelines/{stocked}/search", json={
            "query": "monthly", "type": type_, "as_of": versions[0]["valid_from"]})
        assert past.status_code == 200, past.json()
        assert [h["document_id"] for h in past.json()["hits"]] == ["doc-3"]
        assert past.json()["as_of"] is not None
    assert admin.post(f"/pipelines/{stocked}/search", json={"query": "monthly"}).json()[
        "hits"] == []
    for bad in (1764547200, "yesterday"):
        refused = admin.post(f"/pipelines/{stocked}/search", json={"query": "x", "as_of": bad})
        assert refused.status_code == 400, refused.json()
        assert refused.json()["error"]["details"]["field"] == "as_of"
    assert admin.get(f"/pipelines/{stocked}/documents/doc-3", params={"version": 2}).json()[
        "text"].endswith("weekly")
    expired = admin.delete(f"/pipelines/{stocked}/documents/doc-3").json()
    assert expired.pop("lsn").count("/") == 1
    assert expired == {"document_id": "doc-3", "expired_version": 2}
    hits = admin.post(f"/pipelines/{stocked}/search", json={"query": "credentials"}).json()["hits"]
    assert hits == []
    old = admin.get(f"/pipelines/{stocked}/documents/doc-3", params={"version": 1})
    assert old.status_code == 200 and not old.json()["current"]


def test_ids_with_slashes_and_fragments_by_id(admin, stocked):
    doc = {"id": "guides/pumps/intro.md", "text": "impeller wear on pumps"}
    admin.post(f"/pipelines/{stocked}/documents", json=doc)
    assert admin.get(f"/pipelines/{stocked}/documents/guides/pumps/intro.md").json()[
        "document_id"] == doc["id"]
    hit = admin.post(f"/pipelines/{stocked}/search", json={"query": "impeller"}).json()["hits"][0]
    fragment = admin.get(f"/pipelines/{stocked}/fragments/{hit['fragment_id']}").json()
    assert fragment["document_id"] == doc["id"] and fragment["page_content"] == hit["page_content"]


@pytest.mark.parametrize("type_, params", [
    ("fulltext", {"k": 3}), ("bm25", {"k": 3}), ("search", {"k": 3}), ("fuzzy", {"k": 3}),
    ("hybrid", {"k": 3}), ("auto", {"k": 3}), ("relational", {})])
def test_every_lexical_type_answers_with_a_trace(admin, stocked, type_, params):
    body = admin.post(f"/pipelines/{stocked}/search", json={
        "query": "pump maintenance", "type": type_, "params": params}).json()
    assert body["type"] == type_ and body["trace"]["retrievers"]
    if type_ == "relational":
        assert body["hits"] == []
    else:
        assert body["hits"][0]["document_id"] in ("doc-0", "doc-1")


def test_similarity_mmr_and_graph_on_a_pipeline_that_has_them(admin):
    name = f"v{uuid.uuid4().hex[:8]}"
    assert admin.post("/pipelines", json={"name": name}).status_code == 201  # minilm
    admin.post(f"/pipelines/{name}/documents", json=DOCS[:3])
    for type_ in ("similarity", "mmr"):
        body = admin.post(f"/pipelines/{name}/search", json={
            "query": "looking after a pump", "type": type_, "params": {"k": 2, "fetch_k": 3} if
            type_ == "mmr" else {"k": 2}, "distance_strategy": "cosine"}).json()
        assert body["hits"][0]["document_id"] == "doc-0", body
    graph = {"vertices": [{"type": "part", "key": "p1", "label": "Pump", "documents": ["doc-0"]},
                          {"type": "part", "key": "p2", "label": "Valve", "documents": ["doc-1"]},
                          {"type": "plant", "key": "w1", "label": "Works"}],
             "edges": [{"src_type": "part", "src": "p1", "type": "in", "dst_type": "plant",
                        "dst": "w1"},
                       {"src_type": "part", "src": "p2", "type": "in", "dst_type": "plant",
                        "dst": "w1", "weight": 2.0}]}
    assert admin.post(f"/pipelines/{name}/graph", json=graph).json() == {"vertices": 3, "edges": 2}
    assert admin.get(f"/pipelines/{name}/graph").json() == {"vertices": {"part": 2, "plant": 1},
                                                            "edges": {"in": 2}}
    body = admin.post(f"/pipelines/{name}/search", json={"query": "x", "type": "graph", "params": {
        "seed": "p1", "mode": "similar", "edge_type": "in"}}).json()
    assert [h["document_id"] for h in body["hits"]] == ["doc-1"]
    deleted = admin.delete(f"/pipelines/{name}/graph/vertices/part/p2")
    assert deleted.json() == {"deleted": "part:p2"}
    assert admin.get(f"/pipelines/{name}/graph").json()["edges"] == {"in": 1}
    assert admin.delete(f"/pipelines/{name}/graph/vertices/part/p2").status_code == 404


def test_search_body_is_the_cli_json_output(admin, stocked, data_dir, tenant):
    request = {"query": "maintenance guide", "type": "hybrid", "params": {"k": 4},
               "filters": {"n": {"lte": 3}}, "group_by": "document"}
    http = admin.post(f"/pipelines/{stocked}/search", json=request).json()
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": tenant.tenant}
    result = runner.invoke(app, ["search", stocked, request["query"], "--type", "hybrid",
                                 "--k", "4", "--filter", json.dumps(request["filters"]),
                                 "--group-by", "document", "--json"], env=env)
    assert result.exit_code == 0, result.output
    cli = json.loads(result.output)
    assert len(http["hits"]) >= 2
    assert without_timings(http) == without_timings(cli)


def test_retrieve_streams_one_hit_a_line_then_the_trace(admin, stocked):
    chunk = "func _process(delta): pump maintenance valve inspection boiler water treatment"
    body = {"query": chunk, "type": "bm25", "params": {"k": 4}}
    with admin.stream("POST", f"/pipelines/{stocked}/retrieve", json=body) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    searched = admin.post(f"/pipelines/{stocked}/search", json=body).json()
    assert lines[:-1] == searched["hits"] and len(lines) > 2
    assert without_timings(lines[-1]) == without_timings({k: v for k, v in searched.items()
                                                          if k != "hits"})


def test_sources_and_grounding(tenant, superuser, data_dir, tmp_path):
    table = f"suppliers_{uuid.uuid4().hex[:8]}"
    superuser.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, name text, state text)")
    superuser.execute(f"INSERT INTO public.{table} VALUES (1, 'Acme Metal Fabrication', 'TX'),"
                      " (2, 'Apex Plastics', 'CA')")
    key = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    process = Served(data_dir, tmp_path / "serve.log",  # the operator opens public to the tenant
                     env={"PGBRAID_SOURCE_SCHEMAS": f"{tenant.tenant}=public"})
    admin = process.client(key["key"])
    try:
        added = admin.post("/sources", json={"name": table, "table": table, "key": "id",
                                             "text": "name", "scope": ["state"]})
        assert added.status_code == 201 and added.json()["table"] == f"public.{table}"
        assert [s["name"] for s in admin.get("/sources").json()] == [table]
        assert admin.get(f"/sources/{table}").json()["missing_indexes"] == ["trigram", "fulltext"]
        found = admin.post(f"/sources/{table}/search", json={"query": "Acme Metal Fabricaton"})
        assert found.json()["candidates"][0]["key"] == "1"
        grounded = admin.post("/ground", json={"entity": table, "value": "acme metal fabrication",
                                               "scope": {"state": "TX"}}).json()
        assert grounded["status"] == "resolved" and grounded["match"]["key"] == "1"
        assert admin.post("/ground", json={"entity": table, "value": "Acme Metal Fabrication",
                                           "scope": {"state": "CA"}}).json()["status"] != "resolved"
        assert admin.delete(f"/sources/{table}").json() == {"deleted": table}
        assert admin.get(f"/sources/{table}").status_code == 404
    finally:
        admin.close()
        process.stop()
        superuser.execute(f"DROP TABLE public.{table}")


def test_keys_over_http_create_list_revoke(admin, stocked, served):
    created = admin.post("/keys", json={"pipeline": stocked, "permissions": ["read", "execute"],
                                        "classification": ["internal"]})
    assert created.status_code == 201 and set(created.json()) == {"id", "key"}
    key = created.json()
    listed = {k["id"]: k for k in admin.get("/keys").json()}[key["id"]]
    assert listed["prefix"] == key["key"][:12] and key["key"] not in json.dumps(listed)
    assert listed["permissions"] == ["read", "execute"]
    assert listed["classifications"] == ["internal"]
    with served.client(key["key"]) as reader:
        search = f"/pipelines/{stocked}/search"
        assert reader.post(search, json={"query": "pump"}).status_code == 200
        assert admin.delete(f"/keys/{key['id']}").json() == {"revoked": key["id"]}
        assert reader.post(search, json={"query": "pump"}).status_code == 401


def test_cli_document_list_delete_and_keys(data_dir, tenant, stocked):
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": tenant.tenant}

    def cli(*args):
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    page = cli("document", "list", stocked, "--limit", "2", "--json")
    assert [d["document_id"] for d in page["documents"]] == ["doc-0", "doc-1"]
    assert page["next"] == "doc-1"
    assert cli("document", "list", stocked, "--after", "doc-3", "--json")["documents"][0][
        "document_id"] == "doc-4"
    assert cli("document", stocked, "doc-4", "--json")["version"] == 1  # the old form still works
    expired = cli("document", "delete", stocked, "doc-4", "--json")
    assert expired.pop("lsn").count("/") == 1
    assert expired == {"document_id": "doc-4", "expired_version": 1}
    key = cli("keys", "create", "--pipeline", stocked, "--permissions", "read", "--json")
    assert set(key) == {"id", "key"} and key["key"].startswith("pgb_")
    listed = cli("keys", "list", "--json")
    assert listed[0]["id"] == key["id"] and listed[0]["revoked_at"] is None  # newest first
    assert cli("keys", "revoke", key["id"], "--json") == {"revoked": key["id"]}
    assert cli("keys", "list", "--json")[0]["revoked_at"] is not None


def test_access_log_has_one_line_per_request_with_the_trace(admin, stocked, served):
    response = admin.post(f"/pipelines/{stocked}/search", json={"query": "pump", "type": "hybrid"},
                          headers={"X-Request-ID": "trace-me-1"})
    assert response.headers["x-request-id"] == "trace-me-1"
    for _ in range(50):  # the line is written once the response has been sent
        lines = [line for line in served.access_lines() if line["request_id"] == "trace-me-1"]
        if lines:
            break
        time.sleep(0.05)
    assert len(lines) == 1
    line = lines[0]
    assert (line["method"], line["path"], line["status"]) == (
        "POST", f"/pipelines/{stocked}/search", 200)
    assert line["key_id"] and line["search_type"] == "hybrid"
    retrievers = response.json()["trace"]["retrievers"]
    assert set(line["retrievers"]) == {e["retriever"] for e in retrievers}
    assert admin.get("/healthz", headers={"X-Request-ID": "bad id with spaces"}).headers[
        "x-request-id"] != "bad id with spaces"
