"""similar with every list read at once: the seed's neighbours' lists (hubs included),
packed (migration 047, ``packed``), tallied in numpy.

Each candidate's shared count with the seed is its number of occurrences in those
lists, exactly: a candidate is in z's list iff it points at z. With its degree (the
packed degree blocks) that is its exact score; Adamic-Adar needs no degree. So no
bound is needed: candidates are scored best first by ``walks``' own scorer (their
profiles, as any other candidate: the same scores and evidence) until the next one's
score is below the k-th best. The answer is exact and certified, every hub's list
having been read (``hub_edges_read`` says how many edges that was).

Used only where a stored degree is a candidate's neighbour count (one edge type and
direction, no neighbour_type), when the pipeline's packed lists are current in the
search's snapshot and the lists add up to no more than ``hub_budget`` edges; else
``walks`` reads rows in rounds (``hubs``). A packed list or degree that disagrees with
the rows (it cannot, by construction) sends the search to the rounds too.
"""

from __future__ import annotations

import math

import numpy as np

from .hubs import SLACK, HubSearch


def similar(adj, q, scorer, mine: set[int], degree: dict[int, int], hubs: dict[int, int],
            budget: int) -> HubSearch | None:
    """Score ``q``'s best candidates into ``scorer`` (``walks._Scorer``) from the tally of
    every list; the search's record, or None when the packed lists cannot answer."""
    back = {"out": "in", "in": "out"}[q.direction]
    lists = adj.full_lists(sorted(mine), back, q.types[0], degree)
    if any(len(lists.get(z, ())) != degree.get(z, 0) for z in mine):
        return None
    scorer.zdeg.update({z: len(lists.get(z, ())) for z in mine})
    found = [z for z in sorted(lists) if len(lists[z])]
    every = np.concatenate([lists[z] for z in found]) if found else np.zeros(0, dtype=np.int64)
    weights = None
    if q.measure == "adamic-adar":
        weights = np.repeat([_weight(len(lists[z])) for z in found], [len(lists[z]) for z in found])
    candidates, shared, summed = _tally(every, weights)
    if q.measure == "adamic-adar":
        score = summed
    else:
        degrees = adj.block_degrees(candidates, q.direction, q.types[0])
        if (degrees < shared).any():
            return None
        score = (shared / (len(mine) + degrees - shared) if q.measure == "jaccard"
                 else shared / np.sqrt(len(mine) * degrees.astype(np.float64)))
    keep = candidates != q.seed  # never a candidate of its own
    candidates, shared, score = candidates[keep], shared[keep], score[keep]
    search = HubSearch(sorted(hubs, key=lambda z: (hubs[z], z)), budget, hubs)
    search.verified = _best_first(scorer, candidates, score, shared, q.want)
    if search.verified is None:
        return None
    search.read, search.rounds, search.certified, search.bound = len(search.order), 1, True, 0.0
    search.hub_edges_read = sum(hubs.values())
    search.edges_read = len(every) + sum(s["degree"] for s in scorer.scored.values())
    search.threshold, search.packed = scorer.threshold(), True
    search.tallied = len(candidates)
    return search


def _weight(degree: int) -> float:
    return 1.0 / math.log(degree) if degree > 1 else 0.0


def _tally(every: np.ndarray, weights: np.ndarray | None):
    """The distinct ids of ``every`` (sorted), how often each occurs, and the sum of its
    ``weights`` (None: not asked)."""
    if not len(every):
        return every, every, None if weights is None else np.zeros(0)
    low, high = int(every.min()), int(every.max())
    if high - low > 8 * len(every) + (1 << 20):  # ids far apart: sort rather than count
        ids, where = np.unique(every, return_inverse=True)
        return (ids, np.bincount(where, minlength=len(ids)),
                None if weights is None else np.bincount(where, weights=weights, minlength=len(ids)))
    counts = np.bincount(every - low, minlength=high - low + 1)
    at = np.flatnonzero(counts)
    summed = None if weights is None else np.bincount(every - low, weights=weights)[at]
    return at + low, counts[at], summed


def _best_first(scorer, candidates, score, shared, want: int) -> int | None:
    """Verify candidates best first (score, then id), the best 4k, then twice as many
    each time, until the next one's score is below the k-th best verified (None: a
    profile disagreed with the tally)."""
    verified, end, size = 0, 0, max(4 * want, 64)
    while end < len(candidates):
        end = min(len(candidates), end + size)
        size *= 2
        top = np.argpartition(-score, end - 1)[:end] if end < len(candidates) else np.arange(end)
        verified += scorer.verify(set(candidates[top].tolist()))
        for c, count in zip(candidates[top].tolist(), shared[top].tolist()):
            if c in scorer.scored and len(scorer.scored[c]["shared"]) != count:
                return None
        t = scorer.threshold()
        if t is not None and (end == len(candidates)
                              or -np.partition(-score, end)[end] < t * (1 - SLACK)):
            break
    return verified
