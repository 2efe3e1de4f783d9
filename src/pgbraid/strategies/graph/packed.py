"""Packed neighbour lists and degrees (migration 047): a hub's 100k neighbours as one
value, read with numpy, instead of 100k rows through psycopg.

Writes: ``lock`` at the start of every pgbraid graph write (the pipeline's
graph_versions row, which the write's triggers would lock anyway: graph writers of one
pipeline are serial), then ``repack`` for the vertices the write touched, in the same
transaction: their lists and degree blocks are rebuilt from the rows of edges and
vertex_degrees, which stay the truth, and packed_version is set to the graph version.
If packed_version lagged when the write began (SQL of your own wrote the graph since
the last repack), the whole pipeline is repacked instead.

Reads (native.py): only when packed_version equals version in the search's snapshot;
lists of fewer than ``PACK_MIN`` neighbours have no packed row and are read as rows.
"""

from __future__ import annotations

import numpy as np
import psycopg

PACK_MIN = 64     # neighbours: a list this long or longer is packed (047's literal too)
BLOCK = 4_096     # vertex ids per degree block (047's literal too)

_LOCK = ("SELECT version, packed_version FROM pgbraid.graph_versions WHERE pipeline_id = %s"
         " FOR UPDATE")

# The big (>= PACK_MIN) lists of the vertices in %(ids)s (NULL: every vertex), rebuilt.
_BIG = """
big AS (SELECT g.vertex, g.type, g.outgoing FROM pgbraid.vertex_degrees g
         WHERE g.pipeline_id = %(p)s AND (%(ids)s::bigint[] IS NULL OR g.vertex = ANY(%(ids)s))
           AND g.edges >= %(least)s)"""
_LISTS = f"""
WITH {_BIG}
INSERT INTO pgbraid.neighbour_lists (pipeline_id, vertex, type, outgoing, base, members)
SELECT %(p)s, x.vertex, x.type, x.outgoing, x.base,
       string_agg(int4send((x.n - x.base)::int4), ''::bytea ORDER BY x.n)
FROM (SELECT y.*, min(y.n) OVER (PARTITION BY y.vertex, y.type, y.outgoing) AS base
        FROM (SELECT b.vertex, b.type, b.outgoing, e.dst AS n FROM big b JOIN pgbraid.edges e
                ON e.pipeline_id = %(p)s AND e.src = b.vertex AND e.type = b.type WHERE b.outgoing
              UNION ALL
              SELECT b.vertex, b.type, b.outgoing, e.src FROM big b JOIN pgbraid.edges e
                ON e.pipeline_id = %(p)s AND e.dst = b.vertex AND e.type = b.type
               WHERE NOT b.outgoing) y) x
GROUP BY x.vertex, x.type, x.outgoing, x.base
HAVING max(x.n) - x.base < 2147483648
"""
_DROP_LISTS = ("DELETE FROM pgbraid.neighbour_lists WHERE pipeline_id = %(p)s"
               " AND (%(ids)s::bigint[] IS NULL OR vertex = ANY(%(ids)s))")
_DROP_BLOCKS = ("DELETE FROM pgbraid.degree_blocks WHERE pipeline_id = %(p)s"
                " AND (%(blocks)s::bigint[] IS NULL OR block = ANY(%(blocks)s))")
_BLOCKS = """
INSERT INTO pgbraid.degree_blocks (pipeline_id, type, outgoing, block, slots, degrees)
SELECT %(p)s, g.type, g.outgoing, g.vertex / %(size)s,
       string_agg(int2send((g.vertex %% %(size)s)::int2), ''::bytea ORDER BY g.vertex),
       string_agg(int4send(least(g.edges, 2147483647)::int4), ''::bytea ORDER BY g.vertex)
FROM pgbraid.vertex_degrees g
WHERE g.pipeline_id = %(p)s AND (%(blocks)s::bigint[] IS NULL OR EXISTS (
      SELECT 1 FROM unnest(%(blocks)s::bigint[]) b(n)
       WHERE g.vertex >= b.n * %(size)s AND g.vertex < (b.n + 1) * %(size)s))
GROUP BY g.type, g.outgoing, g.vertex / %(size)s
"""
_STAMP = "UPDATE pgbraid.graph_versions SET packed_version = version WHERE pipeline_id = %s"


def lock(conn: psycopg.Connection, pipeline_id: int) -> bool:
    """Take the pipeline's graph lock; whether its packed lists are current (a pipeline
    with no graph yet counts as current: its first load packs what it writes)."""
    row = conn.execute(_LOCK, (pipeline_id,)).fetchone()
    return row is None or row[0] == row[1]


def repack(conn: psycopg.Connection, pipeline_id: int, vertices: set[int] | None) -> None:
    """Rebuild the packed lists and degree blocks of ``vertices`` (None: all of them)."""
    ids = None if vertices is None else sorted(vertices)
    blocks = None if ids is None else sorted({v // BLOCK for v in ids})
    params = {"p": pipeline_id, "ids": ids, "blocks": blocks, "least": PACK_MIN, "size": BLOCK}
    if ids is None or ids:
        conn.execute(_DROP_LISTS, params)
        conn.execute(_LISTS, params)
        conn.execute(_DROP_BLOCKS, params)
        conn.execute(_BLOCKS, params)
    conn.execute(_STAMP, (pipeline_id,))


_READ_LISTS = ("SELECT vertex, base, members FROM pgbraid.neighbour_lists WHERE pipeline_id = %s"
               " AND vertex = ANY(%s) AND type = %s AND outgoing = %s")
_READ_BLOCKS = ("SELECT block, slots, degrees FROM pgbraid.degree_blocks WHERE pipeline_id = %s"
                " AND type = %s AND outgoing = %s AND block = ANY(%s)")


def lists(conn: psycopg.Connection, pipeline_id: int, ids: list[int], vtype: str,
          outgoing: bool) -> dict[int, np.ndarray]:
    """The packed lists of these vertices that exist: vertex -> neighbour ids (int64)."""
    rows = conn.execute(_READ_LISTS, (pipeline_id, ids, vtype, outgoing), binary=True)
    return {v: np.frombuffer(members, dtype=">i4").astype(np.int64) + base
            for v, base, members in rows}


def degrees(conn: psycopg.Connection, pipeline_id: int, ids: np.ndarray, vtype: str,
            outgoing: bool) -> np.ndarray:
    """Each of ``ids``' (sorted, distinct) edges along one type and direction (0: none)."""
    if not len(ids):
        return np.zeros(0, dtype=np.int64)
    rows = conn.execute(_READ_BLOCKS, (pipeline_id, vtype, outgoing,
                                       np.unique(ids // BLOCK).tolist()), binary=True).fetchall()
    if not rows:
        return np.zeros(len(ids), dtype=np.int64)
    known = np.concatenate([np.frombuffer(slots, dtype=">i2").astype(np.int64) + block * BLOCK
                            for block, slots, _ in rows])
    counts = np.concatenate([np.frombuffer(c, dtype=">i4") for _, _, c in rows])
    low, high = int(ids[0]), int(ids[-1])
    dense = np.zeros(high - low + 1, dtype=np.int64)  # the blocks span ids: as dense
    inside = (known >= low) & (known <= high)
    dense[known[inside] - low] = counts[inside]
    return dense[ids - low]
