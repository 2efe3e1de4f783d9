"""The graph questions, answered the same way over either engine's adjacency.

An ``Adjacency`` answers a few batched lookups over a pipeline's edges (pgbraid's own SQL
in ``native``, Cypher over an Apache AGE mirror in ``age``); ``similar`` and
``neighbours`` here turn them into entities, so both engines give the same
entities, scores, evidence and trace by construction.

similar (Jaccard, cosine, Adamic-Adar over shared neighbours):
  1. N(s), the seed's neighbours (of ``neighbour_type`` when given);
  2. each neighbour's degree (precomputed: pgbraid.vertex_degrees, migration 022): a
     neighbour with more than ``cap`` edges is a *hub*;
  3. candidates through non-hubs: whoever points at a non-hub neighbour (of
     ``candidate_type``), each scored exactly from its own neighbours, hubs included;
  4. candidates sharing *only hubs* with the seed: ``hubs.py`` reads the hubs' lists
     smallest first, just far enough to prove that no unread one can enter the top
     k (the answer is then *certified exact*), within a budget of edges read.
  Where the engine keeps packed lists (native, migration 047) and a stored degree is a
  neighbour count, 3 and 4 are one step instead: every list read at once and tallied
  (``tally.py``), each candidate's shared count exact without a bound.
  Tested against a plain-Python reference that follows every hub: ``reference.py``.

neighbours (a walk of ``hops`` levels):
  breadth first, one lookup per level, each vertex expanded once through its
  ``cap`` heaviest edges (weight desc, then neighbour id), each vertex kept once
  with its lexicographically smallest shortest path: what a recursive CTE over
  all simple paths would give, without carrying every path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from . import tally
from .hubs import SLACK, Ask, Bound, HubSearch, Probed, passes

Lists = dict[int, set[int]]


class Adjacency(Protocol):
    def lists(self, ids: list[int], direction: str, types: list[str],
              of_type: str | None = None) -> Lists:
        """Each id's neighbours (only those of vertex type ``of_type`` when given)."""

    def profiles(self, ids: list[int], direction: str, types: list[str], of_type: str | None,
                 among: set[int]) -> dict[int, tuple[int, set[int]]]:
        """Each id's number of neighbours (of ``of_type``) and those of them in ``among``."""

    def degrees(self, ids: list[int], direction: str, types: list[str]) -> dict[int, int]:
        """Each id's edges along ``direction`` (of these types; "both": in and out)."""

    def counts(self, ids: list[int], direction: str, types: list[str]) -> dict[int, int]:
        """Each id's distinct neighbours along ``direction`` (reads every edge)."""

    def tally(self, hubs: list[int], direction: str, types: list[str], unread: int,
              need: tuple[list[int], int], afford: int,
              done: set[int] = frozenset()) -> tuple[dict[int, tuple], int | None]:
        """The vertices (not in ``done``) with some of ``hubs`` among their neighbours
        along ``direction``: c -> (how many of them, a; c's degree, D; None), kept when
        ``hubs.passes``, and the sum of their degrees (the edges scoring them reads).
        Nothing is kept (cost None) when the degrees add up to more than ``afford``."""

    def probe(self, ask: Ask, direction: str, types: list[str]) -> Probed:
        """``tally``'s kept candidates probed (only when D is c's neighbour count):
        ``hubs.Ask`` says which, ``hubs.Probed`` what comes back."""

    def heaviest(self, ids: list[int], direction: str, types: list[str],
                 cap: int) -> dict[int, list[tuple[int, str]]]:
        """Each id's cap + 1 heaviest edges as (neighbour, edge type), weight desc, id asc."""

    def types_of(self, ids: list[int]) -> dict[int, str]:
        """Each vertex's type."""


def heaviest_first(rows) -> dict[int, list[tuple[int, str]]]:
    """(vertex, neighbour, edge type, weight) rows -> each vertex's edges, heaviest first
    (then by neighbour id and type: the order both engines follow)."""
    found: dict[int, list[tuple[float, int, str]]] = {}
    for v, nxt, kind, weight in rows:
        found.setdefault(v, []).append((-weight, nxt, kind))
    return {v: [(n, k) for _, n, k in sorted(edges)] for v, edges in found.items()}


REVERSE = {"out": "in", "in": "out", "both": "both"}
QUOTA = 256  # candidates probed most promising first when a round cannot afford them all


@dataclass
class Question:
    """One similar question: the seed, what is followed and how it is scored."""

    seed: int
    types: list[str]
    direction: str
    neighbour_type: str | None
    candidate_type: str | None   # None: every vertex is of the seed's type (no lookup)
    measure: str
    want: int


