"""Live fetch (seed 004) against a real HTTP server on loopback, started here.

The server answers CISA KEV records the corpus does not hold (the real catalogue,
split in two: the corpus is ingested from one part, the server answers from the
other), and misbehaves on purpose: hangs, a 100 MB body, malformed JSON, a
redirect to a host not allowed.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from pgbraid.errors import InvalidRequest, NotEnabled
from tests.conftest import shared
from tests.serving import served, tenant_client  # noqa: F401  (fixture)

KEV = json.load(gzip.open(shared("cisa_kev", "known_exploited_vulnerabilities.json.gz")))
RECORDS = KEV["vulnerabilities"]
CORPUS, REMOTE = RECORDS[:40], {r["cveID"]: r for r in RECORDS[40:400]}
MISSING = RECORDS[100]["cveID"]
HELD = CORPUS[3]["cveID"]
MAPPING = {"records": "vulnerabilities",
           "fields": {"id": "cveID", "title": "vulnerabilityName", "text": "shortDescription"}}


class Remote(BaseHTTPRequestHandler):
    """/kev/ID: the record as the KEV feed shapes it; the other paths misbehave."""

    hits: list[str] = []

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_GET(self):
        self.hits.append(self.path)
        if self.path.startswith("/kev/"):
            record = REMOTE.get(unquote(self.path[5:]))
            if record is None:
                return self._send(404, b'{"error": "not found"}')
            return self._send(200, json.dumps({"vulnerabilities": [record]}).encode())
        if self.path.startswith("/hang/"):
            time.sleep(30)
            return self._send(200, b"{}")
        if self.path.startswith("/big/"):  # 100 MB, no Content-Length: refused while streaming
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                for _ in range(100 * 16):
                    self.wfile.write(b" " * 65536)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if self.path.startswith("/malformed/"):
            return self._send(200, b'{"vulnerabilities": [{"cveID": "CVE-1', )
        if self.path.startswith("/partial/"):  # a good record, then one without text
            good, bad = dict(RECORDS[200]), dict(RECORDS[201])
            bad.pop("shortDescription")
            return self._send(200, json.dumps({"vulnerabilities": [good, bad]}).encode())
        if self.path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_port}/kev/x")
            self.end_headers()
            return
        self._send(404, b"{}")

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def remote():
    Remote.hits = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Remote)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def source(remote, path="kev", **extra):
    return {"url": f"http://127.0.0.1:{remote.server_port}/{path}/{{identifier}}",
            "allow_hosts": ["127.0.0.1"], "timeout": 2, **MAPPING, **extra}


@pytest.fixture()
def kev(client, remote):
    """A pipeline holding 40 KEV records, its live source the loopback server."""
    name = f"live-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", live=source(remote))
    report = client.ingest(name, [{"id": r["cveID"], "title": r["vulnerabilityName"],
                                   "text": f"{r['cveID']} ({r['vendorProject']} {r['product']}): "
                                           f"{r['shortDescription']}"} for r in CORPUS])
    assert report.added == 40
    return name


def live_entry(response):
    (entry,) = [e for e in response.trace.retrievers if e.retriever == "live"]
    return entry


def fetches(remote, prefix="/kev/"):
    return [path for path in Remote.hits if path.startswith(prefix)]


def test_missing_identifier_is_fetched_stored_then_cited(client, kev, remote):
    response = client.search(kev, f"what is {MISSING}?", type="auto")
    entry = live_entry(response)
    assert entry.status == "ran", entry
    stored_id = f"live:{MISSING}"
    assert entry.details["stored"] == [stored_id]
    assert entry.details["host"] == "127.0.0.1" and entry.details["status"] == 200
    assert entry.hits == 1 and entry.ms > 0
    assert response.hits[0].document_id == stored_id
    assert REMOTE[MISSING]["shortDescription"][:40] in response.hits[0].page_content
    document = client.document(kev, stored_id)
    assert document["source"] == f"http://127.0.0.1:{remote.server_port}/kev/{MISSING}"
    assert document["metadata"]["live"]["fetched_at"]
    assert document["metadata"]["vendorProject"] == REMOTE[MISSING]["vendorProject"]
    assert fetches(remote) == [f"/kev/{MISSING}"]


def test_second_identical_search_is_served_from_the_store(client, kev, remote):
    first = client.search(kev, MISSING, type="auto")
    assert live_entry(first).status == "ran"
    second = client.search(kev, MISSING, type="auto")
    entry = live_entry(second)
    assert entry.status == "skipped" and MISSING in entry.reason
    assert second.hits[0].document_id == f"live:{MISSING}"
    assert len(fetches(remote)) == 1  # counted at the server: no second request


def test_identifier_the_corpus_holds_is_not_fetched(client, kev, remote):
    response = client.search(kev, HELD, type="auto")
    assert live_entry(response).status == "skipped"
    assert response.hits[0].document_id == HELD
    assert Remote.hits == []


def test_params_live_fetches_even_when_held_and_makes_a_version(client, kev, remote):
    client.search(kev, MISSING, type="auto")
    again = client.search(kev, MISSING, type="auto", params={"live": True})
    assert live_entry(again).status == "ran"
    assert len(fetches(remote)) == 2
    versions = client.versions(kev, f"live:{MISSING}")
    assert [v["version"] for v in versions] == [1, 2]  # each fetch keeps its own time


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_host_on_the_servers_own_network_is_refused_unless_the_operator_allows_it(
        data_dir, server, remote, host):
    """A pipeline admin's allow-list must not reach what only the server can reach: its
    loopback (a --no-auth pgbraid, the embeddings server), private networks, link-local
    metadata services. The suite allows them (conftest: PGBRAID_LIVE_PRIVATE_HOSTS=1)."""
    with tenant_client(data_dir, live_private_hosts=False) as client:
        name = f"live-{uuid.uuid4().hex[:8]}"
        client.create_pipeline(name, embedder="none", live={
            **source(remote), "url": f"http://{host}:{remote.server_port}/kev/{{identifier}}",
            "allow_hosts": [host]})
        entry = live_entry(client.search(name, MISSING, type="auto"))
        assert entry.status == "failed" and "not a public address" in entry.reason, entry
        assert "PGBRAID_LIVE_PRIVATE_HOSTS" in entry.reason
        assert Remote.hits == [] and client.documents(name)["documents"] == []


def test_a_name_that_rebinds_to_a_private_address_is_refused_before_its_body(
        data_dir, server, remote, monkeypatch):
    """DNS rebinding: the name resolves to a public address for the check and to loopback
    for the connection (the check is made to pass here). The connection is made only to
    the addresses its own lookup checked: the request never reaches the private server
    (a GET there can act: blind SSRF), and nothing is stored."""
    from pgbraid.live import fetch as live_fetch

    monkeypatch.setattr(live_fetch, "_check_global", lambda host, port: None)
    entry, stored = search_localhost(data_dir, remote)
    assert entry.status == "failed" and "not a public address" in entry.reason, entry
    assert Remote.hits == [] and stored == []


def test_the_connection_is_made_to_the_address_the_check_found(data_dir, server, remote,
                                                                monkeypatch):
    """Loopback counted public here: with private hosts refused, the fetch still connects
    (through the lookup it checked, trying each address: localhost may be ::1 first, where
    nothing listens), fetches and stores."""
    from pgbraid.live import fetch as live_fetch

    monkeypatch.setattr(live_fetch, "_refuse_private", lambda address, host: None)
    entry, _ = search_localhost(data_dir, remote)
    assert entry.status == "ran", entry
    assert fetches(remote) == [f"/kev/{MISSING}"]


def search_localhost(data_dir, remote):
    """A search of a new pipeline whose live source is the remote named localhost, with
    private hosts refused: its live entry and the documents stored."""
    with tenant_client(data_dir, live_private_hosts=False) as client:
        name = f"live-{uuid.uuid4().hex[:8]}"
        client.create_pipeline(name, embedder="none", live={
            **source(remote), "url": f"http://localhost:{remote.server_port}/kev/{{identifier}}",
            "allow_hosts": ["localhost"]})
        entry = live_entry(client.search(name, MISSING, type="auto"))
        return entry, client.documents(name)["documents"]

def test_server_down_gives_a_failed_leg_and_the_corpus_answer(client, kev, remote):
    remote.shutdown()
    remote.server_close()
    response = client.search(kev, f"{MISSING} {CORPUS[0]['vendorProject']}", type="auto")
    entry = live_entry(response)
    assert entry.status == "failed" and "cannot reach 127.0.0.1" in entry.reason
    assert all(not hit.document_id.startswith("live:") for hit in response.hits)
    assert response.hits  # the corpus still answers the vendor's name
    assert client.documents(kev)["documents"][-1]["document_id"] != f"live:{MISSING}"


@pytest.mark.parametrize("path, reason", [
    ("hang", "did not answer within 0.5 s"),
    ("big", "passed the limit of 65536 bytes"),
    ("malformed", "malformed JSON"),
    ("redirect", "host 'localhost' is not in the live source's allow_hosts"),
    ("partial", "document 2 of 127.0.0.1's answer: missing or empty text field"),
])
def test_bad_remote_answers_fail_the_leg_and_store_nothing(client, remote, path, reason):
    name = f"live-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none",
                           live=source(remote, path, timeout=0.5, max_bytes=65536))
    client.ingest(name, [{"id": "a", "text": "a document about something else"}])
    began = time.monotonic()
    response = client.search(name, MISSING, type="auto")
    entry = live_entry(response)
    assert entry.status == "failed" and reason in entry.reason, entry
    assert time.monotonic() - began < 10
    assert [d["document_id"] for d in client.documents(name)["documents"]] == ["a"]


def test_host_not_allowed_is_refused_when_declared(client, remote):
    with pytest.raises(InvalidRequest, match="not in allow_hosts"):
        client.create_pipeline(f"live-{uuid.uuid4().hex[:8]}", embedder="none",
                               live={"url": "http://example.org/{identifier}",
                                     "allow_hosts": ["127.0.0.1"]})
    with pytest.raises(InvalidRequest, match="not the host"):
        client.set_live_source("x", {"url": "http://{identifier}/", "allow_hosts": ["x"]})


def test_change_and_remove_the_live_source(client, kev, remote):
    assert client.live_source(kev)["allow_hosts"] == ["127.0.0.1"]
    changed = client.set_live_source(kev, source(remote, rate_limit=1))
    assert changed["rate_limit"] == 1
    assert live_entry(client.search(kev, MISSING)).status == "ran"
    other = RECORDS[101]["cveID"]
    limited = live_entry(client.search(kev, other))
    assert limited.status == "skipped" and "rate limit" in limited.reason
    client.set_live_source(kev, None)
    response = client.search(kev, other)
    assert [e.retriever for e in response.trace.retrievers if e.retriever == "live"] == []
    with pytest.raises(NotEnabled):
        client.search(kev, other, params={"live": True})


def test_ingestion_refuses_the_live_namespace(client, kev):
    report = client.ingest(kev, [{"id": "live:CVE-2000-0001", "text": "spoofed"}])
    assert report.added == 0 and "live" in report.failed[0].message


# -- the CLI and HTTP ----------------------------------------------------------------

def test_cli_declares_changes_and_removes_a_live_source(env, client, remote):
    from typer.testing import CliRunner

    from pgbraid.cli import app

    runner, name = CliRunner(), f"live-{uuid.uuid4().hex[:8]}"
    url = f"http://127.0.0.1:{remote.server_port}/kev/{{identifier}}"
    created = runner.invoke(app, ["pipeline", "create", name, "--embedder", "none",
                                  "--live-source", url, "--live-allow-host", "127.0.0.1",
                                  "--live-option", "records=vulnerabilities",
                                  "--live-option", "id_field=cveID",
                                  "--live-option", "text_field=shortDescription",
                                  "--live-option", "timeout=3", "--json"], env=env)
    assert created.exit_code == 0, created.output
    shown = json.loads(runner.invoke(app, ["pipeline", "live", name, "--json"], env=env).output)
    assert shown["url"] == url and shown["fields"]["id"] == "cveID" and shown["timeout"] == 3
    hit = json.loads(runner.invoke(app, ["search", name, MISSING, "--json"], env=env).output)
    assert hit["hits"][0]["document_id"] == f"live:{MISSING}"
    refused = runner.invoke(app, ["pipeline", "live", name, "--source",
                                  "http://example.org/{identifier}", "--allow-host", "127.0.0.1",
                                  "--json"], env=env)
    assert refused.exit_code == 2 and "allow_hosts" in json.loads(refused.output)["error"]["message"]
    removed = runner.invoke(app, ["pipeline", "live", name, "--remove", "--json"], env=env)
    assert removed.exit_code == 0
    gone = runner.invoke(app, ["pipeline", "live", name, "--json"], env=env)
    assert gone.exit_code == 2 and json.loads(gone.output)["error"]["code"] == "not_found"


def test_http_live_source_and_a_search_that_fetches(data_dir, server, served, remote):
    name = f"live-{uuid.uuid4().hex[:8]}"
    with tenant_client(data_dir) as tenant:
        admin_key = tenant.create_key(pipeline="*", admin=True,
                                      permissions="read,write,execute,admin")["key"]
        with served.client(admin_key) as admin:
            created = admin.post("/pipelines", json={"name": name, "embedder": "none",
                                                     "live": source(remote)})
            assert created.status_code == 201, created.text
        reader_key = tenant.create_key(pipeline=name, permissions="read,execute")["key"]
    with served.client(admin_key) as admin, served.client(reader_key) as reader:
        assert admin.get(f"/pipelines/{name}/live").json()["allow_hosts"] == ["127.0.0.1"]
        assert reader.get(f"/pipelines/{name}/live").status_code == 403
        bad = admin.put(f"/pipelines/{name}/live", json={**source(remote), "proxy": "x"})
        assert bad.status_code == 400 and "proxy" in bad.json()["error"]["message"]
        found = reader.post(f"/pipelines/{name}/search", json={"query": MISSING, "type": "auto"})
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["hits"][0]["document_id"] == f"live:{MISSING}"
        live = [e for e in body["trace"]["retrievers"] if e["retriever"] == "live"]
        assert live[0]["status"] == "ran" and live[0]["details"]["stored"] == [f"live:{MISSING}"]
        assert admin.delete(f"/pipelines/{name}/live").json() == {"deleted": f"{name}/live"}
        assert admin.get(f"/pipelines/{name}/live").status_code == 404


def test_an_encrypted_pipeline_stores_what_it_fetched_sealed(client, remote, superuser):
    name = f"live-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", encrypt=True, live=source(remote))
    response = client.search(name, MISSING, type="auto")
    assert live_entry(response).status == "ran"
    assert response.hits[0].document_id == f"live:{MISSING}"
    text = REMOTE[MISSING]["shortDescription"]
    assert response.hits[0].page_content == text
    stored = superuser.execute(
        "SELECT v.body FROM pgbraid.versions v JOIN pgbraid.documents d ON d.id = v.document_id"
        " JOIN pgbraid.pipelines p ON p.id = d.pipeline_id"
        " WHERE d.external_id = %s AND p.name = %s", (f"live:{MISSING}", name)).fetchall()
    assert stored and all(text[:30] not in body for (body,) in stored)
