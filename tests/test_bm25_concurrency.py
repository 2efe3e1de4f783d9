"""bm25 under concurrency: writers of one pipeline leave what one sequential writer
would, and readers see one version of each document, never none and never two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import pgbraid

from pgbraid.ingest.bm25_index import PARTITION_OF

from .bm25_worker import scifact, version
from .conftest import shared

WORKER = Path(__file__).with_name("bm25_worker.py")
SRC = Path(pgbraid.__file__).resolve().parents[1]
PROCESSES = 3
PER_CALL = 10
DOCUMENTS = 2400  # of SciFact's 5,183: ~80 ingest calls per process


def _workers(data_dir, commands: list[list[str]], go: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [subprocess.Popen([sys.executable, str(WORKER), *map(str, c)], env=env,
                              stderr=subprocess.PIPE, text=True) for c in commands]
    time.sleep(1.5)  # let every process connect, then start them at once
    go.touch()
    return procs


def _wait(procs: list[subprocess.Popen], timeout: float) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]


def _pipeline_id(conn, name: str) -> int:
    return conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]


def index_state(client, name: str) -> tuple[dict, Counter]:
    """The index checked against the forward index; returns the statistics per
    classification set and each term's live postings count (df).

    Live postings (those of segments, less the dead list) must be exactly the
    current fragments' terms, once each; each partition's statistics exactly
    their count and length."""
    with client.session() as conn:
        pid = _pipeline_id(conn, name)
        stats = {(tuple(c), config): (n, length) for c, config, n, length in conn.execute(
            "SELECT p.classifications, s.config, s.fragments, s.total_length"
            " FROM pgbraid.bm25_partitions p JOIN pgbraid.bm25_partition_stats s"
            " ON s.pipeline_id = p.pipeline_id AND s.partition_id = p.id WHERE p.pipeline_id = %s AND s.fragments <> 0", (pid,))}
        expected = {(tuple(c), config): (n, length) for c, config, n, length in conn.execute(
            "SELECT p.classifications, f.ts_config::text, count(*), sum(f.bm25_length)"
            " FROM pgbraid.fragments f JOIN pgbraid.bm25_partitions p"
            " ON p.pipeline_id = f.pipeline_id AND p.classifications = " + PARTITION_OF +
            " WHERE f.pipeline_id = %s AND f.current AND NOT f.quarantined GROUP BY 1, 2", (pid,))}
        dead = {(p, o) for p, o in conn.execute(
            "SELECT partition_id, ordinal FROM pgbraid.bm25_dead WHERE pipeline_id = %s", (pid,))}
        assert not conn.execute("SELECT count(*) FROM pgbraid.bm25_dead WHERE pipeline_id = %s"
                                " AND segment IS NULL", (pid,)).fetchone()[0]
        live: list[tuple] = []
        with conn.cursor(binary=True) as cur:
            cur.execute("SELECT partition_id, term, ordinals, tfs, lengths FROM pgbraid.bm25_postings"
                        " WHERE pipeline_id = %s", (pid,))
            for partition, term, ordinals, tfs, lengths in cur:
                for o, t, n in zip(np.frombuffer(ordinals, "<i4").tolist(),
                                   np.frombuffer(tfs, "<u2").tolist(),
                                   np.frombuffer(lengths, "<u2").tolist()):
                    if (partition, o) not in dead:
                        live.append((partition, term, o, t, n))
        forward = [(p, term, o, tf, min(length, 65535))
                   for p, o, length, terms, tfs in conn.execute(
                       "SELECT p.id, f.bm25_ordinal, f.bm25_length, f.bm25_terms, f.bm25_tfs"
                       " FROM pgbraid.fragments f JOIN pgbraid.bm25_partitions p"
                       " ON p.pipeline_id = f.pipeline_id AND p.classifications = " + PARTITION_OF +
                       " WHERE f.pipeline_id = %s AND f.current AND NOT f.quarantined", (pid,))
                   for term, tf in zip(terms, tfs)]
    twice = [posting for posting, n in Counter(live).items() if n > 1]
    assert not twice, f"{len(twice)} postings are live more than once, e.g. {twice[:3]}"
    assert sorted(live) == sorted(forward), "live postings differ from the forward index"
    assert stats == expected
    return stats, Counter(term for _, term, *_ in live)


def _top10(client, pipeline: str, text: str) -> tuple[list[float], dict[str, float], dict]:
    response = client.search(pipeline, text, type="bm25", params={"k": 10})
    scores = [h.score for h in response.hits]
    cut = scores[-1] if len(scores) == 10 else -1.0
    above = {h.document_id: h.score for h in response.hits if h.score > cut + 1e-6}
    return scores, above, response.trace.retrievers[0].details


@pytest.fixture(scope="module")
def scifact_sequential(data_dir, server):
    """SciFact's first DOCUMENTS (title + abstract, one fragment each), ingested by one
    process."""
    name = f"seq-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as client:
        client.create_pipeline(name, embedder="none", chunk_size=20_000)
        docs = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[:DOCUMENTS]
        assert client.ingest(name, docs).added == DOCUMENTS
    return name


def test_concurrent_ingesters_leave_what_one_sequential_ingest_would(
        client, data_dir, tmp_path, scifact_sequential):
    """Three processes ingest disjoint thirds of SciFact's first DOCUMENTS, ten documents
    a call (hundreds of merges, racing); for every one of the 300 test queries bm25
    answers exactly as over one process's ingest of them all."""
    name = f"conc-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", chunk_size=20_000)
    go = tmp_path / "go"
    corpus = shared("beir_scifact", "corpus.jsonl.gz")
    started = time.perf_counter()
    _wait(_workers(data_dir, [["slice", data_dir, name, corpus, DOCUMENTS, i, PROCESSES, PER_CALL, go]
                              for i in range(PROCESSES)], go), timeout=900)
    elapsed = time.perf_counter() - started
    stats, df = index_state(client, name)
    reference_stats, reference_df = index_state(client, scifact_sequential)
    assert stats == reference_stats and df == reference_df
    queries = [json.loads(line) for line in shared("beir_scifact", "queries.jsonl").open()]
    tested = {q.split("\t")[0] for q in shared("beir_scifact", "qrels", "test.tsv").open()}
    queries = [q["text"] for q in queries if q["_id"] in tested]
    assert len(queries) == 300
    for text in queries:
        scores, above, details = _top10(client, name, text)
        want_scores, want_above, want = _top10(client, scifact_sequential, text)
        np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6, err_msg=text)
        assert above.keys() == want_above.keys(), text
        assert (details["documents"], details["avgdl"], details["terms"]) == \
               (want["documents"], want["avgdl"], want["terms"]), text
    print(f"concurrent ingest: {elapsed:.1f} s")


