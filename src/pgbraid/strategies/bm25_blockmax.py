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
3. The windows with the highest bounds are scored exactly (their postings
   gathered list by list, summed with one ``np.bincount`` in the term order
   of every other path, so a score never depends on the path); the
   ``width``-th best score among them, theta, is a lower bound of the
   ``width``-th best overall.
4. Every other window whose bound reaches theta is scored too; the rest
   cannot hold a fragment of the top ``width`` (a fragment scoring theta
   exactly is kept: ties are broken by ordinal later). The top ``width`` of
   the scored fragments is the exact top ``width``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # bm25_topk imports this module
    from .bm25_topk import Ranking

SHIFT = 7
WINDOW = 1 << SHIFT  # ordinals per window
_MASK = WINDOW - 1
_MARGIN = 1.0 + 1e-6  # float32 impacts: a bound must hold rounded up
FIRST = 32  # windows scored first, to find theta


def top(ranking: "Ranking", width: int) -> np.ndarray:
    """The exact ``width`` best ordinals with a positive score, best first (ties by
    ordinal); fills ``ranking.scores`` for the fragments scored."""
    from .bm25_topk import _best

    lists = [(term.weight, postings) for term in ranking.terms for postings in term.lists
             if len(postings)]
    windows = (ranking.size >> SHIFT) + 1
    bounds = np.zeros(windows, dtype=np.float64)
    blocks = []
    for weight, postings in lists:
        present, starts, peaks = postings.blocks(*ranking.impacts)
        bounds[present] += weight * peaks
        blocks.append((weight, postings, present, starts))
    bounds *= _MARGIN
    live = np.flatnonzero(bounds > 0)
    ranking.stats.windows = len(live)
    if len(live) <= FIRST:
        first = live
    else:
        first = live[np.argpartition(-bounds[live], FIRST - 1)[:FIRST]]
        first.sort()
    ranking.scores = scores = np.zeros(ranking.size, dtype=np.float64)
    scored = _score(ranking, blocks, first, scores)
    theta = _theta(scores, scored, width)
    rest = live[bounds[live] >= theta]
    rest = rest[~np.isin(rest, first, assume_unique=True)]
    if len(rest):
        scored = np.concatenate([scored, _score(ranking, blocks, rest, scores)])
    ranking.stats.windows_scored = len(first) + len(rest)
    if len(ranking.dead):
        scores[ranking.dead] = -np.inf
    ranking.stats.candidates = len(scored)
    return _best(scores, scored[scores[scored] > 0], width)


def _theta(scores: np.ndarray, scored: np.ndarray, width: int) -> float:
    """The ``width``-th best score among those scored (0.0 with fewer)."""
    if len(scored) < width:
        return 0.0
    return float(np.partition(scores[scored], len(scored) - width)[len(scored) - width])


def _score(ranking: "Ranking", blocks: list, chosen: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Score every fragment of the ``chosen`` windows (sorted) into ``scores``; returns
    the ordinals scored."""
    ordinals, weights = [], []
    chosen = chosen.astype(np.int32)
    for weight, postings, present, starts in blocks:
        at = np.searchsorted(present, chosen)
        at[at == len(present)] = 0
        held = at[present[at] == chosen]
        if not len(held):
            continue
        index = _ranges(starts[held], starts[held + 1])
        ordinals.append(postings.ordinals[index])
        weights.append(weight * postings.impacts(*ranking.impacts)[index])
    if not ordinals:
        return np.zeros(0, dtype=np.int64)
    every = np.concatenate(ordinals, dtype=np.intp)
    ranking.stats.scored += len(every)
    # Local positions: the rank of the ordinal's window among the chosen, then the offset.
    rank = np.zeros((ranking.size >> SHIFT) + 1, dtype=np.intp)
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
    lengths = ends - starts
    total = int(lengths.sum())
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return offsets + np.arange(total)
