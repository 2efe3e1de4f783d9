"""Paired latency of graph ``similar`` at 1M edges: this checkout's hub search against
another commit's, in one process, on the same database (the bench's synthetic graph).

The other commit's ``walks``, ``hubs`` and ``native`` (the whole of the similar
search below the strategy) are exported from git and imported as a package of their
own; each request runs through the full Python API (seed lookup, search, cited
documents, trace) with the graph strategy pointed at one side or the other, the
order rotating from seed to seed. Every answer is checked against the exact
Python reference (``strategies/graph/reference.py``) and for its certificate.

    PGBRAID_BENCH_DIR=/tmp/graph-bench python -m bench.graph_paired [--base-ref 32f5a8e]
        [--rounds 2] [--measure jaccard] [--age-seeds 3]

Then 2-hop neighbours (this checkout, every seed, checked against the reference) and
Apache AGE against the native engine on the first seeds, similar and 2-hop, as ratios
(AGE is built into the bench server when gcc and make exist). The reference's answers
are cached in the bench dir under the graph's version (they take seconds a seed).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
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


def expected_answers(client, measure: str) -> dict:
    """The reference's top 10 (similar) and reached vertices (2-hop) for SEEDS, cached in
    the bench dir under the graph's version (the reference takes seconds a seed)."""
    with client.session() as conn:
        version = conn.execute("SELECT g.version FROM pgbraid.graph_versions g JOIN"
                               " pgbraid.pipelines p ON p.id = g.pipeline_id WHERE p.name = %s",
                               (graph.SYNTHETIC,)).fetchone()[0]
    cache = graph.BENCH_DIR / f"graph-expected-v{version}-{measure}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    ref, ids = graph.graph_of(client, graph.SYNTHETIC)
    found = {"similar": {s: [[v.split(":", 1)[1], round(score, 6)] for v, score, _ in
                             ref.similar(f"node:{s}", {"links"}, measure=measure)[:10]]
                         for s in SEEDS},
             "walk": {s: graph._reference_answer(ref, ids, f"node:{s}", WALK) for s in SEEDS}}
    cache.write_text(json.dumps(found))
    return found


WALK = {"mode": "neighbours", "edge_types": ["links"], "hops": 2, "k": 1000}


def _ask(client, params: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    response = client.search(graph.SYNTHETIC, "x", type="graph", params=params)
    return (time.perf_counter() - started) * 1000, response.trace.retrievers[0].details


def paired_similar(client, sides: dict, params: dict, expected: dict, rounds: int) -> dict:
    """Every seed asked of both sides, the order rotating; wall and server CPU."""
    times = {name: [] for name in sides}
    same, certified, cpu = ({name: 0 for name in sides} for _ in range(3))
    for round_ in range(rounds + 1):  # round 0 warms caches and prepared statements
        for i, seed in enumerate(SEEDS):
            names = list(sides)[(i + round_) % 2:] + list(sides)[:(i + round_) % 2]
            for name in names:
                with side(*sides[name]):
                    server = server_cpu()  # a walk over /proc: outside the timing
                    elapsed, details = _ask(client, {**params, "seed": seed})
                    server = server_cpu() - server
                if round_:
                    cpu[name] += server
                    times[name].append(elapsed)
                    answer = [list(pair) for pair in graph._engine_answer(details, params)]
                    same[name] += answer == expected[seed]
                    certified[name] += details["hubs"]["certified_exact"]
    return {"times": times, "same": same, "certified": certified, "cpu": cpu}


def walks_and_age(client, expected: dict, rounds: int, age_seeds: int, with_age: bool) -> None:
    """2-hop (this checkout) on every seed; then native against AGE, interleaved, on the
    first ``age_seeds`` seeds, similar and 2-hop."""
    hops = []
    same = 0
    for round_ in range(rounds + 1):
        for seed in SEEDS:
            elapsed, details = _ask(client, {**WALK, "seed": seed})
            if round_:
                hops.append(elapsed)
                same += graph._engine_answer(details, WALK) == expected["walk"][seed]
    n = rounds * len(SEEDS)
    print(f"2-hop neighbours (defaults), this checkout: p50 {percentiles(hops)[0]:.1f} ms, "
          f"p95 {percentiles(hops)[1]:.1f} ms, = reference {same}/{n}")
    if not with_age or not age_seeds:
        print("Apache AGE: not measured (cannot be built here, or --age-seeds 0)")
        return
    for label, params in (("similar", {"mode": "similar", "edge_type": "links", "k": 10}),
                          ("2-hop", WALK)):
        times, agree = {"pgbraid": [], "age": []}, 0
        for seed in SEEDS[:age_seeds]:
            found = {}
            for engine in times:
                elapsed, found[engine] = _ask(client, {**params, "seed": seed, "engine": engine})
                times[engine].append(elapsed)
            agree += graph._entities(found["pgbraid"]) == graph._entities(found["age"])
        native, age = (percentiles(times[e])[0] for e in ("pgbraid", "age"))
        print(f"{label}, native vs Apache AGE ({age_seeds} seeds, interleaved, first asks): "
              f"native p50 {native:.1f} ms, AGE p50 {age:.1f} ms, AGE / native {age / native:.1f}x, "
              f"same entities {agree}/{age_seeds}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.graph_paired")
    parser.add_argument("--base-ref", default="32f5a8e", help="the baseline commit (main "
                        "before the packed lists)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", default="jaccard", choices=search.MEASURES)
    parser.add_argument("--age-seeds", type=int, default=3,
                        help="seeds asked of Apache AGE too (seconds a question at 1M edges)")
    args = parser.parse_args()
    sides = {"base": base_modules(args.base_ref), "branch": (walks, native.Native)}
    params = {"mode": "similar", "edge_type": "links", "k": 10, "measure": args.measure}
    with_age = bool(args.age_seeds) and graph.age_ready()
    with connect(age=with_age) as client:
        expected = expected_answers(client, args.measure)
        load0 = os.getloadavg()[0]
        found = paired_similar(client, sides, params, expected["similar"], args.rounds)
        n = args.rounds * len(SEEDS)
        p50 = {name: percentiles(found["times"][name])[0] for name in sides}
        for name in sides:
            label = f"{args.base_ref} (base)" if name == "base" else "this checkout"
            print(f"similar ({args.measure}, defaults), {label}: p50 {p50[name]:.1f} ms, p95 "
                  f"{percentiles(found['times'][name])[1]:.1f} ms, server CPU "
                  f"{1000 * found['cpu'][name] / n:.1f} ms per search, = reference "
                  f"{found['same'][name]}/{n}, certified {found['certified'][name]}/{n}")
        cpu = found["cpu"]
        print(f"p50 ratio this checkout / base: {p50['branch'] / p50['base']:.2f}, server CPU "
              f"ratio {cpu['branch'] / cpu['base']:.2f}; {args.rounds} rounds x {len(SEEDS)} "
              f"seeds, order rotating")
        walks_and_age(client, expected, args.rounds, args.age_seeds, with_age)
        print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
