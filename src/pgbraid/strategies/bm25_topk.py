"""Exact BM25 top-k over in-memory posting lists: every posting, MaxScore, or block-max.

The default, ``auto``, scores every posting with one ``np.bincount`` (~5-10 ns
a posting), finds the contenders among the postings of the terms none of them
can lack (else by a pass over the dense score array), and switches to block-max
(bm25_blockmax: windows of ordinals bounded and skipped wholesale) where that
was measured to pay: from bm25_blockmax.FROM_POSTINGS postings, or for many
terms from fewer (``bm25_blockmax.pays``). ``params.pruning: "maxscore"``
forces MaxScore (bm25_maxscore: essential lists chosen by a threshold taken
from exact scores of a sample, the common terms' lists only looked up for the
candidates): on the million bench's queries it skipped all but ~10 % of a
SciFact query's postings yet was no faster than one bincount over all of
them below ~250k postings, and slower than block-max for the 30-token code
chunks (docs/benchmarks.md), so no default picks it.

Every path gives the same fragments with the same score bits: each fragment's
score is the float32 ``weight * impact`` of its postings added in float64 in
the same term order. When the scope rejects so many of the best that more
are needed, ``Ranking`` scores every posting (``exhaustive``) and continues
from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from . import bm25_blockmax, bm25_maxscore, bm25_scratch
from .bm25_postings import Postings

_MARGIN = 1.0 + 1e-6  # a bound must hold for float32 impacts rounded up
# Contenders are looked up among the essential postings (Ranking._holding) when there are
# fewer than size / GATHER of them, else found by one pass over the dense scores.
GATHER = 8
# Every posting is added into a dense array kept from query to query (bm25_scratch)
# when the query has at least size / SCRATCH_FROM postings, else into np.bincount's
# fresh one (faster for fewer postings: measured at 1M, docs/benchmarks.md).
SCRATCH_FROM = 4
# Into the kept array, one block of 2 ** BLOCK_SHIFT ordinals at a time (bincount's sums
# of a block: 1 MB, in a core's L2 cache) instead of np.add.at over all of it at once
# (random writes over 8 MB at 1M fragments, in the L3 cache other processes share).
BLOCK_SHIFT = 17

@dataclass
class Term:
    name: str
    weight: float
    """qtf * idf."""
    lists: list[Postings]
    bound: float = 0.0


@dataclass
class Pruning:
    """What the pruning did, for the trace."""

    postings: int = 0
    """Postings of the query's terms."""
    scored: int = 0
    """Postings added in full (phase 1, and phase-2 lists short enough to add in full)."""
    candidates: int = 0
    """Fragments left for phase 2."""
    exhaustive: bool = False
    """Every posting was scored (no pruning possible, or the scope needed more)."""
    windows: int = 0
    """Block-max: ordinal windows holding a posting of the query."""
    windows_scored: int = 0
    """Block-max: windows whose bound reached theta (scored in full)."""


