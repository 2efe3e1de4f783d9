"""Vector strategies: the offline embedder, HNSW per distance, filtered k, MMR, bad input."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

import pgbraid
from pgbraid import BackendUnavailable, InvalidRequest, NotEnabled
from pgbraid.embedders import minilm
from pgbraid.embedders.server import make_server
from pgbraid.strategies.vector import DISTANCES

REFERENCE = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
DIM = 384


@pytest.fixture(scope="module")
def model():
    return pgbraid.embedders.get("minilm")


def test_embedder_loads_offline_and_matches_the_float_reference(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("the embedder tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    model = minilm.MiniLM()  # a fresh load, not the cached one
    texts = [item["text"] for item in REFERENCE["vectors"]]
    vectors = model.embed_documents(texts)
    for item, vector in zip(REFERENCE["vectors"], vectors):
        assert float(vector @ np.asarray(item["vector"])) >= 0.999, item["text"]
        assert abs(np.linalg.norm(vector) - 1.0) < 1e-5


def test_batches_of_long_texts_stay_within_the_attention_budget():
    lengths = [256] * 20 + [128] * 40 + [12] * 70 + [1, 64]
    found = minilm.batches(lengths, 32)
    assert sorted(i for batch in found for i in batch) == list(range(len(lengths)))
    for batch in found:
        width = max(lengths[i] for i in batch)
        assert len(batch) <= 32 and len(batch) * width * width <= minilm.ATTENTION_BUDGET \
            or len(batch) == 1
        assert all(lengths[i] <= width for i in batch)
    sizes: dict[int, int] = {}
    for batch in found:
        width = max(lengths[i] for i in batch)
        sizes[width] = max(sizes.get(width, 0), len(batch))
    assert sizes[12] == 32 and sizes[128] == 32 and sizes[256] == 8


class _Shapes:
    """A session that records each batch's (texts, width) and runs the real one."""

    def __init__(self, session):
        self.session, self.seen = session, []

    def run(self, names, feeds):
        self.seen.append(feeds["input_ids"].shape)
        return self.session.run(names, feeds)


def test_long_texts_go_fewer_to_a_batch_with_the_same_vectors(model):
    """32 texts of 256 word pieces in one batch peaked at 1.5 GB resident (KEV's longest
    fragments); the budget sends at most 8 of them at once, short texts still 32."""
    long = [f"Vulnerability {i}: " + "a remote attacker can execute arbitrary code " * 40
            for i in range(12)]
    short = [f"note {i} on pumps" for i in range(40)]
    spy = _Shapes(model._documents())  # made on first use
    model._session, real = spy, model._session
    try:
        vectors = model.embed_documents(long + short)
    finally:
        model._session = real
    assert max(w for _, w in spy.seen) == minilm.MAX_TOKENS
    assert all(n * w * w <= minilm.ATTENTION_BUDGET for n, w in spy.seen)
    assert max(n for n, _ in spy.seen) == 32
    alone = np.stack([model.embed_documents([t])[0] for t in long[:3] + short[:3]])
    together = np.concatenate([vectors[:3], vectors[12:15]])
    assert np.all(np.sum(alone * together, axis=1) > 0.9999)


def test_paraphrases_are_closer_than_unrelated_sentences(model):
    query = model.embed_query("How do I rotate the database credentials?")
    paraphrase, unrelated = model.embed_documents(
        ["Steps to change the password of the database user.", "The cat sat on the mat."])
    assert query @ paraphrase > 0.5 > query @ unrelated


def test_a_query_does_not_wait_behind_an_ingestion_batch(model):
    text = "How do I rotate the database credentials?"
    embedded: list[np.ndarray] = []
    with model._lock:  # what an ingestion batch holds while it runs
        worker = threading.Thread(target=lambda: embedded.append(model.embed_query(text)))
        worker.start()
        worker.join(30)
        assert embedded, "embed_query waited for the document session's lock"
    (document,) = model.embed_documents([text])
    assert float(embedded[0] @ document) > 0.9999  # the same model, another session


def test_concurrent_first_loads_make_one_embedder():
    pgbraid.embedders.get.cache_clear()
    loaded: list = []
    start = threading.Barrier(4)

    def load() -> None:
        start.wait()
        loaded.append(pgbraid.embedders.get("minilm"))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(loaded) == 4 and len({id(m) for m in loaded}) == 1


def test_a_model_file_with_the_wrong_hash_is_refused(monkeypatch):
    monkeypatch.setattr(minilm, "SHA256", "0" * 64)
    with pytest.raises(BackendUnavailable, match="sha256"):
        minilm.MiniLM()


