"""The graph questions, answered the same way over either engine's adjacency.

An ``Adjacency`` answers four lookups over a pipeline's edges (pgbraid's own SQL
in ``native``, Cypher over an Apache AGE mirror in ``age``); ``similar`` and
``neighbours`` here turn them into entities, so both engines give the same
entities, scores, evidence and trace by construction.

similar (Jaccard, cosine, Adamic-Adar over shared neighbours):
  1. N(s), the seed's neighbours (of ``neighbour_type`` when given);
  2. each neighbour's degree, counted only up to ``cap`` + 1: a neighbour with more
     than ``cap`` edges is a *hub*. Candidates are generated through non-hubs only
     (a hub's edges are not read: at 1M edges one hub has 100k of them, and a
     shared hub is weak evidence, ~1/ln(degree) in Adamic-Adar);
  3. candidates: whoever points at a non-hub neighbour (of ``candidate_type``);
  4. when that gives fewer than k candidates, the hubs' heaviest edges bring more
     (max(k, cap / hubs) of each: a sample of the hubs' neighbours, the trace says so);
  5. each candidate's own neighbours, in full: shared sets, degrees and scores are
     exact, hubs included. Only candidates that share *nothing but hubs* with the
     seed (beyond that sample) are not considered; the trace names the hubs.
  With no hub among N(s) the answer is the exact one (tested against a
  plain-Python reference: ``reference.py``).

neighbours (a walk of ``hops`` levels):
  breadth first, one lookup per level, each vertex expanded once through its
  ``cap`` heaviest edges (weight desc, then neighbour id), each vertex kept once
  with its lexicographically smallest shortest path: what a recursive CTE over
  all simple paths would give, without carrying every path.
"""

from __future__ import annotations

import math
from typing import Protocol

Lists = dict[int, set[int]]


class Adjacency(Protocol):
    def lists(self, ids: list[int], direction: str, types: list[str],
              of_type: str | None = None) -> Lists:
        """Each id's neighbours (only those of vertex type ``of_type`` when given)."""

    def profiles(self, ids: list[int], direction: str, types: list[str], of_type: str | None,
                 among: set[int]) -> dict[int, tuple[int, set[int]]]:
        """Each id's number of neighbours (of ``of_type``) and those of them in ``among``."""

    def counts(self, ids: list[int], direction: str, types: list[str],
               cap: int | None) -> dict[int, int]:
        """Each id's edges along ``direction``, counted up to cap + 1 (None: all, distinct)."""

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


def similar(adj: Adjacency, seed: int, types: list[str], direction: str, *, cap: int, want: int,
            neighbour_type: str | None, candidate_type: str, measure: str) -> tuple[list[dict], dict]:
    """Scored candidates (id, score, shared ids, degree, seed degree) and trace details."""
    mine = adj.lists([seed], direction, types, neighbour_type).get(seed, set())
    degrees = adj.counts(sorted(mine), REVERSE[direction], types, cap)
    hubs = {z: n for z, n in degrees.items() if n > cap}
    followed = sorted(mine - hubs.keys())
    pointing = adj.lists(followed, REVERSE[direction], types) if followed else {}
    candidates = _of_type(adj, {c for z in followed for c in pointing.get(z, ())} - {seed},
                          candidate_type)
    sampled = len(candidates) < want and bool(hubs)
    if sampled:  # too few through non-hubs: a share of cap over the hubs' heaviest edges
        share = max(want, cap // len(hubs)) + 1  # + 1: the seed is one of them
        through = adj.heaviest(sorted(hubs), REVERSE[direction], types, share)
        more = {c for z in hubs for c, _ in through.get(z, [])[:share]} - {seed} - set(candidates)
        candidates = sorted(set(candidates) | set(_of_type(adj, more, candidate_type)))
    theirs = adj.profiles(candidates, direction, types, neighbour_type, mine) if candidates else {}
    zdeg = {z: len(pointing.get(z, ())) for z in followed}
    if measure == "adamic-adar" and hubs:
        zdeg.update(adj.counts(sorted(hubs), REVERSE[direction], types, None))
    scored = []
    for c in candidates:
        degree, shared = theirs.get(c, (0, set()))
        value = {"jaccard": lambda: len(shared) / (len(mine) + degree - len(shared)),
                 "cosine": lambda: len(shared) / math.sqrt(len(mine) * degree),
                 "adamic-adar": lambda: sum(1.0 / math.log(zdeg[z]) for z in shared
                                            if zdeg.get(z, 0) > 1)}[measure]()
        scored.append({"id": c, "score": value, "shared": sorted(shared), "degree": degree,
                       "seed_degree": len(mine)})
    details = {"candidates": len(candidates), "hubs": hubs, "hubs_sampled": sampled}
    return scored, details


def _of_type(adj: Adjacency, found: set[int], candidate_type: str) -> list[int]:
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
