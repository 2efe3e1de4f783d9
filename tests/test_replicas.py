"""Read replicas against a real streaming standby of the session's server, made by
``pgbraid server replica start`` (pg_basebackup -R): searches go to it, writes never
do, ``min_lsn`` waits for replay, a stopped replica hands over to the primary, and a
read DSN that is a primary or another cluster's standby is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest

import pgbraid
from pgbraid.db.server import EmbeddedServer
from pgbraid.db.standby import EmbeddedReplica
from pgbraid.errors import InvalidRequest, NotFound

WRITES = re.compile(r"statement: .*\b(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|COPY|GRANT"
                    r"|REVOKE|nextval|pg_advisory)\b")


@pytest.fixture(scope="module")
def replica(data_dir, server, env):
    """A hot standby of the session's server, started through the CLI, logging every
    statement it receives (to prove no write reaches it)."""
    name = f"t{uuid.uuid4().hex[:8]}"
    started = subprocess.run([sys.executable, "-m", "pgbraid", "server", "replica", "start",
                              "--name", name, "--json"], env={**os.environ, **env},
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    body = json.loads(started.stdout)
    assert body["running"] and body["dsn"]
    standby = EmbeddedReplica(server, name)
    standby.extra_options += " -c log_statement=all"
    standby.restart()
    yield standby
    standby.remove()


@pytest.fixture()
def reading(data_dir, replica):
    def make(**settings):
        return pgbraid.connect(data_dir=data_dir, read_dsn=replica.status().dsn,
                               read_refresh_s=0.2, **settings)
    return make


def _until_found(client, pipeline, query, **request):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            response = client.search(pipeline, query, **request)
        except NotFound:  # the replica has not replayed the pipeline's creation yet
            response = None
        if response is not None and response.hits:
            return response
        time.sleep(0.05)
    raise AssertionError(f"{query!r} never found")


def test_an_ingested_document_is_found_on_the_replica_after_replay(reading, replica):
    with reading() as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        report = client.ingest(name, [{"id": "a", "text": "The reactor maintenance schedule."}])
        assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", report.lsn)
        found = _until_found(client, name, "reactor", type="bm25")
        assert found.trace.server["role"] == "replica"
        assert found.trace.server["server"] == "replica-1"
        assert found.trace.server["lag_bytes"] >= 0
        assert [h.document_id for h in found.hits] == ["a"]
        assert client.replicas()[0]["usable"] is True


def test_min_lsn_waits_for_replay_then_falls_back_to_the_primary(reading, replica, server):
    with reading(read_wait_ms=300) as client, \
            psycopg.connect(replica.status().dsn, autocommit=True) as standby:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "a", "text": "alpha document"}])
        standby.execute("SELECT pg_wal_replay_pause()")
        try:
            lsn = client.ingest(name, [{"id": "b", "text": "zeppelin hangar"}]).lsn
            # Paused replay: the replica cannot have it, so after 300 ms the primary answers.
            fallback = client.search(name, "zeppelin", type="fulltext", min_lsn=lsn)
            assert fallback.trace.server["role"] == "primary"
            assert "no replica replayed min_lsn" in fallback.trace.server["reason"]
            assert fallback.trace.server["wait_ms"] >= 300
            assert [h.document_id for h in fallback.hits] == ["b"]
            # Without min_lsn the replica answers from what it has replayed: not b yet.
            stale = client.search(name, "zeppelin", type="fulltext")
            assert stale.trace.server["role"] == "replica" and stale.hits == ()
        finally:
            threading.Timer(0.4, lambda: psycopg.connect(replica.status().dsn, autocommit=True)
                            .execute("SELECT pg_wal_replay_resume()")).start()
        with reading(read_wait_ms=10_000) as patient:
            waited = patient.search(name, "zeppelin", type="fulltext", min_lsn=lsn)
        assert waited.trace.server["role"] == "replica"
        assert waited.trace.server["wait_ms"] >= 200
        assert [h.document_id for h in waited.hits] == ["b"]


def test_replica_and_primary_answer_alike_and_the_cache_follows_new_segments(reading):
    """Same client (one posting cache) on both servers: the same hits and scores; a new
    segment on the primary is seen on the replica once replayed."""
    with reading(read_wait_ms=10_000) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        docs = [{"id": f"d{i}", "text": f"reactor {'core ' * (i % 3)}maintenance note {i}"}
                for i in range(20)]
        lsn = client.ingest(name, docs).lsn
        on_replica = client.search(name, "reactor core", type="bm25", min_lsn=lsn,
                                   params={"k": 10})
        on_primary = client.search(name, "reactor core", type="bm25", consistency="primary",
                                   params={"k": 10})
        assert on_replica.trace.server["role"] == "replica"
        assert on_primary.trace.server == {"server": "primary", "role": "primary",
                                           "reason": "consistency: primary"}
        assert [(h.document_id, h.score) for h in on_replica.hits] == [
            (h.document_id, h.score) for h in on_primary.hits]
        lsn = client.ingest(name, [{"id": "new", "text": "reactor core core core core"}]).lsn
        again = client.search(name, "reactor core", type="bm25", min_lsn=lsn, params={"k": 10})
        assert again.trace.server["role"] == "replica"
        assert again.hits[0].document_id == "new"


def test_fused_legs_share_one_snapshot_on_the_replica(reading):
    """pg_export_snapshot / SET TRANSACTION SNAPSHOT on a hot standby."""
    with reading(read_wait_ms=10_000) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name)  # minilm: a similarity leg beside the lexical ones
        lsn = client.ingest(name, [{"id": "a", "text": "How often is the reactor serviced?"},
                                   {"id": "b", "text": "Opening hours of the visitor centre."}]).lsn
        fused = client.search(name, "reactor service interval", type="hybrid", min_lsn=lsn)
    assert fused.trace.server["role"] == "replica"
    ran = [e.retriever for e in fused.trace.retrievers if e.status == "ran"]
    assert len(ran) >= 2 and "similarity" in ran, fused.trace.retrievers
    assert fused.hits[0].document_id == "a"


def test_no_write_reaches_the_replica(reading, replica):
    log = replica.log_file
    before = log.stat().st_size
    with reading(read_wait_ms=10_000) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        lsn = client.ingest(name, [{"id": "a", "text": "reactor log"}]).lsn
        assert client.search(name, "reactor", type="bm25", min_lsn=lsn).hits
        assert client.search(name, "reactor", type="auto", min_lsn=lsn).hits
        client.delete_document(name, "a")
        client.delete_pipeline(name)
    with open(log, errors="replace") as handle:
        handle.seek(before)
        received = handle.read()
    assert "pgbraid.fragments" in received  # searches did reach it
    assert not WRITES.findall(received), WRITES.findall(received)[:5]


def test_a_stopped_replica_hands_over_to_the_primary(reading, replica):
    with reading() as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "a", "text": "turbine inspection"}])
        _until_found(client, name, "turbine")
        replica.stop()
        try:
            first = client.search(name, "turbine")
            assert first.trace.server["role"] == "primary"
            assert "replica-1" in first.trace.server["reason"]
            assert [h.document_id for h in first.hits] == ["a"]
            later = client.search(name, "turbine")
            assert later.trace.server["role"] == "primary" and later.hits
            assert client.replicas()[0]["usable"] is False
        finally:
            replica.start()


def test_a_read_dsn_that_is_a_primary_is_refused(data_dir, server):
    """Searches refuse to use it; writes and primary reads carry on (on the primary)."""
    with pgbraid.connect(data_dir=data_dir, read_dsn=server.status().dsn) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "a", "text": "reactor"}])
        with pytest.raises(InvalidRequest, match="not a standby") as caught:
            client.search(name, "reactor")
        assert caught.value.details["setting"] == "PGBRAID_READ_DSN"
        assert client.search(name, "reactor", consistency="primary").hits


def test_a_standby_of_another_cluster_is_refused(data_dir, server, tmp_path_factory):
    other = EmbeddedServer(tmp_path_factory.mktemp("other-cluster"))
    other.start()
    foreign = EmbeddedReplica(other, "foreign")
    try:
        dsn = foreign.start().dsn
        with pgbraid.connect(data_dir=data_dir, read_dsn=dsn) as client:
            with pytest.raises(InvalidRequest, match="another cluster"):
                client.replicas()
    finally:
        foreign.remove()
        other.stop()


@pytest.mark.parametrize("field, value", [("min_lsn", "16B3748"), ("min_lsn", "0/XYZ"),
                                          ("min_lsn", 42), ("consistency", "eventual")])
def test_bad_read_options_are_refused_by_name(client, pipeline, field, value):
    with pytest.raises(InvalidRequest, match=field):
        client.search(pipeline, "reactor", **{field: value})


def test_a_bad_replica_name_is_refused(server):
    with pytest.raises(InvalidRequest, match="replica name"):
        EmbeddedReplica(server, "../escape")


def test_pgbraid_serve_routes_searches_to_the_replica(data_dir, replica, tmp_path):
    """Over HTTP: the ingest answer's lsn as min_lsn, answered by the replica."""
    from .serving import Served as Serving

    http = Serving(data_dir, tmp_path / "serve.log", "--no-auth",
                   env={"PGBRAID_READ_DSN": replica.status().dsn, "PGBRAID_READ_WAIT_MS": "10000"})
    try:
        with http.client() as api:
            name = f"t-{uuid.uuid4().hex[:10]}"
            assert api.post("/pipelines", json={"name": name, "embedder": "none"}).status_code < 300
            report = api.post(f"/pipelines/{name}/documents",
                              json={"id": "h1", "text": "heliostat mirror alignment"}).json()
            body = api.post(f"/pipelines/{name}/search", json={
                "query": "heliostat", "type": "bm25", "min_lsn": report["lsn"]}).json()
            assert body["trace"]["server"]["role"] == "replica", body["trace"]
            assert [h["document_id"] for h in body["hits"]] == ["h1"]
            bad = api.post(f"/pipelines/{name}/search", json={"query": "x", "min_lsn": "nope"})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
            primary = api.post(f"/pipelines/{name}/search", json={
                "query": "heliostat", "consistency": "primary"}).json()
            assert primary["trace"]["server"]["role"] == "primary"
    finally:
        http.stop()


