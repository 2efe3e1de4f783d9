"""Exact BM25 top-k by MaxScore with a sampled threshold, sparse (the default at scale).

MaxScore (Turtle & Flood, 1995; Lucene's ``MaxScoreBulkScorer``) splits a
query's terms, taken in decreasing order of their bound ``weight * max
impact``, into *essential* ones and a tail whose bounds sum to less than
theta, a lower bound of the ``width``-th best score: a fragment that holds
none of the essential terms scores at most that sum, so it cannot reach the
top ``width``, and the tail's lists (the common terms: most of the postings)
are only looked up for the candidates the essential lists produce. On the
million bench's queries with the final theta known, the essential lists
hold a median 6 % of a SciFact query's postings and 3 % of a 30-token code
chunk's.

Everything hinges on theta being close to the final one before the
essential lists are chosen, so it is taken from *exact* scores:

1. a sample of fragments (each list's ``SAMPLE`` highest impacts, memoised
   with the impacts: bm25_postings) is scored in full by looking every list
   up (binary search: lists are sorted by ordinal); the ``width``-th best of
   those scores is a lower bound of the ``width``-th best overall;
2. the essential terms are the shortest prefix whose remaining bounds sum
   below theta; their postings are summed per fragment (one ``bincount``
   over the candidates' local positions, in term order);
3. for each tail term in turn, theta rises to the ``width``-th best partial
   score (partial scores only grow), candidates that cannot reach it with
   the bounds left are dropped, and the term's lists are looked up for the
   rest.

The candidates' scores are then complete and the top ``width`` among them is
the exact top ``width`` (a fragment scoring theta or more is never dropped:
ties are broken by ordinal later). Every fragment's score is summed in the
term order of every other path (float32 impacts times the weight, added in
float64), so it has the same bits whichever path computed it. When the
sample cannot give a threshold (fewer than ``width`` fragments) every term
is essential and the result is that of scoring every posting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # bm25_topk imports this module
    from .bm25_topk import Ranking

SAMPLE = 16  # each list's highest impacts scored in full for the first theta
PREFIX = 4096  # and the best of the rarest terms' first this many postings
DENSE = 2  # sum the essential postings into a dense array from size / DENSE of them


def top(ranking: "Ranking", width: int) -> np.ndarray:
    """The exact ``width`` best ordinals with a positive score, best first (ties by
    ordinal); the candidates' scores go to ``ranking`` (sparse)."""
    from .bm25_topk import _best_sparse

    terms, left = ranking.terms, ranking._left
    theta = _sampled(ranking, width)
    essential = next((i for i in range(len(terms) + 1) if left[i] < theta), len(terms))
    candidates, partial = _essential(ranking, essential)
    ranking.stats.candidates = len(candidates)
    if len(candidates) > 2 * width and essential < len(terms):  # the best so far, in full
        best = np.sort(np.argpartition(partial, len(partial) - 2 * width)[-2 * width:])
        theta = max(theta, _kth(ranking, candidates[best], partial[best], essential, width))
    for i in range(essential, len(terms)):
        if len(candidates) > width:  # the partial scores raise theta
            theta = max(theta, float(np.partition(partial, len(partial) - width)[-width]))
            keep = partial >= theta - left[i]
            candidates, partial = candidates[keep], partial[keep]
        for postings in terms[i].lists:
            at, held = _lookup(postings.ordinals, candidates)
            partial[held] += ranking._weights(terms[i], postings, at[held])
    ranking._sparse = (candidates, partial, True)  # dense only if asked (Ranking.scores)
    return _best_sparse(candidates, partial, width)


def _sampled(ranking: "Ranking", width: int) -> float:
    """The ``width``-th best exact score among the sample (0.0 with fewer)."""
    picks = [p.ordinals[p.leaders(*ranking.impacts, SAMPLE)]
             for t in ranking.terms for p in t.lists if len(p)]
    if not picks:
        return 0.0
    # and the fragments best scored by the rarest terms (the likeliest leaders)
    rarest, held = 0, 0
    while rarest < len(ranking.terms):
        held += sum(len(p) for p in ranking.terms[rarest].lists)
        if held > PREFIX:
            break
        rarest += 1
    candidates, partial = _essential(ranking, rarest)
    if len(candidates) > 4 * width:
        candidates = candidates[np.argpartition(partial, len(partial) - 4 * width)[-4 * width:]]
    sample = _live(ranking, np.unique(np.concatenate([*picks, candidates])))
    if len(sample) < width:
        return 0.0
    return _kth(ranking, sample, np.zeros(len(sample), dtype=np.float64), 0, width)


def _kth(ranking: "Ranking", ordinals: np.ndarray, partial: np.ndarray, done: int,
         width: int) -> float:
    """The ``width``-th best exact score of the (sorted) ordinals, whose sums over the
    first ``done`` terms are ``partial``: the other terms' lists looked up."""
    exact = partial.copy()
    for term in ranking.terms[done:]:
        for postings in term.lists:
            at, held = _lookup(postings.ordinals, ordinals)
            exact[held] += ranking._weights(term, postings, at[held])
    return float(np.partition(exact, len(exact) - width)[-width])


def _essential(ranking: "Ranking", count: int) -> tuple[np.ndarray, np.ndarray]:
    """The live fragments holding one of the first ``count`` terms (sorted) and the sum
    of those terms' weights for each, in term order."""
    lists = [(t, p) for t in ranking.terms[:count] for p in t.lists if len(p)]
    if not lists:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
    weights = np.concatenate([ranking._weights(t, p) for t, p in lists], dtype=np.float64)
    ranking.stats.scored += len(weights)
    if len(weights) * DENSE >= ranking.size:  # one pass over every ordinal beats sorting
        ordinals = np.concatenate([p.ordinals for _, p in lists], dtype=np.intp)
        sums = np.bincount(ordinals, weights=weights, minlength=ranking.size)
        candidates = np.flatnonzero(sums).astype(np.int32)
        partial = sums[candidates]
    else:  # the lists are sorted runs: a stable sort merges them, keeping the term order
        ordinals = np.concatenate([p.ordinals for _, p in lists])
        order = np.argsort(ordinals, kind="stable")
        ordinals = ordinals[order]
        first = np.empty(len(ordinals), dtype=bool)
        first[0] = True
        np.not_equal(ordinals[1:], ordinals[:-1], out=first[1:])
        local = np.cumsum(first) - 1
        candidates = ordinals[first]
        partial = np.bincount(local, weights=weights[order], minlength=len(candidates))
    live = _live(ranking, candidates)
    if len(live) < len(candidates):
        partial = partial[np.isin(candidates, live, assume_unique=True)]
    return live, partial


def _live(ranking: "Ranking", ordinals: np.ndarray) -> np.ndarray:
    """The ordinals (sorted) less the dead."""
    if not len(ranking.dead) or not len(ordinals):
        return ordinals
    return ordinals[~np.isin(ordinals, ranking.dead)]


def _lookup(ordinals: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each wanted ordinal (sorted) is in a sorted list, and which are there."""
    if not len(ordinals):
        return np.zeros(len(wanted), dtype=np.intp), np.zeros(len(wanted), dtype=bool)
    at = np.searchsorted(ordinals, wanted)
    at[at == len(ordinals)] = 0
    return at, ordinals[at] == wanted