def _reader(client, pipeline: str, strategy: str, documents: int, stop: threading.Event,
            problems: list, counts: Counter) -> None:
    while not stop.is_set():
        try:
            params = {"k": 2 * documents}
            if strategy == "hybrid":  # two legs fused: one snapshot for both
                params.update(strategies=["bm25", "fulltext"], depth=2 * documents)
            hits = client.search(pipeline, "alpha", type=strategy, params=params).hits
        except Exception as exc:  # reported by the test, not lost in the thread
            problems.append(f"{strategy}: {exc!r}")
            return
        seen = Counter(h.document_id for h in hits)
        twice = sorted(d for d, n in seen.items() if n > 1)
        missing = documents - len(seen)
        if twice or missing:
            problems.append(f"{strategy}: {missing} missing, at two versions: {twice[:5]}")
        counts[strategy] += 1


def test_readers_see_each_document_once_while_a_writer_reingests(client, data_dir, tmp_path):
    """A writer process re-ingests every document (new text each round, 'alpha' in
    every version) while bm25, fulltext and hybrid readers search: each search sees
    every document, at one version."""
    name = f"rw-{uuid.uuid4().hex[:8]}"
    documents = 120
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [version(i, 0) for i in range(documents)])
    go = tmp_path / "go"
    writer = _workers(data_dir, [["rewrite", data_dir, name, documents, 12, 15, go]], go)
    stop, problems, counts = threading.Event(), [], Counter()
    readers = [threading.Thread(target=_reader, args=(c, name, s, documents, stop, problems, counts))
               for c, s in ((client, "bm25"), (client, "fulltext"),
                            (pgbraid.connect(data_dir=data_dir, postings_cache_mb=0), "bm25"),
                            (pgbraid.connect(data_dir=data_dir), "hybrid"))]
    for thread in readers:
        thread.start()
    try:
        _wait(writer, timeout=600)
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert not problems, problems[:10]
    assert counts["bm25"] > 50 and counts["fulltext"] > 20 and counts["hybrid"] > 10, counts
    hits = client.search(name, "revision12", type="bm25", params={"k": 2 * documents}).hits
    assert len(hits) == documents and {h.version for h in hits} == {13}
