"""Plain-Python references for the graph questions, from an in-memory edge list: what
tests and bench/graph.py compare both engines with. Exact: no hub is skipped.

Edges are (src_type, src, type, dst_type, dst[, weight]); vertices are "type:key".
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable


def _adjacency(edges: Iterable[tuple], types: set[str], direction: str):
    adj: dict[str, dict[str, list[tuple[float, str, str]]]] = defaultdict(lambda: defaultdict(list))
    for edge in edges:
        st, s, t, dt, d = edge[:5]
        if t not in types:
            continue
        weight = float(edge[5]) if len(edge) > 5 else 1.0
        a, b = f"{st}:{s}", f"{dt}:{d}"
        if direction in ("out", "both"):
            adj[a][b].append((weight, t, "out"))
        if direction in ("in", "both"):
            adj[b][a].append((weight, t, "in"))
    return adj


def similar(edges: list[tuple], seed: str, types: set[str], *, direction: str = "out",
            neighbour_type: str | None = None, candidate_type: str | None = None,
            measure: str = "jaccard") -> list[tuple[str, float, list[str]]]:
    """(vertex, score, shared neighbours) best first, over every candidate."""
    forward = _adjacency(edges, types, direction)
    backward = _adjacency(edges, types, {"out": "in", "in": "out", "both": "both"}[direction])
    of_type = (lambda v: v.split(":", 1)[0] == neighbour_type) if neighbour_type else (lambda v: True)
    kind = candidate_type or seed.split(":", 1)[0]
    mine = {n for n in forward[seed] if of_type(n)}
    scores = []
    for c in {c for z in mine for c in backward[z]} - {seed}:
        if c.split(":", 1)[0] != kind:
            continue
        theirs = {n for n in forward[c] if of_type(n)}
        shared = mine & theirs
        value = {"jaccard": lambda: len(shared) / len(mine | theirs),
                 "cosine": lambda: len(shared) / math.sqrt(len(mine) * len(theirs)),
                 "adamic-adar": lambda: sum(1 / math.log(len(backward[z])) for z in shared
                                            if len(backward[z]) > 1)}[measure]()
        scores.append((c, value, sorted(shared)))
    return sorted(scores, key=lambda r: (-r[1], r[0].split(":", 1)[1]))


def neighbours(edges: list[tuple], seed: str, types: set[str], *, direction: str = "both",
               hops: int = 2, cap: int | None = None, ids: dict[str, int]) -> dict[str, int]:
    """Vertex -> hops, walking each vertex's ``cap`` heaviest edges (ties: by the vertex
    ids PostgreSQL gave, ``ids``), breadth first."""
    adj = _adjacency(edges, types, direction)
    seen, frontier = {seed: 0}, [seed]
    for depth in range(1, hops + 1):
        level = []
        for v in frontier:
            ranked = sorted(((-w, ids[n], t, n) for n, found in adj[v].items() for w, t, _ in found))
            for _, _, _, n in ranked[:cap] if cap else ranked:
                if n not in seen:
                    seen[n] = depth
                    level.append(n)
        frontier = level
    seen.pop(seed)
    return seen
