"""`python -m bench [lexical|fuzzy|...|all] [--quick]`, `python -m bench million [--sizes ...]`"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import contention, fuzzy, graph, history, hybrid, lexical, load, million, vector


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("suite", nargs="?", default="all", choices=["lexical", "fuzzy", "vector", "hybrid", "graph", "history", "contention", "load",
                                 "million", "all"])
    parser.add_argument("--quick", action="store_true",
                        help="skip the large corpora (~100k fragments, 1M edges, CISI/Cranfield)")
    parser.add_argument("--sizes", default="100k,300k,1m",
                        help="million: the corpus sizes to measure (100k, 300k, 1m)")
    parser.add_argument("--build", action="store_true",
                        help="million: build the corpus first (or resume an interrupted build)")
    parser.add_argument("--plot", nargs="*", metavar="RESULTS",
                        help="million: draw docs/bm25_scaling.png from saved results files")
    args = parser.parse_args()
    if args.suite == "million":  # not in "all": its corpus takes an hour or more to build
        if args.plot:
            million.plot([Path(p) for p in args.plot], million.ROOT / "docs" / "bm25_scaling.png")
        else:
            million.run(sizes=tuple(args.sizes.split(",")), build=args.build)
        return
    if args.suite in ("fuzzy", "all"):
        fuzzy.run()
    if args.suite in ("lexical", "all"):
        lexical.run(quick=args.quick)
    if args.suite in ("vector", "all"):
        vector.run(quick=args.quick)
    if args.suite in ("hybrid", "all"):
        hybrid.run(quick=args.quick)
    if args.suite in ("graph", "all"):
        graph.run(quick=args.quick)
    if args.suite in ("history", "all"):
        history.run(quick=args.quick)
    if args.suite == "load":  # not in "all": a 60 s soak of the HTTP server
        load.run(quick=args.quick)
    if args.suite == "contention":  # not in "all": it measures latency under load, not speed
        contention.run()


if __name__ == "__main__":
    main()
