"""Where lexical ingestion's time goes: one SciFact ingest (``embedder none``) with
wall time (perf_counter), the ingesting thread's CPU and the PostgreSQL backend's
CPU (from /proc) around each phase. `python -m bench.ingest_phases`

Phases nest (indented); the prepare thread and the writing thread overlap, so
wall times add up to more than the run. Run it with PYTHONPATH pointing at an
older checkout's src (and its phase names) to compare.
"""

from __future__ import annotations

import collections
import os
import time

import psycopg

from pgbraid.ingest import (batches, bm25_index, bm25_merge, dictionary, fragments, language,
                            preparing)
from pgbraid.ingest import prepare as P

from .common import connect
from .ingest import records, server_cpu

TICK = os.sysconf("SC_CLK_TCK")


def pcpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except FileNotFoundError:
        return 0.0


W: dict[str, float] = collections.defaultdict(float)  # wall
C: dict[str, float] = collections.defaultdict(float)  # the calling thread's CPU
S: dict[str, float] = collections.defaultdict(float)  # its connection's backend's CPU
N: collections.Counter = collections.Counter()


def wrap(module, name: str, key: str) -> None:
    fn = getattr(module, name, None)
    if fn is None:  # an older checkout's phase names (see the module docstring)
        return

    def timed(*args, **kwargs):
        conn = next((a for a in args if isinstance(a, psycopg.Connection)), None)
        pid = conn.info.backend_pid if conn is not None else None
        backend, started, cpu = pcpu(pid) if pid else 0.0, time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            W[key] += time.perf_counter() - started
            C[key] += time.thread_time() - cpu
            N[key] += 1
            if pid:
                S[key] += pcpu(pid) - backend

    setattr(module, name, timed)


def instrument() -> None:
    """Time each phase (on import of nothing: only when the suite runs)."""
    wrap(preparing, "prepare", "prepare: python (chunk, language, expand, hash)")
    wrap(P, "detect", "  language detection (per document)")
    wrap(preparing, "detect_languages", "  language detection (per batch)")
    wrap(P, "expand_code", "  code expansion")
    wrap(P, "distinct_words", "  fuzzy words of each piece")
    wrap(fragments, "analyse", "analyse: to_tsvector x2 (own connection)")
    wrap(batches, "_write", "write transaction (under the lock)")
    wrap(batches, "write_new", "  documents + versions + fragments")
    wrap(fragments, "insert", "    fragments COPY + INSERT (indexes)")
    wrap(dictionary, "add", "  fuzzy dictionary rows (INSERT ... ON CONFLICT)")
    wrap(bm25_index, "flush", "  bm25 flush (segment, postings, stats, tier merges)")
    wrap(bm25_index, "_pack", "    pack postings (numpy)")
    wrap(bm25_merge, "merge_tiers", "    tier merges")
    wrap(bm25_index, "merge_since", "end of call: merge the call's segments")


def run() -> None:
    instrument()
    rows = records()
    client = connect()
    name = f"bench-phases-{time.time_ns()}"
    client.create_pipeline(name, embedder="none")
    language._identifier()
    s0, c0, t0 = server_cpu(), time.process_time(), time.perf_counter()
    report = client.ingest(name, rows)
    wall, ccpu, scpu = time.perf_counter() - t0, time.process_time() - c0, server_cpu() - s0
    client.delete_pipeline(name)
    f = report.fragments
    print(f"fragments {f}: wall {wall:.1f}s = {f / wall:.0f}/s; client CPU {ccpu:.1f}s, server CPU"
          f" {scpu:.1f}s ({1000 * (ccpu + scpu) / f:.2f} CPU-ms/fragment); load average"
          f" {os.getloadavg()[0]:.1f}")
    print(f"{'phase':58s} {'wall s':>7s} {'client CPU':>10s} {'server CPU':>10s} {'calls':>6s}")
    for k in W:
        print(f"{k:58s} {W[k]:7.2f} {C[k]:10.2f} {S[k]:10.2f} {N[k]:6d}")


if __name__ == "__main__":
    run()
