"""bm25 with ``params.engine: "pg_textsearch"``: gated like pg_search, same scope, same shape.

The extension is built from ../shared/vendor into the session's data dir
(tests skip where it cannot be built); the server restarts to preload it.
"""

from __future__ import annotations

import json
import uuid

import pytest

import pgbraid
from pgbraid import InvalidRequest, NotEnabled

from .conftest import shared


def test_the_gate_sends_nothing_when_the_variable_is_unset(monkeypatch):
    monkeypatch.delenv("PGBRAID_TEXTSEARCH", raising=False)
    with pgbraid.connect(dsn="host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x") as client:
        with pytest.raises(NotEnabled, match="PGBRAID_TEXTSEARCH"):
            client.search("any", "metal fabrication", type="bm25",
                          params={"engine": "pg_textsearch"})
        with pytest.raises(NotEnabled, match="PGBRAID_TEXTSEARCH"):
            client.search("any", "metal fabrication", type="search",
                          params={"engine": "pg_textsearch"})
        assert client._db._pool is None  # no connection was ever opened


def test_as_of_is_refused_before_anything_is_sent(monkeypatch):
    monkeypatch.setenv("PGBRAID_TEXTSEARCH", "1")
    with pgbraid.connect(dsn="host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x") as client:
        with pytest.raises(InvalidRequest, match="as_of"):
            client.search("any", "metal", type="bm25", as_of="2026-01-01T00:00:00Z",
                          params={"engine": "pg_textsearch"})
        assert client._db._pool is None


@pytest.fixture(scope="module")
def textsearch(build_extension, data_dir):
    build_extension("pg_textsearch")
    mp = pytest.MonkeyPatch()
    mp.setenv("PGBRAID_TEXTSEARCH", "1")
    with pgbraid.connect(data_dir=data_dir) as client:
        client.pipelines()
        client.engine.context_with_extensions()
        if "pg_textsearch" not in client._db.extensions:
            pytest.skip("pg_textsearch was built but the server cannot load it")
        name = f"pts-{uuid.uuid4().hex[:8]}"
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [shared("cranfield", "corpus.jsonl.gz")],
                      fields=pgbraid.FieldMap(id="_id"))
        yield client, name
    mp.undo()


def _queries(count: int = 40) -> list[str]:
    lines = shared("cranfield", "queries.jsonl").open().read().splitlines()
    return [json.loads(line)["text"] for line in lines[:count]]


def test_same_shape_and_close_ranking_to_pgbraid(textsearch):
    client, name = textsearch
    agree = overlap = 0
    queries = _queries()
    for query in queries:
        theirs = client.search(name, query, type="bm25", params={"k": 10, "engine": "pg_textsearch"})
        ours = client.search(name, query, type="bm25", params={"k": 10, "engine": "pgbraid"})
        details = theirs.trace.retrievers[0].details
        assert details["engine"] == "pg_textsearch" and details["index"].startswith("fragments_")
        assert len(theirs.hits) == 10
        assert [h.rank for h in theirs.hits] == list(range(1, 11))
        assert all(a.score >= b.score > 0 for a, b in zip(theirs.hits, theirs.hits[1:]))
        assert set(type(theirs.hits[0]).model_fields) == set(type(ours.hits[0]).model_fields)
        mine = [h.document_id for h in ours.hits]
        found = [h.document_id for h in theirs.hits]
        agree += found[0] == mine[0]
        overlap += len(set(found) & set(mine))
    # Same BM25 (k1 0.9, b 0.4) and stemmer; pgbraid adds code-aware tokens and per-fragment
    # languages, so the lists are close, not identical.
    assert agree >= 0.7 * len(queries)
    assert overlap >= 0.7 * 10 * len(queries)


