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
_SPARSE = 8  # gather a list's chosen windows by binary search when it has this many more


def top(ranking: "Ranking", width: int) -> np.ndarray:
    """The exact ``width`` best ordinals with a positive score, best first (ties by
    ordinal); fills ``ranking.scores`` for the fragments scored."""
    from .bm25_topk import _best

    windows = (ranking.size >> SHIFT) + 1
    blocks, peaks = [], []
    for term in ranking.terms:
        for postings in term.lists:
            if len(postings):
                present, starts, peak = postings.blocks(*ranking.impacts)
                peaks.append(term.weight * peak)
                blocks.append((term.weight, postings, present, starts))
    # One bincount over every list's windows (a fancy-index add per list cost twice as
    # much); a bound's rounding is covered by the margin.
    bounds = np.bincount(np.concatenate([b[2] for b in blocks], dtype=np.intp),
                         np.concatenate(peaks, dtype=np.float64),
                         minlength=windows) if blocks else np.zeros(windows)
    bounds *= _MARGIN
    remaining = np.flatnonzero(bounds > 0)
    ranking.stats.windows = len(remaining)
    ranking.scores = scores = ranking._fresh()
    scored: list[np.ndarray] = []
    theta, chunk = 0.0, FIRST
    # Rounds: the best-bounded windows left, scored exactly; theta from all scored so far;
    # windows whose bound falls below it dropped. Ends when none is left.
    while len(remaining):
        if len(remaining) > chunk:
            pick = np.argpartition(-bounds[remaining], chunk - 1)[:chunk]
            chosen = np.sort(remaining[pick])
            remaining = np.delete(remaining, pick)
        else:
            chosen, remaining = remaining, remaining[:0]
        ranking.stats.windows_scored += len(chosen)
        scored.append(_score(ranking, blocks, chosen, scores))
        if len(ranking.dead):  # a dead fragment must not raise theta (nor rank)
            scores[ranking.dead] = -np.inf
        theta = max(theta, _theta(scores, scored, width))
        remaining = remaining[bounds[remaining] >= theta]
        chunk *= GROWTH
    everything = np.concatenate(scored) if scored else np.zeros(0, dtype=np.intp)
    ranking.stats.candidates = len(everything)
    return _best(scores, everything[scores[everything] > 0], width)


def _theta(scores: np.ndarray, scored: list[np.ndarray], width: int) -> float:
    """The ``width``-th best score among those scored (0.0 with fewer)."""
    count = sum(len(s) for s in scored)
    if count < width:
        return 0.0
    values = np.concatenate([scores[s] for s in scored])
    return float(np.partition(values, count - width)[count - width])


def _score(ranking: "Ranking", blocks: list, chosen: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Score every fragment of the ``chosen`` windows (sorted) into ``scores``; returns
    the ordinals scored."""
    ordinals, weights = [], []
    wanted = np.zeros((ranking.size >> SHIFT) + 1, dtype=bool)
    wanted[chosen] = True
    chosen32 = chosen.astype(np.int32)
    for weight, postings, present, starts in blocks:
        if len(present) > _SPARSE * len(chosen):
            at = np.searchsorted(present, chosen32)
            at[at == len(present)] = 0
            held = at[present[at] == chosen32]
            if not len(held):
                continue
            index = _ranges(starts[held], starts[held + 1])
        else:  # most of the list's windows may be chosen: one pass over it
            index = np.flatnonzero(wanted[postings.ordinals >> SHIFT])
            if not len(index):
                continue
        ordinals.append(postings.ordinals[index])
        weights.append(weight * postings.impacts(*ranking.impacts)[index])
    if not ordinals:
        return np.zeros(0, dtype=np.intp)
    every = np.concatenate(ordinals, dtype=np.intp)
    ranking.stats.scored += len(every)
    # Local positions: the rank of the ordinal's window among the chosen, then the offset.
    rank = np.zeros(len(wanted), dtype=np.intp)
    rank[chosen] = np.arange(len(chosen))
    local = (rank[every >> SHIFT] << SHIFT) | (every & _MASK)
    sums = np.bincount(local, weights=np.concatenate(weights, dtype=np.float64),
                       minlength=len(chosen) << SHIFT)
    found = np.flatnonzero(sums)
    ordinals_found = (chosen[found >> SHIFT] << SHIFT) | (found & _MASK)
    scores[ordinals_found] = sums[found]
    return ordinals_found


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenated aranges [start, end) (one per window), vectorised."""
    lengths = (ends - starts).astype(np.intp)
    total = int(lengths.sum())
    offsets = np.repeat(starts.astype(np.intp) - (np.cumsum(lengths) - lengths), lengths)
    return offsets + np.arange(total)
