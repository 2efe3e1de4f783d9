"""Plain-Python references for the graph questions, from an in-memory edge list: what
tests and bench/graph.py compare both engines with. Exact: no hub is skipped.

Edges are (src_type, src, type, dst_type, dst[, weight]); vertices are "type:key".
"""

from __future__ import annotations

import math
from collections import defaultdict

REVERSE = {"out": "in", "in": "out", "both": "both"}


class Reference:
    """One edge list, its adjacency built once per (edge types, direction)."""

    def __init__(self, edges: list[tuple]) -> None:
        self.edges = edges
        self._adjacency: dict[tuple, dict[str, dict[str, list[tuple[float, str]]]]] = {}

    def adjacency(self, types: frozenset[str], direction: str):
        key = (types, direction)
        if key not in self._adjacency:
            adj: dict = defaultdict(lambda: defaultdict(list))
            for edge in self.edges:
                st, s, t, dt, d = edge[:5]
                if t in types:
                    weight = float(edge[5]) if len(edge) > 5 else 1.0
                    if direction in ("out", "both"):
                        adj[f"{st}:{s}"][f"{dt}:{d}"].append((weight, t))
                    if direction in ("in", "both"):
                        adj[f"{dt}:{d}"][f"{st}:{s}"].append((weight, t))
            self._adjacency[key] = adj
        return self._adjacency[key]

    def similar(self, seed: str, types: set[str], *, direction: str = "out",
                neighbour_type: str | None = None, candidate_type: str | None = None,
                measure: str = "jaccard") -> list[tuple[str, float, list[str]]]:
        """(vertex, score, shared neighbours) best first, over every candidate."""
        forward = self.adjacency(frozenset(types), direction)
        backward = self.adjacency(frozenset(types), REVERSE[direction])

        def kept(vertices):
            return {n for n in vertices if neighbour_type is None
                    or n.split(":", 1)[0] == neighbour_type}

        kind = candidate_type or seed.split(":", 1)[0]
        mine = kept(forward.get(seed, ()))
        scores = []
        for c in {c for z in mine for c in backward[z]} - {seed}:
            if c.split(":", 1)[0] != kind:
                continue
            theirs = kept(forward[c])
            shared = mine & theirs
            value = {"jaccard": lambda: len(shared) / len(mine | theirs),
                     "cosine": lambda: len(shared) / math.sqrt(len(mine) * len(theirs)),
                     "adamic-adar": lambda: sum(1 / math.log(len(backward[z])) for z in shared
                                                if len(backward[z]) > 1)}[measure]()
            scores.append((c, value, sorted(shared)))
        return sorted(scores, key=lambda r: (-r[1], r[0].split(":", 1)[1]))

    def neighbours(self, seed: str, types: set[str], *, ids: dict[str, int],
                   direction: str = "both", hops: int = 2, cap: int | None = None) -> dict[str, int]:
        """Vertex -> hops, walking each vertex's ``cap`` heaviest edges (ties: by the
        vertex ids PostgreSQL gave, ``ids``, then edge type), breadth first."""
        adj = self.adjacency(frozenset(types), direction)
        seen, frontier = {seed: 0}, [seed]
        for depth in range(1, hops + 1):
            level = []
            for v in frontier:
                ranked = sorted((-w, ids[n], t, n) for n, found in adj.get(v, {}).items()
                                for w, t in found)
                for _, _, _, n in ranked[:cap] if cap else ranked:
                    if n not in seen:
                        seen[n] = depth
                        level.append(n)
            frontier = level
        seen.pop(seed)
        return seen


def similar(edges: list[tuple], seed: str, types: set[str], **options) -> list[tuple]:
    return Reference(edges).similar(seed, types, **options)


def neighbours(edges: list[tuple], seed: str, types: set[str], **options) -> dict[str, int]:
    return Reference(edges).neighbours(seed, types, **options)