def similar(adj: Adjacency, q: Question, *, cap: int,
            budget: int) -> tuple[list[dict], dict[int, int], HubSearch | None]:
    """Scored candidates (id, score, shared ids, degree, seed degree), the hubs (id ->
    degree) and how the candidates sharing only hubs were handled."""
    back = REVERSE[q.direction]
    mine = adj.lists([q.seed], q.direction, q.types, q.neighbour_type).get(q.seed, set())
    degree = adj.degrees(sorted(mine), back, q.types)
    hubs = {z: degree[z] for z in mine if degree.get(z, 0) > cap}
    if hubs and _packed(adj, q, mine, degree, budget):
        scorer = _Scorer(adj, q, mine, {})
        search = tally.similar(adj, q, scorer, mine, degree, hubs, budget)
        if search is not None:
            return list(scorer.scored.values()), hubs, search
    followed = sorted(mine - hubs.keys())
    pointing = adj.lists(followed, back, q.types) if followed else {}
    zdeg = {z: len(pointing.get(z, ())) for z in followed}
    if q.measure == "adamic-adar" and hubs:  # a hub's edges are its neighbours with one type
        one = len(q.types) == 1 and q.direction != "both"
        zdeg.update(hubs if one else adj.counts(sorted(hubs), back, q.types))
    scorer = _Scorer(adj, q, mine, zdeg)
    scorer.verify({c for z in followed for c in pointing.get(z, ())})
    search = _hub_rounds(adj, q, scorer, hubs, zdeg, budget) if hubs else None
    return list(scorer.scored.values()), hubs, search


def _packed(adj: Adjacency, q: Question, mine: set[int], degree: dict[int, int],
            budget: int) -> bool:
    """Whether ``tally`` can answer: packed lists current in this snapshot, a stored
    degree a neighbour count, and every list within the budget."""
    return (getattr(adj, "packed", False) and len(q.types) == 1 and q.direction != "both"
            and q.neighbour_type is None and sum(degree.get(z, 0) for z in mine) <= budget)


class _Scorer:
    """Exact scores of candidates, each candidate's neighbours read once."""

    def __init__(self, adj: Adjacency, q: Question, mine: set[int], zdeg: dict[int, int]) -> None:
        self.adj, self.q, self.mine, self.zdeg = adj, q, mine, zdeg
        self.scored: dict[int, dict] = {}
        self.done: set[int] = {q.seed}

    def verify(self, found: set[int]) -> int:
        fresh = found - self.done
        self.done |= fresh
        candidates = _of_type(self.adj, fresh, self.q.candidate_type)
        theirs = (self.adj.profiles(candidates, self.q.direction, self.q.types,
                                    self.q.neighbour_type, self.mine) if candidates else {})
        for c in candidates:
            self._record(c, *theirs.get(c, (0, set())))
        return len(candidates)

    def add(self, found: dict[int, tuple[int, set[int]]]) -> int:
        """Candidates scored by the engine already: (degree, shared) each."""
        fresh = {c: v for c, v in found.items() if c not in self.done}
        self.done |= fresh.keys()
        for c, (degree, shared) in fresh.items():
            self._record(c, degree, shared)
        return len(fresh)

    def _record(self, c: int, degree: int, shared: set[int]) -> None:
        self.scored[c] = {"id": c, "score": self.score(shared, degree), "shared": sorted(shared),
                          "degree": degree, "seed_degree": len(self.mine)}

    def score(self, shared: set[int], degree: int) -> float:
        if self.q.measure == "jaccard":
            return len(shared) / (len(self.mine) + degree - len(shared))
        if self.q.measure == "cosine":
            return len(shared) / math.sqrt(len(self.mine) * degree)
        return sum(1.0 / math.log(self.zdeg[z]) for z in shared if self.zdeg.get(z, 0) > 1)

    def threshold(self) -> float | None:
        """The k-th best score so far (None while fewer than k are scored)."""
        if len(self.scored) < self.q.want:
            return None
        return sorted((s["score"] for s in self.scored.values()), reverse=True)[self.q.want - 1]


