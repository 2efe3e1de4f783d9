"""fuzzy's word method, its subset search (strategies/fuzzy_words.py says what it finds).

Subsets of the query words are taken in decreasing order of the best total a fragment
holding an expansion of each of them (and of no other) can reach; for each, GIN
intersects the word lists of its expansions before a row is read. Within a subset the
fragments come in the ranking's tie order (fewer distinct words, then the smaller id),
a page first: when a stop word stands beside a word nothing matches, tens of thousands
of fragments tie at the bound and only the first few can enter (docs/benchmarks.md,
Fuzzy: "and the scleep" read 70,953 fragments in 8-9 s, now 64).
"""

from __future__ import annotations

from heapq import heappush, heappushpop
from itertools import combinations
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from .fuzzy_words import _Scores

# Float sums of the same similarities, in Python and in SQL.
EPSILON = 1e-6
# The first page of a subset's fragments (at least 4 k); the rest are read whole.
PAGE = 64
_START = (-1, 0)  # (words, id) before every fragment's
_PAST = (2 ** 31 - 1, 2 ** 63 - 1)  # (words, id) after every fragment's

# The fragments in scope holding an expansion of each word of a subset ({holds}), not
# seen before, with their words (scored here: measured faster than in SQL), between two
# places of the ranking's tie order (fewer words, then the smaller id); {page}: the first
# of them in that order, or all.
_SUBSET = """
SELECT f.id, f.word_set FROM pgbraid.fragments f
WHERE {scope} AND {holds} AND f.id <> ALL(%(seen)s::bigint[]){after}{before}
{page}
"""
_AFTER = "\n  AND (cardinality(f.word_set), f.id) > (%(after_size)s, %(after_id)s)"
_BEFORE = "\n  AND (cardinality(f.word_set), f.id) < (%(before_size)s, %(before_id)s)"
# "+ 0": sorted, not walked in the order of fragments_word_count (migration 052): a walk
# filtering on the words held reads most of the pipeline when few fragments hold them.
_PAGE = "ORDER BY cardinality(f.word_set) + 0, f.id LIMIT %(page)s"