class Ranking:
    """The query's terms in bound order, and the scores computed from them."""

    def __init__(self, terms: list[Term], size: int, dead: np.ndarray,
                 impacts: tuple[float, float, float], *, pruning: str = "none") -> None:
        self.impacts = impacts  # (k1, b, avgdl)
        # "none", "maxscore", "blockmax" (bm25_blockmax) or "auto": block-max from
        # bm25_blockmax.FROM_POSTINGS postings, else every posting
        self.pruning = pruning
        for term in terms:
            peak = max((float(p.max_impact(*impacts)) for p in term.lists), default=0.0)
            term.bound = term.weight * peak * _MARGIN
        self.terms = sorted(terms, key=lambda t: (-t.bound, t.name))
        # _left[i]: the bounds of terms i.. summed (0.0 exactly when none is left).
        self._left = [0.0] * (len(self.terms) + 1)
        for i in range(len(self.terms) - 1, -1, -1):
            self._left[i] = self._left[i + 1] + self.terms[i].bound
        self.size = max(size, 1)
        self.dead = dead
        self.stats = Pruning(postings=sum(len(p) for t in terms for p in t.lists))
        self._scores = np.zeros(0)
        self._sparse: tuple[np.ndarray, np.ndarray, bool] | None = None
        """Sparse scores: ordinals, their scores, whether the ordinals ascend."""
        self._ordinals: np.ndarray | None = None
        """Every posting's ordinal, in term order, once every posting is scored by one
        np.bincount (the blocked path, _blocked, keeps none: Ranking._first)."""
        self._held: np.ndarray | None = None
        """The dense array taken from bm25_scratch (given back by ``release``)."""
        self._touched: tuple[np.ndarray, ...] | None = None
        """Where the held array was written, when known (else all of it is zeroed)."""

    @property
    def scores(self) -> np.ndarray:
        """The score of every ordinal scored (0.0 elsewhere, -inf when dead)."""
        if self._sparse is not None:  # a sparse ranking's candidates, made dense when asked
            ordinals, values, _ = self._sparse
            self._sparse, self._scores = None, self._fresh()
            self._scores[ordinals] = values
        return self._scores

    @scores.setter
    def scores(self, scores: np.ndarray) -> None:
        self._sparse, self._scores = None, scores

    def score(self, ordinal: int) -> float:
        """One ordinal's score (sparse rankings need no dense array for it)."""
        if self._sparse is not None:
            ordinals, values, ascending = self._sparse
            if ascending:
                at = int(np.searchsorted(ordinals, ordinal))
                held = at < len(ordinals) and ordinals[at] == ordinal
            else:  # a pass: cheaper for a page of hits than sorting every candidate
                where = np.flatnonzero(ordinals == ordinal)
                held, at = len(where) > 0, int(where[0]) if len(where) else 0
            return float(values[at]) if held else 0.0
        return float(self._scores[ordinal])

    @property
    def blockmax(self) -> bool:
        return self.pruning == "blockmax" or (self.pruning == "auto" and bm25_blockmax.pays(
            self.stats.postings, len(self.terms)))

    def _weights(self, term: Term, postings: Postings, at: np.ndarray | None = None) -> np.ndarray:
        """weight * impact of the list's postings (those ``at`` only, when given): float32,
        the same bits on every path."""
        impacts = postings.impacts(*self.impacts)
        return term.weight * (impacts if at is None else impacts[at])

    def _weighted(self, lists: list[tuple[Term, Postings]], count: int) -> np.ndarray:
        """Every list's weight * impact (float32, as ``_weights``) one after the other in
        float64, each product written in place (no float32 array per list)."""
        weights = np.empty(count, dtype=np.float64)
        at = 0
        for term, postings in lists:
            end = at + len(postings)
            np.multiply(postings.impacts(*self.impacts), np.float32(term.weight),
                        out=weights[at:end], dtype=np.float32, casting="unsafe")
            at = end
        return weights

    def _fresh(self) -> np.ndarray:
        scores = self._take()
        if len(self.dead):
            scores[self.dead] = -np.inf  # never positive, never a candidate
        return scores

    def _take(self) -> np.ndarray:
        """A zeroed dense array of ``size`` (the one held before, if any, given back)."""
        self.release()
        self._held = bm25_scratch.take(self.size)
        return self._held

    def release(self) -> None:
        """Give the dense scores back (bm25_scratch) once nothing reads this ranking's
        scores any more: a later ranking reuses the array instead of mapping 8 MB anew."""
        held, self._held = self._held, None
        if held is not None:
            if self._scores is held:
                self._scores = np.zeros(0)
            bm25_scratch.give_back(held, self._touched)
        self._touched = None

    def top(self, width: int) -> np.ndarray:
        """The exact ``width`` best ordinals with a positive score, best first (ties by ordinal)."""
        if self.blockmax:
            return bm25_blockmax.top(self, width)
        if self.pruning == "maxscore":
            return bm25_maxscore.top(self, width)
        return _best(self.exhaustive(), self._contenders(width), width)

    def exhaustive(self) -> np.ndarray:
        """Every posting scored (the same term order as ``top``, so the same sums)."""
        if not self.stats.exhaustive:
            lists = [(t, p) for t in self.terms for p in t.lists if len(p)]
            if lists:
                count = sum(len(p) for _, p in lists)
                weights = self._weighted(lists, count)
                if count * SCRATCH_FROM >= self.size:
                    # Into an array kept from query to query, block by block: the same
                    # sums as np.bincount's (each ordinal's weights in term order from
                    # 0.0), without its fresh dense array (bm25_scratch), whose cost
                    # is paid back from this many postings (docs/benchmarks.md).
                    scores = self._take()
                    written = _blocked(scores, [p.ordinals for _, p in lists], weights)
                    self._touched = (*written, self.dead)
                else:
                    # In the dtypes bincount works in: converting while concatenating
                    # halves its time (measured: 0.45 -> 0.20 ms for 61k postings).
                    self._ordinals = np.concatenate([p.ordinals for _, p in lists],
                                                    dtype=np.intp)
                    scores = np.bincount(self._ordinals, weights=weights, minlength=self.size)
                self.scores = scores
                if len(self.dead):
                    self.scores[self.dead] = -np.inf
            else:
                self.scores = self._fresh()
                self._touched = (self.dead,)
            self.stats.exhaustive = True
            self.stats.scored = self.stats.postings
        return self.scores

    def _contenders(self, width: int, sample: int = 4096) -> np.ndarray:
        """Distinct ordinals that may be among the ``width`` best, once every posting is scored.

        The width-th best score among a sample of distinct ordinals (the rarest
        terms' postings: the likeliest leaders) is a lower bound of the
        width-th best overall, so only postings scoring at least that much need
        partitioning: a few hundred ordinals instead of every one with a score.
        """
        scores = self.scores
        if self.stats.postings:
            pool = _distinct(self._first(sample))  # lists in bound order: rarest first
            if len(pool) >= width:
                theta = np.partition(scores[pool], len(pool) - width)[len(pool) - width]
                if theta > 0:
                    held = self._first(self._holding(theta))
                    if len(held) * GATHER < self.size:
                        return _distinct(held[scores[held] >= theta])
                    return np.flatnonzero(scores >= theta)
        return np.flatnonzero(scores > 0)

    def _first(self, count: int) -> np.ndarray:
        """The ordinals of the first ``count`` postings in term order (of every posting,
        when ``exhaustive`` concatenated them)."""
        if self._ordinals is not None:
            return self._ordinals[:count]
        parts, held = [], 0
        for term in self.terms:
            for postings in term.lists:
                if held >= count:
                    break
                parts.append(postings.ordinals[:count - held])
                held += len(parts[-1])
        return np.concatenate(parts, dtype=np.intp) if parts else np.zeros(0, dtype=np.intp)

    def _holding(self, theta: float) -> int:
        """How many of the first postings (in term order) hold every fragment that can
        score ``theta``: those of the shortest prefix of terms whose remaining bounds
        sum below it (a fragment without any of these terms scores at most that sum;
        MaxScore's essential lists)."""
        count, i = 0, 0
        while i < len(self.terms) and self._left[i] >= theta:
            count += sum(len(p) for p in self.terms[i].lists)
            i += 1
        return count

    def batches(self, width: int) -> Iterator[np.ndarray]:
        """Ordinals with a positive score, best first, in batches growing eightfold
        (block-max ranks the second batch too: the top 8 * width, less the first)."""
        first = self.top(width)
        if not len(first):
            return
        yield first
        if self.blockmax:
            wider = self.top(8 * width)
            wider = wider[~np.isin(wider, first, assume_unique=True)]
            if not len(wider):
                return
            yield wider
            first, width = np.concatenate([first, wider]), 8 * width
        scores = self.exhaustive()
        remaining = np.flatnonzero(scores > 0)
        remaining = remaining[~np.isin(remaining, first, assume_unique=True)]
        while len(remaining):
            width *= 8
            if len(remaining) > width:  # the width best, ties at the cut by lower ordinal
                values = scores[remaining]
                cut = np.partition(values, len(values) - width)[len(values) - width]
                take = values > cut
                take[np.flatnonzero(values == cut)[:width - int(take.sum())]] = True
                batch, remaining = remaining[take], remaining[~take]  # stays sorted
            else:
                batch, remaining = remaining, remaining[:0]
            yield _ordered(scores, batch)

    def matched(self, ordinals: list[int]) -> list[list[str]]:
        """For each ordinal, the query terms whose postings hold it (by binary search in
        each sorted list: for 10 hits, 2.4x faster than a pass over every posting,
        measured at 1M fragments)."""
        wanted = np.asarray(ordinals, dtype=np.int32)
        lists = [(term.name, p) for term in self.terms for p in term.lists if len(p)]
        held = np.zeros((len(lists), len(wanted)), dtype=bool)
        for row, (_, postings) in enumerate(lists):
            at = np.minimum(np.searchsorted(postings.ordinals, wanted), len(postings) - 1)
            held[row] = postings.ordinals[at] == wanted
        return [sorted({lists[row][0] for row in np.flatnonzero(column)}) for column in held.T]


