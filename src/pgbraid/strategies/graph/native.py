"""pgbraid's own engine: the adjacency lookups of ``walks`` as SQL over pgbraid.edges.

Every lookup is one statement over a batch of vertices. Heaviest-first reads and
in-lists are index-only scans of edges_out_heaviest / edges_in_heaviest
(pipeline, end, type, weight desc, other end): a LIMIT per vertex and type stops
the scan early, so a hub's 100k edges cost what its first cap + 1 cost.
"""

from __future__ import annotations

import numpy as np
import psycopg
from psycopg import sql

from . import packed as packing
from .hubs import Ask, Probed, window
from .walks import REVERSE, Lists, heaviest_first

# (vertex, neighbour) along the direction; $out / $in switch the halves on and off.
_HALVES = {
    "out": """SELECT e.src AS v, e.dst AS n FROM pgbraid.edges e
 WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = ANY(%(ids)s) AND e.type = ANY(%(types)s)""",
    "in": """SELECT e.dst AS v, e.src AS n FROM pgbraid.edges e
 WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = ANY(%(ids)s) AND e.type = ANY(%(types)s)"""}
_ENDS = f"{_HALVES['out']}\nUNION ALL\n{_HALVES['in']}"
_LISTS = f"SELECT x.v, x.n FROM ({_ENDS}) x"
_LISTS_OF_TYPE = (f"SELECT x.v, x.n FROM ({_ENDS}) x JOIN pgbraid.vertices nv ON nv.pipeline_id = %(p)s AND nv.id = x.n"
                  " WHERE nv.type = %(nt)s")

# Edges per vertex along the direction, from the precomputed counts (migration 022).
_STORED = """
SELECT g.vertex, sum(g.edges)::bigint FROM pgbraid.vertex_degrees g
 WHERE g.pipeline_id = %(p)s AND g.vertex = ANY(%(ids)s) AND g.type = ANY(%(types)s)
   AND ((%(out)s AND g.outgoing) OR (%(in)s AND NOT g.outgoing))
 GROUP BY g.vertex
"""

# Who points at the hubs (those in %(done)s left out), how many of them (a), and their
# degree (D), kept when least(a + unread, D) >= need[D] (hubs.passes). A candidate's
# degree is one index probe, so it is probed only when a >= %(probe_from)s; below that
# (a = 1: most of a hub's list) its degree must lie in a narrow window, read as a range
# of vertex_degrees_size and hashed instead (one edge type and direction only).
_TALLY = """
WITH gone AS MATERIALIZED (SELECT DISTINCT g.c FROM unnest(%(done)s::bigint[]) g(c)),
     shared AS MATERIALIZED (
    SELECT y.c, y.a FROM (SELECT x.n AS c, count({distinct} x.v)::int AS a FROM ({ends}) x
                           GROUP BY x.n) y
     WHERE NOT EXISTS (SELECT 1 FROM gone WHERE gone.c = y.c)),
     sized AS (
    SELECT g.vertex, g.edges FROM pgbraid.vertex_degrees g
     WHERE %(window)s AND g.pipeline_id = %(p)s AND g.type = %(type)s AND g.outgoing = %(cout)s
       AND g.edges BETWEEN %(low)s AND %(high)s),
     kept AS MATERIALIZED (
    SELECT s.c, s.a, w.edges::int AS d FROM shared s JOIN sized w ON w.vertex = s.c
     WHERE s.a < %(probe_from)s AND least(s.a + %(unread)s, w.edges)
           >= coalesce((%(need)s::int[])[w.edges], %(beyond)s)
    UNION ALL
    SELECT s.c, s.a, d.n FROM shared s CROSS JOIN LATERAL (
        SELECT sum(g.edges)::int AS n FROM pgbraid.vertex_degrees g
         WHERE g.pipeline_id = %(p)s AND g.vertex = s.c AND g.type = ANY(%(types)s)
           AND ((%(cout)s AND g.outgoing) OR (%(cin)s AND NOT g.outgoing))) d
     WHERE s.a >= %(probe_from)s
       AND least(s.a + %(unread)s, d.n) >= coalesce((%(need)s::int[])[d.n], %(beyond)s)),
     cost AS (SELECT coalesce(sum(k.d), 0)::bigint AS edges FROM kept k)
{select}
"""
# The kept candidates (with no more of their edges to read than %(afford)s)
_KEPT = ("SELECT k.c, k.a, k.d, NULL::bigint[], NULL::bigint FROM kept k, cost"
         " WHERE cost.edges <= %(afford)s"
         " UNION ALL SELECT NULL, NULL, NULL, NULL, cost.edges FROM cost")