class Subsets:
    """The subset search: subsets of the query words whose known expansions a fragment
    holds, by their bound (their best similarities, plus what each short word outside
    can add); in a subset's fragments, by their own bound, each scored only while it
    can still enter. When a subset is left to read only for what the short words might
    add, those are expanded in full instead (what it costs without them) and the
    search goes on, the fragments read so far kept.

    A subset is read a page at a time in the ranking's tie order (fewer words, then the
    smaller id), and no further once the k-th best so far scores at least the subset's
    bound and comes before the page's last fragment in that order: every fragment left
    ranks below it. (A stop word beside a misspelled one, "and the scleep": 70,953
    fragments hold "and" and "the", all tied at the bound; the ten with the fewest
    words are in the first page.) A fragment left unread in one subset and met in a
    later one ranks below that subset's k-th, so it cannot enter either."""

    def __init__(self, conn: psycopg.Connection, where: sql.Composable, params: dict[str, Any],
                 scores: _Scores, k: int, need: float):
        self.conn, self.where, self.params, self.scores = conn, where, params, scores
        self.k, self.need = k, need
        self.found: dict[int, tuple[int, float, int]] = {}
        # The k best (total, -words, -id) reaching need: a heap, the k-th best at its root.
        self.best: list[tuple[float, int, int]] = []
        self.seen: list[int] = []

    def run(self, groups: dict[int, dict[str, float]], short: dict[int, float],
            widen) -> list[tuple[int, float, int]]:
        while True:
            tops = {n: max(g.values()) for n, g in groups.items() if g}

            def bound(subset: tuple[int, ...], rest: bool = True) -> float:
                return sum(tops[n] for n in subset) + (
                    sum(r for n, r in short.items() if n not in subset) if rest else 0.0)

            for subset in sorted((s for size in range(len(tops), 0, -1)
                                  for s in combinations(tops, size)), key=lambda s: -bound(s)):
                if bound(subset) < self.floor():
                    return self.ranked()
                if short and bound(subset, rest=False) < self.floor():
                    break
                # The short words' caps are not similarities pg_trgm can give exactly: a
                # margin; without them the bound is a sum of the similarities themselves.
                outside = any(n not in subset for n in short)
                self.read(groups, subset, bound(subset) + (EPSILON if outside else 0.0))
            else:
                return self.ranked()
            groups = {**groups, **widen()}
            short = {}
            self.scores.expand(groups)

    def floor(self) -> float:
        return self.best[0][0] - EPSILON if len(self.best) >= self.k else self.need

    def ranked(self) -> list[tuple[int, float, int]]:
        return _ranked(self.found.values(), self.need)[:self.k]

    def read(self, groups: dict[int, dict[str, float]], subset: tuple[int, ...],
             bound: float) -> None:
        """A first page of the subset's fragments; when it is full and more can enter,
        a page of those holding the best expansion of each word (they reach the bound,
        so the k-th best soon does), then the rest up to the k-th best's place."""
        after = self.page(groups, subset, bound, _START)
        if after is None:
            return
        best = {n: max(groups[n].values()) for n in subset}
        tops = {n: {w: s for w, s in groups[n].items() if s == best[n]} for n in subset}
        if any(len(tops[n]) < len(groups[n]) for n in subset):
            self.page(tops, subset, bound, _START)
            if self.last(bound) <= after:
                return
        self.page(groups, subset, bound, after, whole=True)

    def page(self, groups: dict[int, dict[str, float]], subset: tuple[int, ...], bound: float,
             after: tuple[int, int], whole: bool = False) -> tuple[int, int] | None:
        """Read and score the subset's fragments after ``after`` in the tie order (a page,
        or all of them up to the k-th best's place); the page's last place when it was
        full and a fragment after it may still enter, else None."""
        holds = sql.SQL(" AND ").join(
            sql.SQL("f.word_set && {}::text[]").format(sql.Placeholder(f"g{n}")) for n in subset)
        size = max(PAGE, 4 * self.k)
        before = self.last(bound)
        rows = self.conn.execute(
            sql.SQL(_SUBSET).format(scope=self.where, holds=holds,
                                    after=sql.SQL(_AFTER if after != _START else ""),
                                    before=sql.SQL(_BEFORE if before != _PAST else ""),
                                    page=sql.SQL("" if whole else _PAGE)),
            {**self.params, **{f"g{n}": list(groups[n]) for n in subset}, "seen": self.seen,
             "after_size": after[0], "after_id": after[1], "before_size": before[0],
             "before_id": before[1], "page": size}).fetchall()
        self.seen += [fragment for fragment, _ in rows]
        self.score(rows)
        if whole or len(rows) < size:
            return None
        last = (len(rows[-1][1]), rows[-1][0])
        return None if self.last(bound) <= last else last

    def last(self, bound: float) -> tuple[int, int]:
        """The tie order's (words, id) from which no fragment scoring at most ``bound``
        can enter: the k-th best's when it reaches the bound, else past every fragment."""
        if len(self.best) >= self.k and self.best[0][0] >= bound:
            return -self.best[0][1], -self.best[0][2]
        return _PAST

    def score(self, rows: list[tuple[int, list[str]]]) -> None:
        for fragment, known, cap, missing, held in self.scores.known(rows):
            if cap < self.floor():
                break
            total = known + self.scores.rest(held, missing, rows)
            self.found[fragment] = (fragment, total, len(held))
            if total >= self.need:
                (heappush if len(self.best) < self.k else heappushpop)(
                    self.best, (total, -len(held), -fragment))


def _ranked(found, need: float) -> list[tuple[int, float, int]]:
    """Best first: the higher total, then fewer words, then the smaller id."""
    return sorted((r for r in found if r[1] >= need), key=lambda r: (-r[1], r[2], r[0]))