def _blocked(scores: np.ndarray, lists: list[np.ndarray], weights: np.ndarray) -> list[slice]:
    """Add each list's weights (``weights``: every list's one after the other) into the
    zeroed ``scores`` at its ordinals (each list ascending), one block of ordinals at a
    time: the block's postings of every list in list order, summed by one np.bincount,
    so each ordinal's sum is that of one np.bincount over everything (its weights in
    list order from 0.0), bit for bit. Returns the blocks written."""
    size, step = len(scores), 1 << BLOCK_SHIFT
    edges = np.arange(0, size + step, step)
    cuts = [np.searchsorted(ordinals, edges) for ordinals in lists]
    begins = np.cumsum([0] + [len(o) for o in lists[:-1]])
    written = []
    for block in range(len(edges) - 1):
        held = [(o, begin + cut[block], begin + cut[block + 1], cut[block], cut[block + 1])
                for o, begin, cut in zip(lists, begins, cuts) if cut[block + 1] > cut[block]]
        if not held:
            continue
        low, high = int(edges[block]), min(size, int(edges[block + 1]))
        at = np.concatenate([o[a:b] for o, _, _, a, b in held], dtype=np.intp)
        at -= low
        scores[low:high] = np.bincount(
            at, weights=np.concatenate([weights[a:b] for _, a, b, _, _ in held]),
            minlength=high - low)
        written.append(slice(low, high))
    return written


def _distinct(ordinals: np.ndarray) -> np.ndarray:
    """Sorted distinct ordinals (np.unique hashes: several times slower on these sizes)."""
    ordinals = np.sort(ordinals)
    return ordinals[np.concatenate(([True], ordinals[1:] != ordinals[:-1]))]


def _best(scores: np.ndarray, ordinals: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` best of ordinals, best first; ties at the cut go to the lower ordinal."""
    if len(ordinals) > width:
        cut = np.partition(scores[ordinals], len(ordinals) - width)[len(ordinals) - width]
        ordinals = ordinals[scores[ordinals] >= cut]
    return _ordered(scores, ordinals)[:width]


def _best_sparse(ordinals: np.ndarray, values: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` best of ordinals (distinct) with a positive value, best first; ties
    at the cut go to the lower ordinal."""
    positive = np.flatnonzero(values > 0)
    if len(positive) > width:
        cut = np.partition(values[positive], len(positive) - width)[len(positive) - width]
        positive = positive[values[positive] >= cut]
    return ordinals[positive[np.lexsort((ordinals[positive], -values[positive]))]][:width]


def _ordered(scores: np.ndarray, batch: np.ndarray) -> np.ndarray:
    return batch[np.lexsort((batch, -scores[batch]))]
