"""Encryption at rest: what it costs, as a ratio to the same pipeline unencrypted.

    python -m bench crypto [--quick]

Two fresh pipelines on the bench server, identical but for ``encrypt=True``
(with ``encrypt_metadata``), lexical (``embedder="none"``: the embedder's
compute would hide the database's and the cipher's cost; with it, the ratio
tends to 1). Ingestion is paired: SciFact is fed in slices, each slice to both
pipelines, the order alternating slice by slice. Search is paired per query:
every query runs on both, the order alternating, for bm25, fulltext, fuzzy,
bm25 with highlights and hybrid (bm25 + fulltext + fuzzy legs). The figures are
the ratio of the summed times (ingestion) and the median of per-query ratios
(search), with each side's p50. Last, one rotation of the encrypted pipeline,
in rows per second. The machine is shared: only the paired ratios mean much.
"""

from __future__ import annotations

import statistics
import time
import uuid

from .common import DATA, connect, console, percentiles, read_jsonl, table
from .lexical import scifact_docs

SLICE = 250


def run(quick: bool = False) -> None:
    docs = [{"id": d["_id"], "title": d["title"], "text": d["text"],
             "metadata": {"owner": f"lab {i % 17}", "year": 2000 + i % 20}}
            for i, d in enumerate(scifact_docs())]
    if quick:
        docs = docs[:1000]
    queries = [q["text"] for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")][:300]
    tag = uuid.uuid4().hex[:6]
    plain, sealed = f"crypto-plain-{tag}", f"crypto-sealed-{tag}"
    with connect() as client:
        client.create_pipeline(plain, embedder="none")
        client.create_pipeline(sealed, embedder="none", encrypt=True, encrypt_metadata=["owner"])
        try:
            _ingestion(client, plain, sealed, docs)
            _search(client, plain, sealed, queries)
            _rotation(client, sealed)
        finally:
            client.delete_pipeline(plain)
            client.delete_pipeline(sealed)


def _ingestion(client, plain: str, sealed: str, docs: list[dict]) -> None:
    spent = {plain: 0.0, sealed: 0.0}
    fragments = {plain: 0, sealed: 0}
    for n, start in enumerate(range(0, len(docs), SLICE)):
        part = docs[start:start + SLICE]
        for name in ((plain, sealed) if n % 2 == 0 else (sealed, plain)):
            began = time.perf_counter()
            report = client.ingest(name, part)
            spent[name] += time.perf_counter() - began
            fragments[name] += report.fragments
    assert fragments[plain] == fragments[sealed]
    table(f"ingestion, {len(docs)} SciFact documents in slices of {SLICE}, paired "
          "(embedder none)", ["pipeline", "seconds", "fragments/s", "ratio"],
          [["unencrypted", spent[plain], fragments[plain] / spent[plain], 1.0],
           ["encrypted", spent[sealed], fragments[sealed] / spent[sealed],
            spent[sealed] / spent[plain]]])


REQUESTS = {
    "bm25": lambda q: {"type": "bm25", "query": q},
    "fulltext": lambda q: {"type": "fulltext", "query": q},
    "fuzzy": lambda q: {"type": "fuzzy", "query": " ".join(q.split()[:2]),
                        "params": {"threshold": 0.4}},
    "bm25 + highlight": lambda q: {"type": "bm25", "query": q, "params": {"highlight": True}},
    "hybrid": lambda q: {"type": "hybrid", "query": q,
                         "params": {"strategies": ["bm25", "fulltext", "fuzzy"]}},
}


def _search(client, plain: str, sealed: str, queries: list[str]) -> None:
    rows = []
    for label, make in REQUESTS.items():
        times: dict[str, list[float]] = {plain: [], sealed: []}
        for n, query in enumerate(queries):
            for name in ((plain, sealed) if n % 2 == 0 else (sealed, plain)):
                began = time.perf_counter()
                client.search(name, **make(query))
                times[name].append((time.perf_counter() - began) * 1000)
        ratios = [s / p for p, s in zip(times[plain], times[sealed]) if p > 0]
        (p50, p95), (s50, s95) = percentiles(times[plain]), percentiles(times[sealed])
        rows.append([label, p50, s50, p95, s95, statistics.median(ratios)])
    table(f"search latency, {len(queries)} SciFact queries, k 10, paired per query (ms)",
          ["request", "plain p50", "encrypted p50", "plain p95", "encrypted p95",
           "median ratio"], rows)


def _rotation(client, sealed: str) -> None:
    began = time.perf_counter()
    result = client.rotate_encryption(sealed)
    seconds = time.perf_counter() - began
    rows = result["fragments"] + result["versions"]
    console.print(f"rotation of {sealed}: {result['fragments']} fragments + {result['versions']} "
                  f"versions in {seconds:.1f} s ({rows / seconds:.0f} rows/s, batches of 500)")