def _hub_rounds(adj: Adjacency, q: Question, scorer: _Scorer, hubs: dict[int, int],
                zdeg: dict[int, int], budget: int) -> HubSearch:
    """Read hub lists smallest first until the top k is proven (``hubs`` module): each
    round reads at least as many as the k-th best so far says could certify."""
    order = sorted(hubs, key=lambda z: (hubs[z], z))
    weights = ([1.0 / math.log(zdeg[z]) for z in order] if q.measure == "adamic-adar"
               else [1.0] * len(order))
    exact = len(q.types) == 1 and q.direction != "both" and q.neighbour_type is None
    bound = Bound(q.measure, len(scorer.mine), weights, exact)
    search = HubSearch(order, budget, hubs)
    while True:
        t = scorer.threshold()
        search.threshold, search.bound = t, bound.unseen(search.read)
        if not search.pending and (search.read == len(order) or (
                t is not None and search.bound < t * (1 - SLACK))):
            search.certified = True
            return search
        # one hub more; after the first round, as many as the k-th best says could
        # certify (it only rises: never too many for it); all read and pending: the
        # same lists again, the k-th best having risen
        target = min(len(order), search.read + 1)
        if search.rounds:
            target = max(target, bound.enough(t))
        before = search.read
        afford = search.start(target)
        if afford is None and target > search.read + 1:  # the budget allows fewer, maybe
            afford = search.start(search.read + 1)
        if afford is None and search.pending and target != search.read:
            afford = search.start(search.read)  # no further: score this round's, if allowed
        if afford is None:
            return search
        if not _round(adj, q, scorer, bound, search, afford, exact) and search.read == before:
            search.stopped = "scoring the candidates kept would exceed the budget"
            return search  # the same lists again, and nothing new scored


def _round(adj: Adjacency, q: Question, scorer: _Scorer, bound: Bound, search: HubSearch,
           afford: int, exact: bool) -> bool:
    """One round: tally the hubs read, score what can still enter the top k (False:
    candidates were kept, and none of them scored)."""
    read, unread = search.read, len(search.order) - search.read
    floor = bound.unseen(read)  # enough if this round certifies; else the next re-reads
    need = bound.need(max(scorer.threshold() or 0.0, floor))
    if exact:  # the engine scores what it keeps: a kept candidate's degree is exact
        found = adj.probe(Ask(search.order[:read], unread, need, bound.need(scorer.threshold()),
                              afford, max(QUOTA, 4 * q.want), scorer.done, scorer.mine,
                              q.candidate_type, bound, q.want), q.direction, q.types)
        search.probed(found.edges, found.remaining)
        scorer.done |= found.gone
        search.verified += scorer.add({c: (d, shared) for c, (_, d, shared) in found.kept.items()})
        return not found.remaining or bool(found.kept or found.gone)
    kept, cost = adj.tally(search.order[:read], q.direction, q.types, unread, need, afford,
                           scorer.done)
    search.scored(cost)
    if cost is not None:
        _verify_best_first(scorer, bound, kept, unread, floor, search)
    return cost is not None


def _verify_best_first(scorer: _Scorer, bound: Bound, kept: dict[int, tuple],
                       unread: int, floor: float, search: HubSearch) -> None:
    """Score the tallied candidates most promising first: each batch can raise the k-th
    best score, and what can no longer reach it is dropped unread."""
    def best(c: int) -> float:
        a, degree, _ = kept[c]
        x = min(a + unread, degree)
        return bound.pair(x, degree if bound.exact else x)
    waiting = sorted((c for c in kept if c not in scorer.done), key=lambda c: (-best(c), c))
    size = max(4 * scorer.q.want, 64)
    while waiting:
        search.verified += scorer.verify(set(waiting[:size]))
        need = bound.need(max(scorer.threshold() or 0.0, floor))
        waiting = [c for c in waiting[size:] if passes(*kept[c][:2], unread, *need)]
        size *= 2


def _of_type(adj: Adjacency, found: set[int], candidate_type: str | None) -> list[int]:
    """The vertices of the candidate type (None: the pipeline has no other)."""
    if candidate_type is None:
        return sorted(found)
    kinds = adj.types_of(sorted(found)) if found else {}
    return sorted(c for c in found if kinds.get(c) == candidate_type)


def neighbours(adj: Adjacency, seed: int, types: list[str], direction: str, *, hops: int,
               cap: int) -> tuple[list[dict], list[int]]:
    """Vertices reached (id, depth, path of ids, edge types) and the expanded vertices
    that had more than ``cap`` edges."""
    best: dict[int, tuple[list[int], list[str]]] = {seed: ([seed], [])}
    frontier, reached, capped = [seed], [], []
    for depth in range(1, hops + 1):
        edges = adj.heaviest(frontier, direction, types, cap)
        capped += [v for v in frontier if len(edges.get(v, ())) > cap]
        level: dict[int, tuple[list[int], list[str]]] = {}
        for v in frontier:
            path, kinds = best[v]
            for nxt, kind in edges.get(v, [])[:cap]:
                if nxt in best:
                    continue
                if nxt not in level or path + [nxt] < level[nxt][0]:
                    level[nxt] = (path + [nxt], kinds + [kind])
        best.update(level)
        reached += [{"id": v, "depth": depth, "path": p, "edge_types": k}
                    for v, (p, k) in level.items()]
        frontier = sorted(level)
        if not frontier:
            break
    return reached, capped
