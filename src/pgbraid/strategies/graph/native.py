"""pgbraid's own engine: the adjacency lookups of ``walks`` as SQL over pgbraid.edges.

Every lookup is one statement over a batch of vertices. Heaviest-first reads and
in-lists are index-only scans of edges_out_heaviest / edges_in_heaviest
(pipeline, end, type, weight desc, other end): a LIMIT per vertex and type stops
the scan early, so a hub's 100k edges cost what its first cap + 1 cost.
"""

from __future__ import annotations

import psycopg

from .walks import Lists, heaviest_first

# (vertex, neighbour) along the direction; $out / $in switch the halves on and off.
_ENDS = """
SELECT e.src AS v, e.dst AS n FROM pgbraid.edges e
 WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = ANY(%(ids)s) AND e.type = ANY(%(types)s)
UNION ALL
SELECT e.dst, e.src FROM pgbraid.edges e
 WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = ANY(%(ids)s) AND e.type = ANY(%(types)s)
"""
_LISTS = f"SELECT x.v, x.n FROM ({_ENDS}) x"
_LISTS_OF_TYPE = (f"SELECT x.v, x.n FROM ({_ENDS}) x JOIN pgbraid.vertices nv ON nv.id = x.n"
                  " WHERE nv.type = %(nt)s")

# Edges per vertex up to cap + 1, per type and direction (each an index-only scan).
_COUNTS = """
SELECT f.v, (SELECT count(*) FROM (
    SELECT 1 FROM unnest(%(types)s::text[]) t(type) CROSS JOIN LATERAL (
        SELECT 1 FROM pgbraid.edges e WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = f.v
           AND e.type = t.type LIMIT %(limit)s) a
    UNION ALL
    SELECT 1 FROM unnest(%(types)s::text[]) t(type) CROSS JOIN LATERAL (
        SELECT 1 FROM pgbraid.edges e WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = f.v
           AND e.type = t.type LIMIT %(limit)s) b
    LIMIT %(limit)s) x) AS n
FROM unnest(%(ids)s::bigint[]) f(v)
"""
_DEGREES = f"SELECT x.v, count(DISTINCT x.n) FROM ({_ENDS}) x GROUP BY x.v"
_PROFILES = (f"SELECT x.v, count(DISTINCT x.n), array_agg(DISTINCT x.n) FILTER (WHERE x.n = ANY(%(among)s))"
             f" FROM ({_ENDS}) x GROUP BY x.v")
_PROFILES_OF_TYPE = (f"SELECT x.v, count(DISTINCT x.n), array_agg(DISTINCT x.n) FILTER (WHERE x.n ="
                     f" ANY(%(among)s)) FROM ({_ENDS}) x JOIN pgbraid.vertices nv ON nv.id = x.n"
                     " WHERE nv.type = %(nt)s GROUP BY x.v")

# The cap + 1 heaviest edges of each vertex: per type and direction an ordered,
# limited index scan, then the best cap + 1 of those.
_HEAVIEST = """
SELECT f.v, x.next, x.type, x.weight FROM unnest(%(ids)s::bigint[]) f(v)
CROSS JOIN LATERAL (
    SELECT y.next, y.type, y.weight FROM (
        SELECT a.* FROM unnest(%(types)s::text[]) t(type) CROSS JOIN LATERAL (
            SELECT e.dst AS next, e.type, e.weight FROM pgbraid.edges e
             WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = f.v AND e.type = t.type
             ORDER BY e.weight DESC, e.dst LIMIT %(limit)s) a
        UNION ALL
        SELECT b.* FROM unnest(%(types)s::text[]) t(type) CROSS JOIN LATERAL (
            SELECT e.src AS next, e.type, e.weight FROM pgbraid.edges e
             WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = f.v AND e.type = t.type
             ORDER BY e.weight DESC, e.src LIMIT %(limit)s) b
    ) y ORDER BY y.weight DESC, y.next, y.type LIMIT %(limit)s) x
"""


class Native:
    """The adjacency of one pipeline, read in the search's own session and snapshot."""

    def __init__(self, conn: psycopg.Connection, pipeline_id: int) -> None:
        self.conn = conn
        self.pipeline_id = pipeline_id

    def _params(self, ids: list[int], direction: str, types: list[str]) -> dict:
        return {"p": self.pipeline_id, "ids": list(ids), "types": list(types),
                "out": direction in ("out", "both"), "in": direction in ("in", "both")}

    def lists(self, ids, direction, types, of_type=None) -> Lists:
        params = self._params(ids, direction, types)
        statement = _LISTS if of_type is None else _LISTS_OF_TYPE
        found: Lists = {}
        for v, n in self.conn.execute(statement, {**params, "nt": of_type}):
            found.setdefault(v, set()).add(n)
        return found

    def profiles(self, ids, direction, types, of_type, among) -> dict[int, tuple[int, set[int]]]:
        params = {**self._params(ids, direction, types), "nt": of_type, "among": sorted(among)}
        statement = _PROFILES if of_type is None else _PROFILES_OF_TYPE
        return {v: (n, set(shared or ())) for v, n, shared in self.conn.execute(statement, params)}

    def counts(self, ids, direction, types, cap) -> dict[int, int]:
        params = self._params(ids, direction, types)
        if cap is None:
            return dict(self.conn.execute(_DEGREES, params).fetchall())
        return dict(self.conn.execute(_COUNTS, {**params, "limit": cap + 1}).fetchall())

    def heaviest(self, ids, direction, types, cap) -> dict[int, list[tuple[int, str]]]:
        rows = self.conn.execute(_HEAVIEST, {**self._params(ids, direction, types),
                                             "limit": cap + 1}).fetchall()
        return heaviest_first(rows)

    def types_of(self, ids) -> dict[int, str]:
        return dict(self.conn.execute("SELECT id, type FROM pgbraid.vertices WHERE id = ANY(%s)",
                                      (list(ids),)).fetchall())
