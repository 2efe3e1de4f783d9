"""`python -m bench [lexical|fuzzy|all] [--quick]`"""

from __future__ import annotations

import argparse

from . import fuzzy, lexical


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("suite", nargs="?", default="all", choices=["lexical", "fuzzy", "all"])
    parser.add_argument("--quick", action="store_true",
                        help="skip the ~100k-fragment corpus (relevance and 5k-fragment speed only)")
    args = parser.parse_args()
    if args.suite in ("fuzzy", "all"):
        fuzzy.run()
    if args.suite in ("lexical", "all"):
        lexical.run(quick=args.quick)


if __name__ == "__main__":
    main()
