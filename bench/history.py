"""Point in time: searches as of a time against current ones, on a versioned pipeline.

3,000 SciFact abstracts (one fragment each) ingested, then three rounds that
each re-ingest a different half of them with a revision line (a new version)
and delete 1 %: 7,500 versions, 2,965 current. The time after the first
ingest and after the last round are noted. For each versioned strategy, the
test claims are searched (k = 10; fuzzy: their first three words) as they
are now (indexes: GIN, trigram GIN, HNSW, BM25 postings) and as of each noted
time (exact scans of the fragments valid then); then pages: what issuing a
cursor costs, and page 2 through it, before and after a write. Vectors: the
model's, computed once per abstract and cached (a revision keeps its
abstract's vector), and the queries' passed as params.vector, so the figures
are the database's, not the model's.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import numpy as np

import pgbraid
from pgbraid.ingest.prepare import embedding_text

from .common import (BENCH_DIR, DATA, connect, console, has_pipeline, percentiles, read_jsonl,
                     table, timed)

PIPELINE = "bench-history-3k"
DOCS = 3000
ROUNDS = 3
QUERIES = 60
STRATEGIES = ["bm25", "fulltext", "fuzzy", "similarity", "mmr"]


def abstracts() -> list[dict]:
    rows = list(read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"))[:DOCS]
    return [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in rows]


def vectors(records: list[dict]) -> np.ndarray:
    path = BENCH_DIR / f"history-{DOCS}-minilm.npy"
    if path.exists():
        return np.load(path)
    console.print(f"embedding {len(records)} abstracts once (cached in {path})")
    model = pgbraid.embedders.get("minilm")
    found = model.embed_documents([embedding_text(r["title"], r["text"]) for r in records])
    np.save(path, np.asarray(found, dtype=np.float32))
    return np.load(path)


def build(client) -> tuple[datetime, datetime]:
    """The versioned pipeline, and the times after its first ingest and its last round."""
    records, embedded = abstracts(), vectors(abstracts())
    if has_pipeline(client, PIPELINE):
        client.delete_pipeline(PIPELINE)
    client.create_pipeline(PIPELINE, chunk_size=20_000)
    started = time.perf_counter()
    client.ingest(PIPELINE, [{**r, "embedding": v.tolist()} for r, v in zip(records, embedded)])
    first = _now()
    for round_ in range(1, ROUNDS + 1):
        picked = [(r, v) for i, (r, v) in enumerate(zip(records, embedded))
                  if (i + round_) % 2 == 0]
        client.ingest(PIPELINE, [{**r, "text": f"{r['text']} Revision {round_}.",
                                  "embedding": v.tolist()} for r, v in picked])
        for r in records[round_ * 10:round_ * 10 + DOCS // 100]:
            try:
                client.delete_document(PIPELINE, r["id"])
            except pgbraid.NotFound:
                pass
    last = _now()
    console.print(f"built {PIPELINE} in {time.perf_counter() - started:.0f} s")
    return first, last


def _times(client) -> tuple[datetime, datetime]:
    """The noted times of an existing build: after its first ingest, after its last write."""
    with client.session() as conn:
        return conn.execute(
            "SELECT max(v.valid_from) FILTER (WHERE v.version = 1),"
            " max(greatest(v.valid_from, v.valid_to))"
            " FROM pgbraid.versions v JOIN pgbraid.documents d ON d.id = v.document_id"
            " JOIN pgbraid.pipelines p ON p.id = d.pipeline_id WHERE p.name = %s",
            (PIPELINE,)).fetchone()


def _now() -> datetime:
    time.sleep(0.05)
    return datetime.now(timezone.utc)


def claims() -> list[str]:
    return [q["text"] for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")][:QUERIES]


def request(strategy: str, text: str, vector: list[float], **extra) -> dict:
    params = {"k": 10, **({"vector": vector} if strategy in ("similarity", "mmr") else {}),
              **extra.pop("params", {})}
    if strategy == "fuzzy":  # a short string, as fuzzy is for (names, codes): 3 words
        text = " ".join(text.split()[:3])
    return {"query": text, "type": strategy, "params": params, **extra}


def measure(client, strategy: str, texts: list[str], vecs: list, **extra) -> tuple[float, float]:
    for text, vector in list(zip(texts, vecs))[:3]:  # warm
        client.search(PIPELINE, **request(strategy, text, vector, **dict(extra)))
    samples = [timed(lambda: client.search(PIPELINE, **request(strategy, t, v, **dict(extra))))
               for t, v in zip(texts, vecs)]
    return percentiles(samples)


def run(quick: bool = False, *, rebuild: bool = True, pages_only: bool = False) -> None:
    with connect() as client:
        first, last = build(client) if rebuild or not has_pipeline(client, PIPELINE) else (
            _times(client))
        texts = claims()
        vecs = [v.tolist() for v in pgbraid.embedders.get("minilm").embed_documents(texts)]
        if pages_only:
            return paging(client, texts, vecs)
        info = client.pipeline(PIPELINE)
        rows = []
        for strategy in STRATEGIES:
            now = measure(client, strategy, texts, vecs)
            then = measure(client, strategy, texts, vecs, as_of=first)
            late = measure(client, strategy, texts, vecs, as_of=last)
            rows.append([strategy, *now, *then, *late, then[0] / now[0]])
        table(f"{PIPELINE}: {info.versions} versions, {info.fragments} fragments, "
              f"{info.documents} documents; {QUERIES} SciFact claims, k = 10, ms",
              ["strategy", "now p50", "now p95", "as of first p50", "p95", "as of last p50", "p95",
               "as of / now"], rows)
        paging(client, texts, vecs)


def paging(client, texts: list[str], vecs: list) -> None:
    """A search, its first page, the second through the cursor while nothing in scope was
    written since (current indexes), and again after one write (as of the cursor's time)."""
    rows, cursors = [], {}
    for strategy in ("bm25", "similarity", "hybrid"):  # fulltext's AND leaves claims no full page
        plain = measure(client, strategy, texts, vecs)
        first = measure(client, strategy, texts, vecs, params={"offset": 0})
        cursors[strategy] = [(t, v, client.search(PIPELINE, **request(
            strategy, t, v, params={"offset": 0})).next_cursor) for t, v in zip(texts, vecs)]
        rows.append([strategy, *plain, *first, *_second(client, strategy, cursors[strategy])])
    client.ingest(PIPELINE, [{"id": "bench-history-extra",
                              "text": f"one more abstract {time.time()}"}])
    for row in rows:
        row.extend(_second(client, row[0], cursors[row[0]]))
    table("pages, ms: a search; its first page (offset 0, the cursor's time is read); the "
          "second page through the cursor, nothing written since (current indexes), and after "
          "one write (as of the cursor's time)",
          ["strategy", "search p50", "p95", "page 1 p50", "p95", "page 2 p50", "p95",
           "after a write p50", "p95"], rows)


def _second(client, strategy: str, cursors: list) -> tuple[float, float]:
    return percentiles([timed(lambda: client.search(PIPELINE, **request(strategy, t, v),
                                                    cursor=c)) for t, v, c in cursors if c])


if __name__ == "__main__":  # python -m bench.history [--reuse [--pages]]: an existing build
    import sys

    run(rebuild="--reuse" not in sys.argv, pages_only="--pages" in sys.argv)
