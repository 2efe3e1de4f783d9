"""`python -m bench.redos`: the planner's identifier patterns on crafted queries.

For each pattern of planner.IDENTIFIERS, the slowest of its crafted 10,000-character
queries (tests/test_redos.py's CRAFTED), median of 5 runs; then the old domain
pattern (main before the fix) against the new one on ``"a-." * n``, interleaved
in one process.
"""

from __future__ import annotations

import re
import statistics
import time

from pgbraid import planner
from tests.test_redos import CRAFTED

OLD_DOMAIN = re.compile(r"\b(?:[a-z0-9-]+(?:\[\.\]|\.))+(?:com|net|org|io|ru|cn|info|biz|xyz|"
                        r"top|gov|edu|de|uk|fr|jp|kr|in|br|co|me|app|dev|online|site)\b", re.I)


def _ms(run, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    print("| pattern | slowest crafted 10k-char query | ms (median of 5) |")
    print("|---|---|---|")
    for kind, queries in CRAFTED.items():
        pattern = planner.IDENTIFIERS[kind]
        worst = max(((_ms(lambda q=q: list(planner._matches(kind, pattern, q))), q)
                     for q in queries), key=lambda pair: pair[0])
        print(f"| {kind} | `{worst[1][:16]!r}`... | {worst[0]:.2f} |")
    whole = max(_ms(lambda q=q: (planner._identifiers.cache_clear(), planner.plan(q)))
                for qs in CRAFTED.values() for q in qs)
    print(f"\nplanner.plan (every pattern, overlaps, the plan), slowest crafted query: "
          f"{whole:.1f} ms")
    print("\n| query | old domain ms | new domain ms | ratio |")
    print("|---|---|---|---|")
    for n in (333, 666, 1333):
        query = "a-." * n
        old = _ms(lambda: list(OLD_DOMAIN.finditer(query)), repeat=3)
        new = _ms(lambda: list(planner._matches("domain", planner.IDENTIFIERS["domain"], query)),
                  repeat=3)
        print(f"| `\"a-.\" * {n}` ({len(query)} chars) | {old:.1f} | {new:.2f} | {old / new:.0f}x |")


if __name__ == "__main__":
    main()
