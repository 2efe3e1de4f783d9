"""`python -m bench [lexical|fuzzy|ingest|...|all] [--quick]`"""

from __future__ import annotations

import argparse

from . import contention, fuzzy, graph, history, hybrid, ingest, lexical, load, vector


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("suite", nargs="?", default="all", choices=["lexical", "fuzzy", "ingest", "vector", "hybrid", "graph", "history", "contention", "load", "all"])
    parser.add_argument("--quick", action="store_true",
                        help="skip the large corpora (~100k fragments, 1M edges, CISI/Cranfield)")
    args = parser.parse_args()
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
    if args.suite in ("ingest", "all"):
        ingest.run(quick=args.quick)
    if args.suite in ("history", "all"):
        history.run(quick=args.quick)
    if args.suite == "load":  # not in "all": a 60 s soak of the HTTP server
        load.run(quick=args.quick)
    if args.suite == "contention":  # not in "all": it measures latency under load, not speed
        contention.run()


if __name__ == "__main__":
    main()
