"""Search throughput with 16 clients: the primary alone vs primary + 1 streaming replica.

The bench's embedded server holds SciFact (5,183 documents, lexical only); a replica
of it is made with ``pgbraid server replica start``'s code (pg_basebackup -R). 16
threads in this process each run SciFact test queries back to back for a window;
three set-ups take turns, interleaved over rounds (the machine is shared, so speed
drifts):

- ``primary``: no PGBRAID_READ_DSN, every search on the primary;
- ``replica``: PGBRAID_READ_DSN = the replica, every search on it (the primary idle);
- ``split``: the same client, half the threads with ``consistency: primary``: both
  servers answer searches at once.

Reported: searches per second per set-up and round, the median of the rounds, and
each as a ratio to ``primary`` in the same round. Both servers share the same 2
cores (and this Python process), so a replica can add redundancy and isolation
from writes here, not CPU: the ratio says how much the second server costs or gains
on one machine, not what a replica on its own machine would give.
"""

from __future__ import annotations

import statistics
import threading
import time

from pgbraid.db.standby import EmbeddedReplica

from .common import BENCH_DIR, DATA, connect, console, has_pipeline, read_jsonl, table
from .plots import save

PIPELINE = "replicas-scifact"
CLIENTS = 16
TYPES = ("fulltext", "bm25")


def _corpus() -> None:
    with connect() as client:
        if has_pipeline(client, PIPELINE):
            return
        client.create_pipeline(PIPELINE, embedder="none")
        rows = read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz")
        client.ingest(PIPELINE, [{"id": r["_id"], "title": r.get("title"), "text": r["text"]}
                                 for r in rows])


def _queries() -> list[str]:
    return [q["text"] for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")][:300]


def _window(client, queries: list[str], kind: str, seconds: float, split: bool) -> float:
    """Searches per second of CLIENTS threads for ``seconds``."""
    done = [0] * CLIENTS
    stop = time.monotonic() + seconds

    def loop(n: int) -> None:
        extra = {"consistency": "primary"} if split and n % 2 else {}
        i = n
        while time.monotonic() < stop:
            client.search(PIPELINE, queries[i % len(queries)], type=kind, **extra)
            done[n] += 1
            i += CLIENTS

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(CLIENTS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - began)


def run(quick: bool = False) -> dict:
    _corpus()
    rounds, seconds = (2, 5.0) if quick else (3, 10.0)
    queries = _queries()
    with connect() as primary_only:
        replica = EmbeddedReplica(primary_only.server, "bench")
        dsn = replica.start().dsn
    results: dict = {"clients": CLIENTS, "seconds": seconds, "rounds": rounds, "types": {}}
    try:
        with connect(pool_size=CLIENTS + 2) as plain, \
                connect(pool_size=CLIENTS + 2, read_dsn=dsn, read_wait_ms=5000) as routed:
            for kind in TYPES:
                for client in (plain, routed):  # warm caches and pools on both servers
                    _window(client, queries, kind, 2.0, split=False)
                per = {"primary": [], "replica": [], "split": []}
                for _ in range(rounds):
                    per["primary"].append(_window(plain, queries, kind, seconds, False))
                    per["replica"].append(_window(routed, queries, kind, seconds, False))
                    per["split"].append(_window(routed, queries, kind, seconds, True))
                results["types"][kind] = per
                rows = [[name, *[round(v, 1) for v in values], round(statistics.median(values), 1),
                         round(statistics.median(v / p for v, p in zip(values, per["primary"])), 3)]
                        for name, values in per.items()]
                table(f"{kind}: searches/s, {CLIENTS} clients, {seconds:g} s windows "
                      "(shared 2-core machine)",
                      ["set-up", *[f"round {i + 1}" for i in range(rounds)], "median",
                       "ratio to primary"], rows)
    finally:
        replica.remove()
    save("replicas", "throughput", results, machine="2 cores shared with other engineers' runs")
    console.print(f"bench dir: {BENCH_DIR}")
    return results