@pytest.fixture()
def vec(client):
    name = f"v-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name)
    return name


PAGES = [
    {"id": "rotate", "text": "Rotate database credentials: create a new login role and revoke the old one."},
    {"id": "backup", "text": "Nightly base backups and write-ahead log archiving allow point-in-time recovery."},
    {"id": "trigram", "text": "Trigram similarity finds misspelled company names."},
    {"id": "cooking", "text": "Simmer the tomato sauce for twenty minutes and season with basil."},
]


def test_similarity_finds_paraphrases_with_cosine_scores(client, vec):
    report = client.ingest(vec, PAGES)
    assert report.added == 4 and report.embedded == 4
    response = client.search(vec, "how to change a database password", type="similarity")
    assert response.hits[0].document_id == "rotate"
    assert len(response.hits) == 4  # k defaults to 5; only 4 exist
    scores = [h.score for h in response.hits]
    assert scores == sorted(scores) and all(0 <= s <= 2 for s in scores)
    details = response.trace.retrievers[0].details
    assert details["distance_strategy"] == "cosine" and details["embed_ms"] > 0
    assert client.search(vec, "anything", type="similarity", params={"k": 0}).hits == ()


@pytest.mark.parametrize("strategy", list(DISTANCES))
def test_each_distance_strategy_scores_like_numpy_and_uses_its_index(client, vec, model, strategy):
    client.ingest(vec, PAGES)
    query = "restore the database to a point in time"
    response = client.search(vec, query, type="similarity", distance_strategy=strategy,
                             params={"k": 4})
    q = model.embed_query(query)
    docs = {p["id"]: model.embed_documents([p["text"]])[0] for p in PAGES}
    expected = {
        "cosine": lambda d: 1 - float(q @ d) / (np.linalg.norm(q) * np.linalg.norm(d)),
        "euclidean-distance": lambda d: float(np.linalg.norm(q - d)),
        "dot-product": lambda d: -float(q @ d),
    }[strategy]
    for hit in response.hits:
        assert hit.score == pytest.approx(expected(docs[hit.document_id]), abs=1e-4)
    assert response.hits[0].document_id == "backup"
    with client.session() as conn:
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (vec,)).fetchone()[0]
        conn.execute("SET LOCAL enable_seqscan = off")
        op = DISTANCES[strategy].operator
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT fragment_id FROM pgbraid.embeddings e WHERE e.pipeline_id = {pid}"
            f" AND e.current ORDER BY e.embedding::vector(384) {op} %s::vector(384) LIMIT 3",
            (q,)))
    assert f"embeddings_p{pid}_" in plan


def test_filtered_search_still_returns_k(client, vec):
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, DIM)).astype(np.float32)
    docs = [{"id": f"d{i}", "text": f"document {i}", "embedding": vectors[i].tolist(),
             "metadata": {"keep": i % 20 == 0}} for i in range(300)]
    report = client.ingest(vec, docs)
    assert report.added == 300 and report.embedded == 0  # supplied vectors are not re-embedded
    query = vectors[1] + 0.01
    response = client.search(vec, "x", type="similarity", filters={"keep": True},
                             params={"k": 10, "vector": query.tolist()})
    assert len(response.hits) == 10  # 15 kept of 300: HNSW alone would return ~2
    assert all(h.metadata["keep"] for h in response.hits)
    exact = sorted((float(np.linalg.norm(query - vectors[i]) ** 2), i) for i in range(0, 300, 20))
    assert response.hits[0].document_id == f"d{exact[0][1]}" or response.hits[0].score < 1.0


def test_mmr_returns_diverse_results_where_similarity_returns_duplicates(client, vec):
    base = "Point-in-time recovery replays the archived write-ahead log on top of a base backup"
    docs = [{"id": f"dup{i}", "text": f"{base}{'.' * (i + 1)} Version {i}."} for i in range(5)]
    docs += [{"id": "retention", "text": "Keep two full backups and all the archived log between them."},
             {"id": "rehearse", "text": "Rehearse a database restore every month on a spare machine."},
             {"id": "signal", "text": "Create recovery.signal and set recovery_target_time to stop early."}]
    client.ingest(vec, docs)
    query = "how does point-in-time recovery work with backups"
    similar = client.search(vec, query, type="similarity", params={"k": 4})
    assert all(h.document_id.startswith("dup") for h in similar.hits)
    for strategy in DISTANCES:
        diverse = client.search(vec, query, type="mmr", distance_strategy=strategy,
                                params={"k": 4, "fetch_k": 8, "lambda_mult": 0.3})
        ids = [h.document_id for h in diverse.hits]
        assert sum(i.startswith("dup") for i in ids) <= 2, (strategy, ids)
        assert all(h.mmr_score is not None for h in diverse.hits)
    plain = client.search(vec, query, type="mmr", params={"k": 4, "fetch_k": 8, "lambda_mult": 1.0})
    assert [h.document_id for h in plain.hits] == [h.document_id for h in similar.hits]


