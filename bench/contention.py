"""Query-embedding latency while an ingestion embeds: `python -m bench contention`.

A thread ingests SciFact abstracts into a fresh minilm pipeline while the main
thread embeds SciFact queries one at a time (every 50 ms), as search requests
of another worker thread would. Reports p50 / p95 / max of the query
embedding, idle and during the ingestion, and the ingestion's own time.
"""

from __future__ import annotations

import threading
import time
from itertools import islice

from .common import DATA, connect, has_pipeline, percentiles, read_jsonl, table, timed

PIPELINE = "bench-contention"


def run(docs: int = 500) -> None:
    client = connect()
    if has_pipeline(client, PIPELINE):
        client.delete_pipeline(PIPELINE)
    client.create_pipeline(PIPELINE, embedder="minilm")
    corpus = DATA / "beir_scifact" / "corpus.jsonl.gz"
    records = [{"id": r["_id"], "title": r.get("title"), "text": r["text"]}
               for r in islice(read_jsonl(corpus), docs)]
    queries = [q["text"] for q in islice(read_jsonl(DATA / "beir_scifact" / "queries.jsonl"), 200)]
    embedder = client.embedder("minilm")
    idle = [timed(lambda q=q: embedder.embed_query(q)) for q in queries[:50]]

    outcome: dict[str, float] = {}

    def ingest() -> None:
        started = time.perf_counter()
        client.ingest(PIPELINE, records)
        outcome["s"] = time.perf_counter() - started

    worker = threading.Thread(target=ingest)
    worker.start()
    busy: list[float] = []
    while worker.is_alive():
        busy.append(timed(lambda q=queries[len(busy) % len(queries)]: embedder.embed_query(q)))
        time.sleep(0.05)
    worker.join()
    client.delete_pipeline(PIPELINE)
    rows = []
    for label, samples in (("idle", idle), (f"during a {docs}-document ingest", busy)):
        p50, p95 = percentiles(samples)
        rows.append([label, len(samples), p50, p95, max(samples)])
    table(f"query embedding (minilm), ms; the ingest took {outcome.get('s', 0):.1f} s",
          ["", "queries", "p50", "p95", "max"], rows)
    client.close()


if __name__ == "__main__":
    run()