def test_serve_refuses_a_read_dsn_that_is_a_primary(data_dir, server, tmp_path):
    from .serving import Served as Serving

    http = Serving(data_dir, tmp_path / "serve.log", "--no-auth", wait=None,
                   env={"PGBRAID_READ_DSN": server.status().dsn})
    assert http.process.wait(timeout=120) == 2
    assert "read DSN replica-1" in http.output() and "not a standby" in http.output()


def test_every_strategy_answers_alike_on_the_replica_and_the_primary(reading):
    """The registry walk on a hot standby: same hits and trace (timings and the
    server aside) as on the primary, for every strategy, hybrid and auto."""
    from pgbraid import strategies

    def same(response):
        body = response.model_dump(mode="json")
        body["trace"].pop("server")
        return _strip(body)

    def touches(request):
        return request["type"] not in strategies.REGISTRY or strategies.get(
            request["type"]).touches_database

    with reading(read_wait_ms=10_000) as client:
        name = f"t-{uuid.uuid4().hex[:10]}"
        client.create_pipeline(name)
        client.ingest(name, [{"id": "p1", "title": "APT29 report",
                              "text": "APT29 uses spearphishing and PowerShell."},
                             {"id": "p2", "text": "The reactor maintenance schedule is weekly."}])
        client.load_graph_records(name, [("group", "G1", "APT29", ["p1"]),
                                         ("technique", "T1", "Spearphishing", [])],
                                  [("group", "G1", "uses", "technique", "T1")])
        lsn = client.ingest(name, [{"id": "p3", "text": "Reactor visitor centre."}]).lsn
        requests = [{"type": t, "query": "APT29" if t == "graph" else "APT29 reactor"}
                    for t in strategies.REGISTRY] + [
            {"type": "graph", "query": "APT29", "params": {"mode": "neighbours"}},
            {"type": "hybrid", "query": "reactor schedule"}, {"type": "auto", "query": "APT29"}]
        for request in requests:
            on_replica = client.search(name, min_lsn=lsn, **request)
            on_primary = client.search(name, consistency="primary", **request)
            if touches(request):
                assert on_replica.trace.server["role"] == "replica", request
            else:  # a documented no-op: nothing is sent to any server
                assert on_replica.trace.server is None, request
            assert same(on_replica) == same(on_primary), request


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "ms" and not k.endswith("_ms")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def test_the_search_after_a_live_fetch_reads_the_primary(reading, replica):
    """Live fetch stores on the primary, then cites from the primary: even with the
    replica's replay paused, the fetched record is the answer."""
    from http.server import ThreadingHTTPServer

    from tests.test_live import CORPUS, MISSING, Remote, source

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Remote)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with reading(read_wait_ms=10_000) as client, \
                psycopg.connect(replica.status().dsn, autocommit=True) as standby:
            name = f"live-{uuid.uuid4().hex[:8]}"
            client.create_pipeline(name, embedder="none", live=source(httpd))
            lsn = client.ingest(name, [{"id": r["cveID"], "text": f"{r['cveID']}: "
                                        f"{r['shortDescription']}"} for r in CORPUS[:10]]).lsn
            assert client.search(name, "vulnerability", min_lsn=lsn).trace.server[
                "role"] == "replica"
            standby.execute("SELECT pg_wal_replay_pause()")
            try:
                response = client.search(name, f"what is {MISSING}?", type="auto")
            finally:
                standby.execute("SELECT pg_wal_replay_resume()")
        live = [e for e in response.trace.retrievers if e.retriever == "live"]
        assert live and live[0].status == "ran", response.trace
        assert response.hits[0].document_id == f"live:{MISSING}"
        assert response.trace.server == {"server": "primary", "role": "primary",
                                         "reason": "consistency: primary"}
    finally:
        httpd.shutdown()
        httpd.server_close()
