"""Ingestion through a Citus coordinator, as a ratio to a plain server.

Both servers are started here from the wheel, in the bench dir: a plain embedded
server, and a local Citus cluster (coordinator + 2 workers, ``pgbraid cluster
start``'s code) with pgbraid's schema distributed (db/distribute.py). Citus is
built from ../shared/vendor into PGBRAID_TEST_CITUS_DIR (the tests' cache; read
only here). The same SciFact subset (the first DOCS abstracts, lexical: no
embedder, whose compute would hide the database) is ingested into a fresh pipeline
on each, in turns over ROUNDS rounds, the order swapped every round; each
pipeline is dropped after its round.

Reported: seconds per round and set-up, the median of the rounds, and the
coordinator's time as a ratio to the plain server's in the same round. All three
Citus nodes, the plain server and this process share the machine's 2 cores, so
the ratio is the cost of the coordinator hop and 2PC here, not what workers on
machines of their own would give.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from pathlib import Path

import pgbraid
from pgbraid.db.cluster import LocalCluster

from .common import BENCH_DIR, DATA, console, read_jsonl, table
from .plots import save

DOCS = 1000
ROUNDS = 3
CITUS_DIR = Path(os.environ.get("PGBRAID_TEST_CITUS_DIR") or "/tmp/pgbraid-test-citus")


def _records(n: int) -> list[dict]:
    rows = []
    for r in read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"):
        rows.append({"id": r["_id"], "title": r.get("title"), "text": r["text"]})
        if len(rows) == n:
            break
    return rows


def _ingest(client: pgbraid.Client, records: list[dict]) -> float:
    name = f"citus-bench-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    started = time.perf_counter()
    report = client.ingest(name, records)
    seconds = time.perf_counter() - started
    assert report.added == len(records), report
    client.delete_pipeline(name)
    return seconds


def run(quick: bool = False) -> dict:
    records = _records(300 if quick else DOCS)
    cluster = LocalCluster(CITUS_DIR, folder=BENCH_DIR / "citus")
    coordinator = cluster.start(2)["coordinator"]["dsn"]
    rounds = []
    try:
        with pgbraid.connect(data_dir=BENCH_DIR / "pg") as plain, \
                pgbraid.connect(dsn=coordinator) as citus:
            setups = {"plain": plain, "citus": citus}
            for setup in setups.values():  # migrate (and distribute), warm up
                _ingest(setup, records[:20])
            for i in range(ROUNDS):
                order = ["plain", "citus"] if i % 2 == 0 else ["citus", "plain"]
                seconds = {name: _ingest(setups[name], records) for name in order}
                rounds.append({**seconds, "ratio": seconds["citus"] / seconds["plain"],
                               "load": os.getloadavg()[0]})
                console.print(f"round {i + 1}: {rounds[-1]}")
    finally:
        cluster.stop()
    median = {key: statistics.median(r[key] for r in rounds) for key in ("plain", "citus", "ratio")}
    table(f"ingestion of {len(records)} SciFact abstracts (lexical), seconds",
          ["round", "plain", "citus", "citus / plain", "load (1 min)"],
          [[str(i + 1), r["plain"], r["citus"], r["ratio"], r["load"]]
           for i, r in enumerate(rounds)]
          + [["median", median["plain"], median["citus"], median["ratio"], ""]])
    results = {"documents": len(records), "rounds": rounds, "median": median}
    save("citus", "ingest", results, machine="2 cores shared with other engineers' runs; "
         "coordinator, 2 workers and the plain server on the same machine")
    return results