def test_scope_current_versions_and_classification_sets(textsearch):
    client, _ = textsearch
    name = f"pts-{uuid.uuid4().hex[:8]}"
    # A classification of its own: other tests define secret -> internal -> public in this
    # tenant, and a reader holding two classification sets is refused by this engine.
    secret = f"ts-secret-{uuid.uuid4().hex[:6]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "a", "text": "supersonic wing flutter at high mach numbers"},
                         {"id": "b", "text": "boundary layer transition on a flat plate"}])
    search = {"type": "bm25", "params": {"engine": "pg_textsearch", "k": 5},
              "classification": ["public"]}
    first = client.search(name, "wing flutter", **search)
    assert [h.document_id for h in first.hits] == ["a"]
    client.ingest(name, [{"id": "a", "text": "laminar flow over a swept cylinder"}])
    assert client.search(name, "wing flutter", **search).hits == ()  # the old version is gone
    assert [h.document_id for h in client.search(name, "swept cylinder", **search).hits] == ["a"]
    before = client.search(name, "boundary layer", **search)
    client.ingest(name, [{"id": "s", "text": "boundary layer boundary layer suction",
                          "classification": [secret]}])
    after = client.search(name, "boundary layer", **search)  # public only: the secret's
    assert [(h.document_id, h.score) for h in after.hits] == \
        [(h.document_id, h.score) for h in before.hits]  # index is another one
    held = client.search(name, "boundary layer", **{**search, "classification": [secret]})
    assert [h.document_id for h in held.hits] == ["s"]
    with pytest.raises(InvalidRequest, match="engine pgbraid"):
        client.search(name, "boundary layer", **{**search, "classification": ["public", secret]})
    with pytest.raises(InvalidRequest, match="k1"):
        client.search(name, "wing", type="bm25", params={"engine": "pg_textsearch", "k1": 1.2})


def test_filters_are_applied_and_widened_until_k(textsearch):
    client, _ = textsearch
    name = f"pts-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": str(i), "text": f"shock wave interaction number {i}",
                          "metadata": {"keep": i % 20 == 0}} for i in range(200)])
    response = client.search(name, "shock wave", type="bm25", filters={"keep": True},
                             params={"engine": "pg_textsearch", "k": 10})
    assert sorted(int(h.document_id) for h in response.hits) == list(range(0, 200, 20))
    assert response.trace.retrievers[0].details["verify_rounds"] > 1


def test_opted_out_with_the_extension_installed_is_refused(textsearch, data_dir, monkeypatch):
    client, name = textsearch
    monkeypatch.delenv("PGBRAID_TEXTSEARCH", raising=False)
    with pgbraid.connect(data_dir=data_dir) as other:
        with pytest.raises(NotEnabled, match="PGBRAID_TEXTSEARCH"):
            other.search(name, "wing", type="bm25", params={"engine": "pg_textsearch"})
        default = other.search(name, "wing", type="bm25")
        assert default.trace.retrievers[0].details["engine"] == "pgbraid"


def test_an_encrypted_pipeline_is_refused(textsearch):
    """pg_textsearch would index the sealed text: refused like pg_search."""
    client, _ = textsearch
    name = f"pts-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", encrypt=True)
    client.ingest(name, [{"id": "a", "text": "supersonic wing flutter"}])
    with pytest.raises(NotEnabled, match="seals"):
        client.search(name, "wing flutter", type="bm25", params={"engine": "pg_textsearch"})
    assert client.search(name, "wing flutter", type="bm25").hits[0].document_id == "a"


def test_a_quarantined_document_leaves_at_once_and_comes_back(textsearch):
    client, _ = textsearch
    name = f"pts-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "a", "text": "shock wave over a wedge"},
                         {"id": "b", "text": "shock tube experiments"}])
    search = {"type": "bm25", "params": {"engine": "pg_textsearch", "k": 5},
              "classification": ["public"]}
    assert {h.document_id for h in client.search(name, "shock", **search).hits} == {"a", "b"}
    client.quarantine_document(name, "a", reason="suspect source")
    assert [h.document_id for h in client.search(name, "shock", **search).hits] == ["b"]
    client.release_document(name, "a")
    assert {h.document_id for h in client.search(name, "shock", **search).hits} == {"a", "b"}
