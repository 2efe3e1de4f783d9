"""Quarantine and release over HTTP (a real ``pgbraid serve``) and the CLI; the
strategies listing; ``pgbraid search --as-of`` and ``--cursor``."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from pgbraid import strategies
from pgbraid.cli import app

from .serving import served, tenant_client  # noqa: F401  (fixture)

runner = CliRunner()
DOCS = [{"id": "guides/intro.md", "title": "Intro", "text": "rotate the credentials monthly"},
        {"id": "d2", "title": "Keys", "text": "rotate leaked credentials at once"},
        {"id": "d3", "title": "Backups", "text": "nightly backup and restore drills"}]


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        yield client


@pytest.fixture()
def stocked(tenant) -> str:
    name = f"p{uuid.uuid4().hex[:8]}"
    tenant.create_pipeline(name, embedder="none")
    tenant.ingest(name, DOCS)
    return name


def key(tenant, *permissions: str, pipeline: str = "*") -> str:
    return tenant.create_key(pipeline=pipeline, permissions=",".join(permissions))["key"]


def found(http, pipeline: str, query: str = "rotate credentials") -> list[str]:
    response = http.post(f"/pipelines/{pipeline}/search",
                         json={"query": query, "type": "bm25", "params": {"k": 5}})
    assert response.status_code == 200, response.text
    return [h["document_id"] for h in response.json()["hits"]]


def test_quarantine_and_release_over_http(served, tenant, stocked):
    writer = served.client(key(tenant, "read", "write", "execute"))
    reader = served.client(key(tenant, "read", "execute"))
    base = f"/pipelines/{stocked}/documents/guides/intro.md"
    assert "guides/intro.md" in found(reader, stocked)
    answer = writer.post(base + "/quarantine", json={"reason": "leaked secret"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["quarantined"] and body["changed"] and body["reason"] == "leaked secret"
    assert body["quarantined_at"]
    assert found(reader, stocked) == ["d2"] and found(writer, stocked) == ["d2"]
    assert reader.get(base).status_code == 404  # as if it did not exist
    assert writer.get(base).json()["quarantine_reason"] == "leaked secret"
    again = writer.post(base + "/quarantine").json()  # no body: idempotent, reason kept
    assert again == {**body, "changed": False, "lsn": again["lsn"]}
    released = writer.post(base + "/release")
    assert released.status_code == 200 and released.json()["changed"] is True
    assert found(reader, stocked)[0] == "guides/intro.md"
    assert writer.post(base + "/release", json={}).json()["changed"] is False


def test_quarantine_needs_write_and_a_document_of_ones_own(served, tenant, stocked, data_dir):
    reader = served.client(key(tenant, "read", "execute"))
    base = f"/pipelines/{stocked}/documents/d2"
    for path in ("/quarantine", "/release"):
        denied = reader.post(base + path)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    writer = served.client(key(tenant, "read", "write", "execute"))
    missing = writer.post(f"/pipelines/{stocked}/documents/nope/quarantine")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    unknown = writer.post(base + "/quarantine", json={"reason": "x", "until": "tomorrow"})
    assert unknown.status_code == 400 and "until" in unknown.text
    assert writer.post(base + "/release", json={"reason": "ok"}).status_code == 400
    assert writer.post(base + "/quarantine", json={"reason": "x" * 1001}).status_code == 400
    assert writer.post(f"/pipelines/{stocked}/documents/a%2F..%2Fd2/quarantine").status_code in (
        400, 404)
    with tenant_client(data_dir) as other:  # another tenant, a pipeline of the same name
        other.create_pipeline(stocked, embedder="none")
        other.ingest(stocked, [{"id": "mine", "text": "other tenant text"}])
        theirs = served.client(key(other, "read", "write", "execute"))
        assert theirs.post(base + "/quarantine").status_code == 404
        elsewhere = served.client(key(other, "read", "write", "execute",
                                      pipeline=stocked))
        assert elsewhere.post(f"/pipelines/{stocked}/documents/mine/quarantine").json()["changed"]
    assert "d2" in found(reader, stocked)  # nothing of ours moved
    none = f"p{uuid.uuid4().hex[:8]}"
    assert writer.post(f"/pipelines/{none}/documents/d2/quarantine").status_code == 404


def test_the_strategies_listing(served, tenant):
    assert served.client().get("/strategies").status_code == 401
    listing = served.client(key(tenant, "read")).get("/strategies")
    assert listing.status_code == 200
    assert listing.json() == json.loads(json.dumps(strategies.describe()))
    assert {"bm25", "hybrid", "auto", "history"} <= set(listing.json()["types"])


def cli(env, *args, code: int = 0):
    result = runner.invoke(app, list(args), env=env)
    assert result.exit_code == code, result.output
    return result.output


def test_cli_quarantine_release_and_search_as_of_and_cursor(data_dir, tenant, stocked):
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": tenant.tenant}
    body = json.loads(cli(env, "document", "quarantine", stocked, "d2", "--reason", "review",
                          "--json"))
    assert body["quarantined"] and body["reason"] == "review" and body["changed"]
    assert "quarantined already (review)" in cli(env, "document", "quarantine", stocked, "d2")
    hits = json.loads(cli(env, "search", stocked, "rotate credentials", "--type", "bm25",
                          "--json"))["hits"]
    assert [h["document_id"] for h in hits] == ["guides/intro.md"]
    missing = json.loads(cli(env, "document", "quarantine", stocked, "nope", "--json", code=2))
    assert missing["error"]["code"] == "not_found"
    assert "d2: released" in cli(env, "document", "release", stocked, "d2")
    assert json.loads(cli(env, "document", "release", stocked, "d2", "--json"))["changed"] is False

    moment = tenant.document(stocked, "d3")["valid_from"]
    tenant.ingest(stocked, [{"id": "d3", "text": "weekly snapshot schedule"}])
    old = json.loads(cli(env, "search", stocked, "backup drills", "--type", "bm25", "--as-of",
                         moment, "--json"))
    assert [h["document_id"] for h in old["hits"]] == ["d3"] and old["as_of"]
    assert json.loads(cli(env, "search", stocked, "backup drills", "--type", "bm25",
                          "--json"))["hits"] == []
    first = json.loads(cli(env, "search", stocked, "rotate credentials", "--type", "bm25",
                           "--k", "1", "--params", '{"offset": 0}', "--json"))
    assert first["next_cursor"]
    second = json.loads(cli(env, "search", stocked, "rotate credentials", "--type", "bm25",
                            "--k", "1", "--cursor", first["next_cursor"], "--json"))
    assert second["hits"][0]["rank"] == 2
    assert second["hits"][0]["document_id"] != first["hits"][0]["document_id"]
    assert "next page: --cursor" in cli(env, "search", stocked, "rotate credentials", "--type",
                                        "bm25", "--k", "1", "--params", '{"offset": 0}')
    bad = json.loads(cli(env, "search", stocked, "x", "--as-of", "yesterday", "--json", code=2))
    assert bad["error"]["code"] == "invalid_request"


def test_each_change_is_audited_once_and_a_refusal_too(served, tenant, stocked):
    tenant.quarantine_document(stocked, "d2", reason="poisoned")
    tenant.quarantine_document(stocked, "d2")  # no change: nothing to record
    tenant.release_document(stocked, "d2")
    reader = served.client(key(tenant, "read", "execute"))
    assert reader.post(f"/pipelines/{stocked}/documents/d2/quarantine").status_code == 403
    # Denials are counted per key and minute in the server process; reading the log over
    # HTTP flushes that process's counts.
    admin = served.client(tenant.create_key(pipeline="*", permissions="read,write,execute,admin",
                                            admin=True)["key"])
    logged = admin.get("/audit", params={"limit": 50})
    assert logged.status_code == 200, logged.text
    events = [e for e in reversed(logged.json()) if e["action"].startswith(("document.q",
                                                                           "document.r",
                                                                           "access"))]
    changes = [e for e in events if e["action"] != "access.denied"]
    assert [(e["action"], e["target"], e["detail"]) for e in changes] == [
        ("document.quarantine", f"{stocked}/d2", {"reason": "poisoned"}),
        ("document.release", f"{stocked}/d2", {})]
    # A counted row is stamped with its minute, so it need not sort after the changes.
    (denied,) = [e for e in events if e["action"] == "access.denied"]
    assert any(kind.startswith("quarantine_document") for kind in denied["detail"]["denials"])
