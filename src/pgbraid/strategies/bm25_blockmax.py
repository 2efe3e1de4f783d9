"""Exact BM25 top-k by block-max over ordinal windows (the default ranking).

Scoring every posting costs time in proportion to the query's lists, which
grow with the corpus: at a million fragments a 30-token query holds millions
of postings. Block-max skips most of them and still returns the exact top k.

Blocks here are *windows of ordinals* (``WINDOW`` consecutive fragment
ordinals), the same for every list, rather than Lucene's and pg_textsearch's
blocks of 128 postings per list: with shared boundaries, the bound of a window
is one sum over the query's lists and the windows can be ranked wholesale in
numpy, where a document-at-a-time WAND loop would run in Python. (Dimopoulos
et al., "Optimizing top-k document retrieval strategies for block-max
indexes", WSDM 2013, and Mallia et al., "Faster BlockMax WAND with
variable-sized blocks", SIGIR 2017, compare the two layouts; docid-range
blocks are also what PISA's "range" algorithms use.)

1. Each list knows, per window it has postings in, its largest impact
   ``tf / (tf + k1 * (1 - b + b * dl / avgdl))`` (bm25_postings memoises it
   with the impacts: it depends on avgdl, which every ingest moves, so it is
   computed from the stored arrays, not stored beside them).
2. The bound of a window is the sum over the query's terms of ``weight *
   peak``: no fragment in it can score more.
3. In rounds, the windows left with the highest bounds (FIRST, then GROWTH
   times more each round) are scored exactly: their postings gathered list
   by list, summed with one ``np.bincount`` in the term order of every other
   path, so a score never depends on the path. The ``width``-th best score
   so far, theta, is a lower bound of the ``width``-th best overall; windows
   whose bound falls below it are dropped.
4. When no window is left, no unscored fragment can reach the top ``width``
   (a fragment scoring theta exactly is in a window kept: ties are broken
   by ordinal later), so the top ``width`` of the scored is the exact one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # bm25_topk imports this module
    from .bm25_topk import Ranking

SHIFT = 6
WINDOW = 1 << SHIFT  # ordinals per window
_MASK = WINDOW - 1
_MARGIN = 1.0 + 1e-6  # float32 impacts: a bound must hold rounded up
FIRST = 64  # windows scored first, to find theta; each round takes GROWTH times more
GROWTH = 4
# Below this many postings a query is cheaper to score in full (one bincount, ~5-10 ns a
# posting) than to bound window by window (tens of microseconds a list in numpy calls):
# measured on the million bench's lists at 1M fragments, paired (docs/benchmarks.md):
# SciFact queries (3-25 terms) scored in full were faster up to their largest, 641k
# postings; 30-token code chunks gained from block-max from ~500k, by 1.7x from 750k.
FROM_POSTINGS = 750_000
# With a term's lists in several segments merged into one (bm25_postings.by_term), block-max
# also won for queries of 20 terms or more from 250k postings, and lost below 20 terms at
# every size up to 750k (the million bench's queries, paired, 2026-12-01).
MANY_TERMS, FROM_POSTINGS_MANY = 20, 250_000


def pays(postings: int, terms: int) -> bool:
    """Whether ``auto`` ranks a query by block-max (else by scoring every posting)."""
    return postings >= FROM_POSTINGS or (terms >= MANY_TERMS and postings >= FROM_POSTINGS_MANY)


def top(ranking: "Ranking", width: int) -> np.ndarray:
    """The exact ``width`` best ordinals with a positive score, best first (ties by
    ordinal); the scored fragments' scores go to ``ranking`` (sparse)."""
    from .bm25_topk import _best_sparse

    blocks = _Blocks(ranking)
    bounds = blocks.bounds()
    remaining = np.flatnonzero(bounds > 0)
    ranking.stats.windows = len(remaining)
    ordinals: list[np.ndarray] = []
    sums: list[np.ndarray] = []
    best = np.zeros(0, dtype=np.float64)  # the width best scores so far
    theta, chunk = 0.0, FIRST
    # Rounds: the best-bounded windows left, scored exactly; theta from all scored so far;
    # windows whose bound falls below it dropped. Ends when none is left.
    while len(remaining):
        if len(remaining) > chunk:
            chosen = np.sort(remaining[np.argpartition(-bounds[remaining], chunk - 1)[:chunk]])
        else:
            chosen = remaining
        ranking.stats.windows_scored += len(chosen)
        found, values = blocks.score(chosen)
        if len(ranking.dead):  # a dead fragment must not raise theta (nor rank)
            live = ~np.isin(found, ranking.dead)
            found, values = found[live], values[live]
        ordinals.append(found)
        sums.append(values)
        best = np.concatenate([best, values])
        if len(best) >= width:
            best = np.partition(best, len(best) - width)[len(best) - width:]
            theta = max(theta, float(best[0]))
        bounds[chosen] = -1.0  # scored: below any theta
        remaining = remaining[bounds[remaining] >= theta]
        if len(remaining):
            blocks.keep(bounds, theta)
        chunk *= GROWTH
    found = np.concatenate(ordinals) if ordinals else np.zeros(0, dtype=np.intp)
    values = np.concatenate(sums) if sums else np.zeros(0, dtype=np.float64)
    ranking._sparse = (found, values, False)  # rounds in turn: not sorted
    ranking.stats.candidates = len(found)
    return _best_sparse(found, values, width)


