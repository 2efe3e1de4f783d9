"""`python -m bench [lexical|fuzzy|vector|hybrid|graph|history|crypto|ingest|quarantine|replicas|capacity|citus|all|plots] [--quick]`,
`python -m bench million [--build] [--sizes 100k,300k,1m] [--quick]`

Each suite prints its tables, keeps their figures in bench/results/<suite>.json and
draws its plots from that file into docs/plots/ (bench/plots.py); `plots` redraws
every suite's plots from the files alone, without running anything.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from . import (capacity, citus, contention, crypto, fuzzy, graph, history, hybrid, ingest, lexical, live,
               load, million, plots, quarantine, replicas, vector)
from .common import ROOT, console


def draw(*modules) -> None:
    """Each module's plots from its suite's result file (modules without plot() draw none)."""
    for module in modules:
        suite = module.__name__.rsplit(".", 1)[-1]
        results = plots.load(suite)
        if hasattr(module, "plot") and results:
            for path in module.plot(results):
                console.print(f"plot: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def every_module() -> list:
    package = importlib.import_module("bench")
    return [importlib.import_module(f"bench.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)
            if info.name not in ("__main__", "plots", "common")]


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("suite", nargs="?", default="all", choices=["lexical", "fuzzy", "vector", "hybrid", "graph", "history", "crypto", "ingest", "live", "quarantine", "contention", "load", "replicas", "capacity", "citus", "million", "all", "plots"])
    parser.add_argument("--quick", action="store_true",
                        help="skip the large corpora (~100k fragments, 1M edges, CISI/Cranfield); million: "
                             "pgbraid's default and pg_textsearch only, bm25s's answers kept")
    parser.add_argument("--sizes", default="100k,300k,1m",
                        help="million: the corpus sizes to measure (100k, 300k, 1m)")
    parser.add_argument("--build", action="store_true",
                        help="million: build the corpus first (or resume an interrupted build)")
    args = parser.parse_args()
    if args.suite == "million":  # not in "all": its corpus takes an hour or more to build
        million.run(sizes=tuple(args.sizes.split(",")), build=args.build, quick=args.quick)
        if not args.quick:
            draw(million)
        return
    if args.suite == "plots":
        draw(*every_module())
        return
    if args.suite in ("fuzzy", "all"):
        fuzzy.run()
    if args.suite in ("lexical", "all"):
        lexical.run(quick=args.quick)
        draw(lexical)
    if args.suite in ("vector", "all"):
        vector.run(quick=args.quick)
        draw(vector)
    if args.suite in ("hybrid", "all"):
        hybrid.run(quick=args.quick)
        draw(hybrid)
    if args.suite in ("graph", "all"):
        graph.run(quick=args.quick)
    if args.suite in ("history", "all"):
        history.run(quick=args.quick)
    if args.suite in ("crypto", "all"):
        crypto.run(quick=args.quick)
    if args.suite in ("ingest", "all"):
        ingest.run(quick=args.quick)
        draw(ingest)
    if args.suite in ("live", "all"):
        live.run(queries=50 if args.quick else 150)
    if args.suite in ("quarantine", "all"):
        quarantine.run(quick=args.quick)
    if args.suite == "load":  # not in "all": a 60 s soak of the HTTP server
        load.run(quick=args.quick)
    if args.suite == "citus":  # not in "all": starts a Citus cluster (Citus built: README)
        citus.run(quick=args.quick)
    if args.suite == "capacity":  # not in "all": sizes for docs/scale.md
        capacity.run(quick=args.quick)
    if args.suite == "replicas":  # not in "all": it makes and removes a streaming replica
        replicas.run(quick=args.quick)
    if args.suite == "contention":  # not in "all": it measures latency under load, not speed
        contention.run()


if __name__ == "__main__":
    main()
