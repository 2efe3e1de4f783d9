"""Paired latency of graph ``similar`` at 1M edges: this checkout's hub search against
another commit's, in one process, on the same database (the bench's synthetic graph).

The other commit's ``walks``, ``hubs`` and ``native`` (the whole of the similar
search below the strategy) are exported from git and imported as a package of their
own; each request runs through the full Python API (seed lookup, search, cited
documents, trace) with the graph strategy pointed at one side or the other, the
order rotating from seed to seed. Every answer is checked against the exact
Python reference (``strategies/graph/reference.py``) and for its certificate.

    PGBRAID_BENCH_DIR=/tmp/graph-bench python -m bench.graph_paired [--base-ref 8ae59d0]
        [--rounds 2] [--measure jaccard]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import shutil
import sys
import time
import types
from contextlib import contextmanager

from pgbraid.strategies.graph import native, search, walks

from . import graph
from .common import connect, percentiles
from .ingest import server_cpu
from .ingest_paired import export_ref

SEEDS = [str(i) for i in range(2_500, 100_000, 5_000)]  # bench.graph's 20 seeds


def base_modules(ref: str) -> tuple[types.ModuleType, type]:
    """``ref``'s walks module and Native class, imported beside this checkout's."""
    src = export_ref(ref)
    package = types.ModuleType("pgbraid.strategies.graph_base")
    package.__path__ = [str(src / "pgbraid" / "strategies" / "graph")]
    sys.modules[package.__name__] = package
    try:
        walks_module = importlib.import_module(f"{package.__name__}.walks")
        native_class = importlib.import_module(f"{package.__name__}.native").Native
        if "packed" not in inspect.signature(native_class).parameters:  # before 047
            native_class = functools.partial(_unpacked, native_class)
        return walks_module, native_class
    finally:
        shutil.rmtree(src.parent)  # imported: the export is no longer needed


def _unpacked(native_class, conn, pipeline_id, packed=False):
    """A Native of before migration 047 (it reads no packed lists)."""
    return native_class(conn, pipeline_id)


@contextmanager
def side(walks_module, native_class):
    """The graph strategy answering through these modules for the duration."""
    saved = search.walks, search.Native
    search.walks, search.Native = walks_module, native_class
    try:
        yield
    finally:
        search.walks, search.Native = saved


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.graph_paired")
    parser.add_argument("--base-ref", default="8ae59d0", help="the baseline commit (main "
                        "before the one-pass hub rounds)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", default="jaccard", choices=search.MEASURES)
    args = parser.parse_args()
    sides = {"base": base_modules(args.base_ref), "branch": (walks, native.Native)}
    params = {"mode": "similar", "edge_type": "links", "k": 10, "measure": args.measure}
    with connect() as client:
        ref, ids = graph.graph_of(client, graph.SYNTHETIC)
        expected = {s: [(v.split(":", 1)[1], round(score, 6)) for v, score, _ in
                        ref.similar(f"node:{s}", {"links"}, measure=args.measure)[:10]]
                    for s in SEEDS}
        times = {name: [] for name in sides}
        same = {name: 0 for name in sides}
        certified = {name: 0 for name in sides}
        cpu = {name: 0.0 for name in sides}  # the server's CPU seconds (less load-bound than wall)
        load0 = os.getloadavg()[0]
        for round_ in range(args.rounds + 1):  # round 0 warms caches and prepared statements
            for i, seed in enumerate(SEEDS):
                names = list(sides)[(i + round_) % 2:] + list(sides)[:(i + round_) % 2]
                for name in names:
                    with side(*sides[name]):
                        server = server_cpu()  # a walk over /proc: outside the timing
                        started = time.perf_counter()
                        response = client.search(graph.SYNTHETIC, "x", type="graph",
                                                 params={**params, "seed": seed})
                        elapsed = (time.perf_counter() - started) * 1000
                        server = server_cpu() - server
                    if round_:
                        cpu[name] += server
                        details = response.trace.retrievers[0].details
                        times[name].append(elapsed)
                        same[name] += graph._engine_answer(details, params) == expected[seed]
                        certified[name] += details["hubs"]["certified_exact"]
        load1 = os.getloadavg()[0]
    n = args.rounds * len(SEEDS)
    p50 = {name: percentiles(times[name])[0] for name in sides}
    for name in sides:
        label = f"{args.base_ref} (base)" if name == "base" else "this checkout"
        print(f"similar ({args.measure}, defaults), {label}: p50 {p50[name]:.1f} ms, p95 "
              f"{percentiles(times[name])[1]:.1f} ms, server CPU {1000 * cpu[name] / n:.1f} ms "
              f"per search, = reference {same[name]}/{n}, certified {certified[name]}/{n}")
    print(f"p50 ratio this checkout / base: {p50['branch'] / p50['base']:.2f}, server CPU "
          f"ratio {cpu['branch'] / cpu['base']:.2f}; "
          f"{args.rounds} rounds x {len(SEEDS)} seeds, order rotating; load {load0:.2f} -> {load1:.2f}")


if __name__ == "__main__":
    main()