# ... and, when the stored degree is the candidate's neighbour count (one edge type and
# direction, no neighbour_type), the kept candidates probed: all of them when their
# degrees add up to %(afford)s at most, else the %(quota)s most promising (hubs.Bound.order,
# as long as their degrees add up to %(afford)s). Each probe reads the candidate's
# neighbours among the seed's from its own edges (index-only: the filter is not an index
# condition, which would pick the primary key and visit the heap): its exact score,
# returned when it meets %(keep)s and (Jaccard, cosine) is not below the k-th best of
# the round's own exact scores, else the candidate is gone (as one of another type).
# The last row: how many kept were not probed, the gone, the edges the probes read.
_SCORED = """,
     ranked AS (
    SELECT k.c, k.a, k.d, row_number() OVER w AS rank, sum(k.d) OVER w AS spent FROM (
        SELECT k.*, least(k.a + %(unread)s, k.d) AS x FROM kept k) k
    WINDOW w AS (ORDER BY CASE %(measure)s::text
        WHEN 'jaccard' THEN k.x::float8 / (%(size)s + k.d - k.x)
        WHEN 'cosine' THEN k.x / sqrt(%(size)s::float8 * k.d) ELSE k.x::float8 END DESC, k.c
        ROWS UNBOUNDED PRECEDING)),
     chosen AS MATERIALIZED (
    SELECT y.c, y.a, y.d, %(ct)s::text IS NULL OR EXISTS (
        SELECT 1 FROM pgbraid.vertices v WHERE v.pipeline_id = %(p)s AND v.id = y.c
           AND v.type = %(ct)s) AS ok FROM (
        SELECT k.c, k.a, k.d FROM kept k WHERE (SELECT edges FROM cost) <= %(afford)s
        UNION ALL  -- ranked only when not all of them are affordable
        SELECT r.c, r.a, r.d FROM ranked r WHERE (SELECT edges FROM cost) > %(afford)s
           AND r.rank <= %(quota)s AND r.spent <= %(afford)s) y),
     hits AS (
    SELECT e.src AS c, array_agg(e.dst) FILTER (WHERE e.dst = ANY(%(among)s)) AS shared
      FROM pgbraid.edges e WHERE %(cout)s AND e.pipeline_id = %(p)s AND e.type = %(type)s
       AND e.src = ANY(ARRAY(SELECT ch.c FROM chosen ch WHERE ch.ok)) GROUP BY e.src
    UNION ALL
    SELECT e.dst, array_agg(e.src) FILTER (WHERE e.src = ANY(%(among)s))
      FROM pgbraid.edges e WHERE %(cin)s AND e.pipeline_id = %(p)s AND e.type = %(type)s
       AND e.dst = ANY(ARRAY(SELECT ch.c FROM chosen ch WHERE ch.ok)) GROUP BY e.dst),
     judged AS MATERIALIZED (
    SELECT y.*, y.ok AND least(y.s, y.d) >= coalesce((%(keep)s::int[])[y.d], %(keep_beyond)s)
           AS met, CASE %(measure)s::text WHEN 'jaccard' THEN y.s::float8 / (%(size)s + y.d - y.s)
                    WHEN 'cosine' THEN y.s / sqrt(%(size)s::float8 * y.d) END AS score
      FROM (SELECT ch.*, h.shared, coalesce(cardinality(h.shared), 0) AS s
              FROM chosen ch LEFT JOIN hits h ON h.c = ch.c) y),
     -- the %(want)s-th best of these exact scores: what scores below it never enters the top k
     kth AS (SELECT CASE WHEN count(*) < %(want)s THEN NULL ELSE min(b.score) END AS score
               FROM (SELECT j.score FROM judged j WHERE j.met AND j.score IS NOT NULL
                      ORDER BY j.score DESC LIMIT %(want)s) b),
     sorted AS (SELECT j.*, j.met AND (j.score IS NULL OR kth.score IS NULL
                                       OR j.score >= kth.score) AS sent FROM judged j, kth)
SELECT j.c, j.a, j.d, j.shared, NULL::bigint FROM sorted j WHERE j.sent
UNION ALL
SELECT NULL, (SELECT count(*) FROM kept)::int - count(*)::int, NULL,
       coalesce(array_agg(j.c) FILTER (WHERE NOT j.sent), '{}'), coalesce(sum(j.d), 0)::bigint
  FROM sorted j"""

