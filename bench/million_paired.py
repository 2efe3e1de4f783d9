"""Paired latency of bm25 at 1M fragments: this checkout's ranking against another
commit's, in one process, on the million bench's corpus, pg_textsearch beside them.

The other commit's ranking modules (``bm25_topk`` with ``bm25_blockmax``,
``bm25_maxscore`` and ``bm25_postings``: everything below the strategy's SQL) are
exported from git and imported as a package of their own, and, when that commit
predates one set_config statement for the tenant's settings (2026-12-02), its
sessions send them as four SET LOCALs;
each search runs through
the full Python API (snapshot, terms, postings cache, scope check, trace) with the
strategy ranking through one side or the other, and pg_textsearch's query on its own
server, the order rotating from query to query. When the other commit has no
db/pipelining.py, its sessions also write each pipelined statement on its own
(psycopg's pipeline, as before 2026-12-04 evening) rather than each pipeline in one go.
Both sides must return the same fragments with the same scores and matched terms on
every query. "branch" is the checkout this file is in (its src/ goes first on the path,
whatever the virtualenv's editable install points at).

    python -m bench.million_paired [--base-ref main] [--rounds 2] [--sets scifact,code]

Prints p50 / p95 of wall time and the client's CPU time per search (thread time:
less load-bound than wall), and the ratios to the base and to pg_textsearch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's pgbraid

from pgbraid.db import pipelining, transaction_settings  # noqa: E402
from pgbraid.strategies import bm25, bm25_topk  # noqa: E402

from . import million  # noqa: E402
from .common import console, percentiles, table  # noqa: E402
from .ingest_paired import export_ref  # noqa: E402
from .million_peers import TextSearch  # noqa: E402


def base_ranking(ref: str) -> types.ModuleType:
    """``ref``'s bm25_topk (and the modules it imports), beside this checkout's."""
    src = export_ref(ref)
    package = types.ModuleType("pgbraid.strategies.bm25_base")
    package.__path__ = [str(src / "pgbraid" / "strategies")]
    sys.modules[package.__name__] = package
    try:
        topk = importlib.import_module(f"{package.__name__}.bm25_topk")
        db = src / "pgbraid" / "db"
        topk.one_write = (db / "pipelining.py").exists()
        settings = db / "transaction_settings.py"
        topk.set_locals = not (settings.exists() and "set_config(" in settings.read_text())
        return topk
    finally:
        shutil.rmtree(src.parent)  # imported: the export is no longer needed


@contextmanager
def side(topk: types.ModuleType, set_locals: bool = False):
    """The bm25 strategy ranking through this module for the duration; ``set_locals``:
    sessions set the tenant's settings with a SET LOCAL each, as before 2026-12-02 (and
    on a Citus coordinator), instead of one set_config statement. A base without
    db/pipelining.py (``one_write`` False) has psycopg write each pipelined statement."""
    saved = bm25.Ranking, bm25.Term, transaction_settings._set_local_statements
    batched = pipelining.batched
    if not hasattr(topk.Ranking, "release"):  # a base from before bm25_scratch
        topk.Ranking.release = lambda self: None
    bm25.Ranking, bm25.Term = topk.Ranking, topk.Term
    if set_locals:
        transaction_settings._set_local_statements = (
            lambda conn, settings, role, citus: saved[2](conn, settings, role, True))
    if not getattr(topk, "one_write", True):
        pipelining.batched = lambda conn: conn.pipeline()
    try:
        yield
    finally:
        bm25.Ranking, bm25.Term, transaction_settings._set_local_statements = saved
        pipelining.batched = batched


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.million_paired")
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sets", default="scifact,code")
    args = parser.parse_args()
    from .lexical import code_chunks, scifact_queries

    sets = {"scifact": ("SciFact queries", lambda: [t for _, t in scifact_queries()[0]]),
            "code": ("30-token code chunks", code_chunks)}
    sides = {"base": base_ranking(args.base_ref), "branch": bm25_topk}
    with million.connect(postings_cache_mb=6144) as client:
        peer = TextSearch(million.DIR / "pts", million.VENDOR)
        classes = list(million.CLASSES)
        for key in args.sets.split(","):
            title, texts = sets[key][0], sets[key][1]()
            _paired(client, peer, sides, classes, title, texts, args.rounds)
        peer.close()


def _paired(client, peer, sides: dict, classes: list[str], title: str, texts: list[str],
            rounds: int) -> None:
    def ours(text: str) -> list:
        found = client.search(million.PIPELINE, text, type="bm25", classification=classes,
                              params={"k": 10})
        return [(h.fragment_id, h.score, tuple(h.matched_terms)) for h in found.hits]

    names = [*sides, "pg_textsearch"] if not peer.reason else list(sides)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    same = 0
    load0 = os.getloadavg()[0]
    for round_ in range(rounds + 1):  # round 0 warms caches and prepared statements
        for i, text in enumerate(texts):
            answers = {}
            turn = (i + round_) % len(names)
            for name in names[turn:] + names[:turn]:
                started, began = time.perf_counter(), time.thread_time()
                if name in sides:
                    with side(sides[name], set_locals=getattr(sides[name], "set_locals", False)):
                        answers[name] = ours(text)
                else:
                    peer.search("1m", text)
                if round_:
                    wall[name].append((time.perf_counter() - started) * 1000)
                    cpu[name].append((time.thread_time() - began) * 1000)
            if round_ == 1:
                same += answers["base"] == answers["branch"]
    load = [load0, os.getloadavg()[0]]
    rows = []
    for name in names:
        p50, p95 = percentiles(wall[name])
        c50, _ = percentiles(cpu[name])
        per_query = float(np.median(np.array(wall[name]) / np.array(wall["base"])))
        rows.append([name, p50, p95, c50, per_query])
    base, peer_row = rows[0], rows[-1] if "pg_textsearch" in names else None
    table(f"1M, {title} ({len(texts)} x {rounds}), ms, paired, load {load[0]:.1f}-{load[1]:.1f}",
          ["side", "p50", "p95", "client CPU p50", "median per-query / base"], rows)
    branch = rows[1]
    console.print(f"  branch / base: p50 {branch[1] / base[1]:.3f}, p95 {branch[2] / base[2]:.3f}, "
                  f"CPU {branch[3] / base[3]:.3f}; identical hits, scores and matched terms "
                  f"{same}/{len(texts)}")
    if peer_row:
        console.print(f"  branch / pg_textsearch: p50 {branch[1] / peer_row[1]:.3f}, "
                      f"p95 {branch[2] / peer_row[2]:.3f}; base / pg_textsearch: p50 "
                      f"{base[1] / peer_row[1]:.3f}, p95 {base[2] / peer_row[2]:.3f}")


if __name__ == "__main__":
    main()
