"""Quarantine and release: what they cost, next to deleting and re-ingesting.

SciFact's abstracts (one fragment each, no embedder: the figures are the
database's) in one pipeline, ingested in one call (one BM25 segment). Then,
interleaved document by document: quarantine + release of one abstract, and
delete + re-ingest of another (the peer: taking a document out and putting it
back through expiry). Quarantine replaces the segment holding the document's
postings by one without them (so no dead posting of it is left for a query to
read), so its cost grows with that segment; release writes the document's
postings again. Then quarantine's eviction three ways, in rotating order:
copying the segment's rows (INSERT ... SELECT, shipped), moving them (UPDATE),
and a merge of the segment through Python. The bm25 query latency (SciFact
test claims) with nothing and with 12 documents quarantined, alternating.
"""

from __future__ import annotations

import json
import statistics
from contextlib import contextmanager

from pgbraid.ingest import bm25_merge

from .common import DATA, connect, console, percentiles, read_jsonl, table, timed

ROUNDS = 12
VARIANT_ROUNDS = 9
QUERIES = 100

# The shipped eviction, and the two it was chosen over (same statements otherwise).
_UPDATE_MOVE = """
UPDATE pgbraid.bm25_postings SET segment = %(new)s
WHERE pipeline_id = %(pipeline)s AND segment = %(old)s AND term <> ALL(%(terms)s::text[])
"""


@contextmanager
def _variant(name: str):
    """Evict with: "insert" (copy the rows: shipped), "update" (move them), "merge"
    (rewrite the segment in Python, as bm25_merge's merges do)."""
    copy, excise = bm25_merge._COPY_POSTINGS, bm25_merge.excise
    if name == "update":
        bm25_merge._COPY_POSTINGS = _UPDATE_MOVE
    elif name == "merge":
        bm25_merge.excise = lambda conn, pipeline, partition, segment, *_: bm25_merge._merge(
            conn, pipeline, partition, [segment])
    try:
        yield
    finally:
        bm25_merge._COPY_POSTINGS, bm25_merge.excise = copy, excise


def _corpus(size: int) -> list[dict]:
    rows = list(read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"))[:size]
    return [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in rows]


def _queries() -> list[str]:
    with (DATA / "beir_scifact" / "queries.jsonl").open() as handle:
        return [json.loads(line)["text"] for line in handle][:QUERIES]


def _search_ms(client, pipeline: str, queries: list[str]) -> list[float]:
    return [timed(lambda q=q: client.search(pipeline, q, type="bm25", params={"k": 10}))
            for q in queries]


def run(quick: bool = False) -> None:
    size = 1000 if quick else 5183
    name = f"bench-quarantine-{size}"
    docs = _corpus(size)
    with connect() as client:
        if name in {p.name for p in client.pipelines()}:
            client.delete_pipeline(name)
        client.create_pipeline(name, embedder="none", chunk_size=20_000)
        client.ingest(name, docs)
        queries = _queries()
        _search_ms(client, name, queries)  # warm the postings cache
        step = max(1, size // (2 * ROUNDS))
        times: dict[str, list[float]] = {"quarantine": [], "release": [], "delete": [],
                                         "re-ingest": []}
        for i in range(ROUNDS):
            held, gone = docs[(2 * i) * step], docs[(2 * i + 1) * step]
            times["quarantine"].append(timed(lambda: client.quarantine_document(name, held["id"])))
            times["delete"].append(timed(lambda: client.delete_document(name, gone["id"])))
            times["release"].append(timed(lambda: client.release_document(name, held["id"])))
            times["re-ingest"].append(timed(lambda: client.ingest(name, [gone])))
        variants: dict[str, list[float]] = {"insert": [], "update": [], "merge": []}
        for i in range(VARIANT_ROUNDS):  # rotating order: drift weighs on each alike
            names = list(variants)[i % 3:] + list(variants)[:i % 3]
            for j, variant in enumerate(names):
                doc_id = docs[(2 * i) * step + 1 + j]["id"]
                with _variant(variant):
                    variants[variant].append(
                        timed(lambda: client.quarantine_document(name, doc_id)))
                client.release_document(name, doc_id)
        shipped = variants["insert"]
        table("quarantine's eviction, paired (ms)", ["variant", "p50", "p95", "p50 / insert"],
              [[v, *percentiles(t), statistics.median(t) / statistics.median(shipped)]
               for v, t in variants.items()])
        held_ids = [docs[(2 * i) * step]["id"] for i in range(ROUNDS)]
        before: list[float] = []
        after: list[float] = []
        for _ in range(3):  # alternate the states, so drift weighs on both
            before += _search_ms(client, name, queries)
            for doc_id in held_ids:
                client.quarantine_document(name, doc_id)
            after += _search_ms(client, name, queries)
            for doc_id in held_ids:
                client.release_document(name, doc_id)
        rows = []
        for operation, samples in times.items():
            p50, p95 = percentiles(samples)
            rows.append([operation, p50, p95])
        table(f"quarantine vs delete/re-ingest, {size} abstracts ({ROUNDS} rounds, ms)",
              ["operation", "p50", "p95"], rows)
        ratio = statistics.median(a / b for a, b in zip(after, before))
        table("bm25 search, k = 10 (ms)", ["state", "p50", "p95"], [
            ["nothing quarantined", *percentiles(before)],
            [f"{ROUNDS} quarantined", *percentiles(after)]])
        console.print(f"paired per query, after / before: median {ratio:.2f}x")
        client.delete_pipeline(name)