def test_unchanged_fragments_are_not_embedded_again(client, vec):
    text = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 12 for i in range(4))
    first = client.ingest(vec, [{"id": "long", "text": text}])
    assert first.embedded == first.fragments > 1
    changed = text.replace("Paragraph 3:", "Paragraph three:")
    second = client.ingest(vec, [{"id": "long", "text": changed}])
    assert second.updated == 1 and second.embedded == 1
    assert client.ingest(vec, [{"id": "long", "text": changed}]).embedded == 0


@pytest.mark.parametrize("request_, error", [
    ({"type": "similarity", "params": {"vector": [0.1] * 10}}, InvalidRequest),
    ({"type": "similarity", "params": {"vector": [float("nan")] * DIM}}, InvalidRequest),
    ({"type": "similarity", "distance_strategy": "max-inner-product"}, InvalidRequest),
    ({"type": "mmr", "params": {"lambda_mult": 1.5}}, InvalidRequest),
    ({"type": "mmr", "params": {"k": 5, "fetch_k": 3}}, InvalidRequest),
    ({"type": "similarity", "params": {"embedder": "e5-multilingual"}}, InvalidRequest),
    ({"type": "similarity", "query": ""}, InvalidRequest),
])
def test_bad_vector_requests(client, vec, request_, error):
    client.ingest(vec, PAGES[:1])
    with pytest.raises(error):
        client.search(vec, **{"query": "backup", **request_})


def test_a_pipeline_without_embedder_answers_not_enabled(client, pipeline):
    with pytest.raises(NotEnabled, match="no embedder"):
        client.search(pipeline, "backup", type="similarity")
    report = client.ingest(pipeline, [{"id": "x", "text": "t", "embedding": [0.1] * DIM}])
    assert "no embedder" in report.failed[0].message


@pytest.fixture()
def endpoint(model):
    server = make_server(model, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_against_a_real_local_server(data_dir, server, endpoint, model):
    with pgbraid.connect(data_dir=data_dir, openai_url=endpoint, openai_model="minilm") as client:
        remote = client.embedder("openai")
        assert remote.dimension == DIM
        texts = ["a test sentence", "another one"]
        np.testing.assert_allclose(remote.embed_documents(texts), model.embed_documents(texts),
                                   atol=1e-5)
        name = f"o-{uuid.uuid4().hex[:8]}"
        client.create_pipeline(name, embedder="openai")
        client.ingest(name, PAGES)
        assert client.search(name, "change a database password", type="similarity").hits[0].document_id == "rotate"


def test_an_embedder_that_is_down_fails_the_batch_and_stores_nothing(data_dir, server, endpoint):
    with pgbraid.connect(data_dir=data_dir, openai_url=endpoint, openai_model="m") as client:
        name = f"o-{uuid.uuid4().hex[:8]}"
        client.create_pipeline(name, embedder="openai")
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{port.getsockname()[1]}/v1"
    port.close()
    pgbraid.embedders.get.cache_clear()
    with pgbraid.connect(data_dir=data_dir, openai_url=dead, openai_model="m",
                         openai_timeout=1) as client:
        with pytest.raises(BackendUnavailable):
            client.embedder("openai")
        with pytest.raises(BackendUnavailable):
            client.ingest(name, PAGES)
        assert client.pipeline(name).documents == 0
    pgbraid.embedders.get.cache_clear()


def test_a_failing_embedder_s_text_stays_in_the_log(client, monkeypatch, caplog):
    """An embedder's exception text (a library's message may name files, hosts or keys)
    reaches the log, not the caller: the error names the embedder and the exception's kind."""
    name = f"fail-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name)
    client.ingest(name, [{"id": "a", "text": "pumps and valves"}])
    model = client.embedder("minilm")

    def broken(query):
        raise RuntimeError("cannot open /secret/path/model.onnx with key sk-123")

    monkeypatch.setattr(model, "embed_query", broken)
    with pytest.raises(BackendUnavailable) as raised:
        client.search(name, "valves", type="similarity")
    assert "/secret" not in raised.value.message and "sk-123" not in raised.value.message
    assert "RuntimeError" in raised.value.message
    assert "sk-123" in caplog.text