_DEGREES = f"SELECT x.v, count(DISTINCT x.n) FROM ({_ENDS}) x GROUP BY x.v"
_PROFILES = (f"SELECT x.v, count(DISTINCT x.n), array_agg(DISTINCT x.n) FILTER (WHERE x.n = ANY(%(among)s))"
             f" FROM ({_ENDS}) x GROUP BY x.v")
_PROFILES_OF_TYPE = (f"SELECT x.v, count(DISTINCT x.n), array_agg(DISTINCT x.n) FILTER (WHERE x.n ="
                     f" ANY(%(among)s)) FROM ({_ENDS}) x JOIN pgbraid.vertices nv ON nv.pipeline_id = %(p)s AND nv.id = x.n"
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

    def __init__(self, conn: psycopg.Connection, pipeline_id: int, packed: bool = False) -> None:
        self.conn = conn
        self.pipeline_id = pipeline_id
        self.packed = packed  # the packed lists are current in this snapshot (packed.py)

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

    def degrees(self, ids, direction, types) -> dict[int, int]:
        return dict(self.conn.execute(_STORED, self._params(ids, direction, types)).fetchall())

    def counts(self, ids, direction, types) -> dict[int, int]:
        return dict(self.conn.execute(_DEGREES, self._params(ids, direction, types)).fetchall())

    def _tally(self, hubs, direction, types, unread, need, done, select, extra):
        table, beyond = need
        ends = self._params(hubs, REVERSE[direction], types)
        mine = self._params(hubs, direction, types)
        single = len(types) == 1 and direction != "both"
        sizes = window(table, beyond, unread) if single else None
        low, high = sizes or (1, 0)
        # one half of _ENDS when one direction: the planner then knows how many
        # candidates to expect (through a UNION it guesses 200, and probes each)
        statement = sql.SQL(_TALLY).format(
            ends=sql.SQL(_HALVES[REVERSE[direction]] if single else _ENDS),
            distinct=sql.SQL("" if single else "DISTINCT"), select=sql.SQL(select))
        return self.conn.execute(statement, {
            **ends, "cout": mine["out"], "cin": mine["in"], "type": types[0], "unread": unread,
            "need": table, "beyond": beyond, "window": high >= low, "low": low, "high": high,
            "probe_from": 1 if sizes is None else 2, "done": sorted(done), **extra}).fetchall()

    def tally(self, hubs, direction, types, unread, need, afford, done=()):
        rows = self._tally(hubs, direction, types, unread, need, done, _KEPT, {"afford": afford})
        cost = rows.pop()[4]
        kept = {c: (a, n, None) for c, a, n, _, _ in rows}
        return kept, (cost if cost <= afford else None)

    def probe(self, ask: Ask, direction, types) -> Probed:
        b = ask.bound
        rows = self._tally(ask.hubs, direction, types, ask.unread, ask.need, ask.done, _SCORED, {
            "afford": ask.afford, "quota": ask.quota, "among": sorted(ask.among),
            "ct": ask.of_type, "keep": ask.keep[0], "keep_beyond": ask.keep[1],
            "measure": b.measure, "size": b.size, "want": ask.want})
        _, remaining, _, gone, edges = rows.pop()
        return Probed({c: (a, n, set(shared or ())) for c, a, n, shared, _ in rows},
                      set(gone), edges, remaining)

    def full_lists(self, ids, direction, vtype, degree) -> dict[int, np.ndarray]:
        """Each id's neighbours along one type: packed when it has PACK_MIN or more
        (``degree``: the stored counts), else from rows."""
        big = [v for v in ids if degree.get(v, 0) >= packing.PACK_MIN]
        found = packing.lists(self.conn, self.pipeline_id, big, vtype, direction == "out") if big else {}
        small = [v for v in ids if v not in found and degree.get(v, 0)]
        for v, members in (self.lists(small, direction, [vtype]) if small else {}).items():
            found[v] = np.fromiter(members, dtype=np.int64, count=len(members))
        return found

    def block_degrees(self, ids: np.ndarray, direction, vtype) -> np.ndarray:
        return packing.degrees(self.conn, self.pipeline_id, ids, vtype, direction == "out")

    def heaviest(self, ids, direction, types, cap) -> dict[int, list[tuple[int, str]]]:
        rows = self.conn.execute(_HEAVIEST, {**self._params(ids, direction, types),
                                             "limit": cap + 1}).fetchall()
        return heaviest_first(rows)

    def types_of(self, ids) -> dict[int, str]:
        return dict(self.conn.execute(
            "SELECT id, type FROM pgbraid.vertices WHERE pipeline_id = %s AND id = ANY(%s)",
            (self.pipeline_id, list(ids))).fetchall())