class _Blocks:
    """The query's (list, window) pairs, concatenated in term order (every list with a
    posting), so that a round finds the postings of its chosen windows in a few numpy
    calls for all lists at once rather than a dozen per list; the pairs of windows
    scored or dropped are let go after each round."""

    def __init__(self, ranking: "Ranking") -> None:
        self.ranking = ranking
        self.lists, present, peaks, begins, ends = [], [], [], [], []
        for term in ranking.terms:
            for postings in term.lists:
                if len(postings):
                    windows, starts, peak = postings.blocks(*ranking.impacts)
                    self.lists.append((term.weight, postings))
                    present.append(windows)
                    peaks.append(term.weight * peak)
                    begins.append(starts[:-1])
                    ends.append(starts[1:])
        self.windows = (ranking.size >> SHIFT) + 1
        self._peaks = peaks
        # each pair's window, where its postings begin and end in its list, and its list
        self.present, self.begins, self.ends = (
            np.concatenate(a, dtype=np.intp) if a else np.zeros(0, dtype=np.intp)
            for a in (present, begins, ends))
        self.owner = np.repeat(np.arange(len(present)), [len(w) for w in present])

    def bounds(self) -> np.ndarray:
        """Each window's bound: its peaks summed over the lists (one bincount; a
        fancy-index add per list cost twice as much), with the margin."""
        if not self.lists:
            return np.zeros(self.windows)
        bounds = np.bincount(self.present, np.concatenate(self._peaks, dtype=np.float64),
                             minlength=self.windows)
        return bounds * _MARGIN

    def keep(self, bounds: np.ndarray, theta: float) -> None:
        """Only the pairs of windows whose bound still reaches theta (not scored)."""
        held = bounds[self.present] >= theta
        self.present, self.begins, self.ends, self.owner = (
            a[held] for a in (self.present, self.begins, self.ends, self.owner))

    def score(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The fragments of the ``chosen`` windows (sorted) with a posting, ascending, and
        their exact scores (summed in term order, as every path does)."""
        wanted = np.zeros(self.windows, dtype=bool)
        wanted[chosen] = True
        picked = np.flatnonzero(wanted[self.present])  # pairs, list by list
        if not len(picked):
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
        begins, ends = self.begins[picked], self.ends[picked]
        positions = _ranges(begins, ends)  # within each list, list by list
        cut = np.concatenate(([0], np.cumsum(np.bincount(
            self.owner[picked], weights=ends - begins, minlength=len(self.lists))))).astype(np.intp)
        ordinals, weights = [], []
        impacts = self.ranking.impacts
        for i in np.flatnonzero(cut[1:] > cut[:-1]):
            weight, postings = self.lists[i]
            at = positions[cut[i]:cut[i + 1]]
            ordinals.append(postings.ordinals[at])
            weights.append(weight * postings.impacts(*impacts)[at])
        every = np.concatenate(ordinals, dtype=np.intp)
        self.ranking.stats.scored += len(every)
        # Local positions: the rank of the ordinal's window among the chosen, then the offset.
        rank = np.zeros(self.windows, dtype=np.intp)
        rank[chosen] = np.arange(len(chosen))
        local = (rank[every >> SHIFT] << SHIFT) | (every & _MASK)
        sums = np.bincount(local, weights=np.concatenate(weights, dtype=np.float64),
                           minlength=len(chosen) << SHIFT)
        found = np.flatnonzero(sums)
        return (chosen[found >> SHIFT] << SHIFT) | (found & _MASK), sums[found]


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenated aranges [start, end) (one per window), vectorised."""
    lengths = (ends - starts).astype(np.intp)
    total = int(lengths.sum())
    offsets = np.repeat(starts.astype(np.intp) - (np.cumsum(lengths) - lengths), lengths)
    return offsets + np.arange(total)
