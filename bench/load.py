"""HTTP under load: 16 clients for 60 s against ``pgbraid serve --workers 2``, every
search type mixed with a writer re-ingesting new versions, on loopback only.

Each request loop is bounded in count and time and stops by itself. Reported: per
type p50 / p95 / p99 and requests per second, errors (must be zero), and the
consistency check: no response shows a document at two versions, and the tracked
documents (present in every version) are never missing from the queries that
always find them. For contrast, the same searches through the cold CLI path
(`pgbraid search ... --json`, a new process each time).
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

from .common import BENCH_DIR, DATA, connect, has_pipeline, read_jsonl, table

PIPELINE = "load-scifact"
DOCUMENTS = 1000
CLIENTS = 16
SECONDS = 60
MAX_REQUESTS = 200_000
TRACKED = [f"tracked-{i}" for i in range(8)]  # re-ingested all the time, always matching
TYPES = ["bm25", "fulltext", "fuzzy", "similarity", "mmr", "hybrid", "auto"]


def _corpus() -> None:
    with connect() as client:
        if has_pipeline(client, PIPELINE):
            return
        client.create_pipeline(PIPELINE)  # the default embedder: every type can run
        rows = list(read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"))[:DOCUMENTS]
        client.ingest(PIPELINE, [{"id": r["_id"], "title": r.get("title"), "text": r["text"]}
                                 for r in rows] + _tracked(0))


def _tracked(version: int) -> list[dict]:
    return [{"id": d, "title": f"zebrafish lattice {d}",
             "text": f"zebrafish lattice protein assay revision {version} of {d}."} for d in TRACKED]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PGBRAID = str(Path(sys.executable).parent / "pgbraid")  # the CLI of this environment


def _pgbraid(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([PGBRAID, *args], env=env, capture_output=True, text=True, timeout=300)


def _serve(env: dict, port: int) -> subprocess.Popen:
    server = subprocess.Popen([PGBRAID, "serve", "--port", str(port),
                               "--workers", "2"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    server.terminate()
    raise RuntimeError("pgbraid serve did not become ready")


def _queries() -> list[str]:
    rows = list(read_jsonl(DATA / "beir_scifact" / "queries.jsonl"))
    return [r["text"] for r in rows[:200]]


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.two_versions = 0
        self.missing = 0
        self.tracked_checks = 0

    def record(self, kind: str, ms: float, problem: str | None = None) -> None:
        with self.lock:
            self.ms[kind].append(ms)
            if problem:
                self.errors.append(problem)


def _check(body: dict, stats: Stats, tracked_query: bool) -> None:
    seen: dict[str, set] = defaultdict(set)
    for hit in body["hits"]:
        seen[hit["document_id"]].add(hit["version"])
    with stats.lock:
        stats.two_versions += sum(1 for versions in seen.values() if len(versions) > 1)
        if tracked_query:
            stats.tracked_checks += 1
            stats.missing += sum(1 for d in TRACKED if d not in seen)


def _client_loop(base: str, headers: dict, stats: Stats, queries: list[str], stop: float,
                 seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for _ in range(MAX_REQUESTS // CLIENTS):
            if time.monotonic() >= stop:
                return
            kind = rng.choice(TYPES)
            tracked = rng.random() < 0.2 and kind in ("bm25", "fulltext", "hybrid")
            query = "zebrafish lattice protein assay" if tracked else rng.choice(queries)
            k = 10 if not tracked else 20
            began = time.perf_counter()
            response = http.post(f"/pipelines/{PIPELINE}/search",
                                 json={"query": query, "type": kind, "params": {"k": k}})
            ms = (time.perf_counter() - began) * 1000
            if response.status_code != 200:
                stats.record(kind, ms, f"{kind} {response.status_code} {response.text[:200]}")
                continue
            stats.record(kind, ms)
            _check(response.json(), stats, tracked)


def _writer_loop(base: str, headers: dict, stats: Stats, stop: float) -> int:
    version = 0
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        while time.monotonic() < stop and version < 10_000:
            version += 1
            began = time.perf_counter()
            response = http.post(f"/pipelines/{PIPELINE}/documents", json=_tracked(version))
            ms = (time.perf_counter() - began) * 1000
            stats.record("ingest", ms, None if response.status_code == 200 else
                         f"ingest {response.status_code} {response.text[:200]}")
    return version


def _cold(env: dict, queries: list[str]) -> list[list[object]]:
    rows = []
    for kind in TYPES:
        samples = []
        for query in queries[:3]:
            began = time.perf_counter()
            done = _pgbraid("search", PIPELINE, query, "--type", kind, "--json", env=env)
            samples.append((time.perf_counter() - began) * 1000)
            if done.returncode != 0:
                raise RuntimeError(f"cold CLI search failed: {done.stdout[:200]}")
        rows.append([kind, statistics.median(samples)])
    return rows


def run(quick: bool = False) -> None:
    _corpus()
    env = {**os.environ, "PGBRAID_DATA_DIR": str(BENCH_DIR / "pg")}
    created = _pgbraid("keys", "create", "--pipeline", PIPELINE, "--permissions",
                       "read,write,execute", "--json", env=env)
    key = json.loads(created.stdout)["key"]
    stats, queries = Stats(), _queries()  # before the server: nothing left running on error
    port = _free_port()
    server = _serve(env, port)
    base, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    seconds = 15 if quick else SECONDS
    try:
        stop = time.monotonic() + seconds
        threads = [threading.Thread(target=_client_loop, args=(base, headers, stats, queries,
                                                               stop, n)) for n in range(CLIENTS)]
        versions = [0]
        writer = threading.Thread(target=lambda: versions.__setitem__(
            0, _writer_loop(base, headers, stats, stop)))
        for thread in [*threads, writer]:
            thread.start()
        for thread in [*threads, writer]:
            thread.join()
    finally:
        server.terminate()
        server.wait(timeout=60)
    _report(stats, seconds, versions[0])
    table("the same searches, cold CLI (one process per search), p50 ms", ["type", "p50"],
          _cold(env, queries))


def _report(stats: Stats, seconds: int, versions: int) -> None:
    rows = []
    for kind, samples in sorted(stats.ms.items()):
        ordered = sorted(samples)

        def at(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
        rows.append([kind, len(samples), len(samples) / seconds, at(0.5), at(0.95), at(0.99)])
    total = sum(len(s) for k, s in stats.ms.items() if k != "ingest")
    table(f"HTTP, {CLIENTS} clients, {seconds} s, --workers 2, {versions} re-ingests of "
          f"{len(TRACKED)} tracked documents; {total / seconds:.1f} searches/s",
          ["type", "requests", "req/s", "p50 ms", "p95 ms", "p99 ms"], rows)
    print(f"errors: {len(stats.errors)}; a document at two versions: {stats.two_versions}; "
          f"tracked documents missing: {stats.missing} over {stats.tracked_checks} checks")
    for problem in stats.errors[:5]:
        print("  ", problem)
    if stats.errors or stats.two_versions or stats.missing:
        raise SystemExit("load: errors or inconsistent answers (see above)")


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
