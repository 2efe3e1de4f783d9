"""Packed neighbour lists and degrees (migration 047): a hub's 100k neighbours as a few
values, read with numpy, instead of 100k rows through psycopg.

Both are cut by vertex id into spans of ``SPAN`` ids, each id stored as its offset in
the span (big-endian int2): a list of a vertex with ``PACK_MIN`` or more neighbours
along one type and direction is a row per span its neighbours fall in (the offsets, in
no particular order); every vertex's edge count per type and direction (vertex_degrees)
is a row per span of vertices (offsets, and the counts as int4).

Writes: ``lock`` at the start of every pgbraid graph write (the pipeline's
graph_versions row, which the write's triggers would lock anyway: graph writers of one
pipeline are serial), then ``repack`` for the vertices the write touched, in the same
transaction: after a few edges, the spans they fall in are patched (and checked against
vertex_degrees: a list whose length disagrees is rebuilt); after more, the touched
lists are rebuilt from the rows of edges, which stay the truth; the degree spans are
rebuilt from vertex_degrees; packed_version is set to the graph version. If it lagged
when the write began (SQL of your own wrote the graph since the last repack), the whole
pipeline is repacked instead.

Reads (native.py): only when packed_version equals version in the search's snapshot;
lists of fewer than ``PACK_MIN`` neighbours have no packed row and are read as rows.
"""

from __future__ import annotations

import numpy as np
import psycopg
from psycopg import sql

PACK_MIN = 64        # neighbours: a list this long or longer is packed (047's literal too)
SPAN = 4_096         # vertex ids per row of a list or of the degrees (047's literal too)
PATCH_MAX = 10_000   # edges written: up to this many, a packed list is patched, not rebuilt

_LOCK = ("SELECT version, packed_version FROM pgbraid.graph_versions WHERE pipeline_id = %s"
         " FOR UPDATE")
_KEYS = "unnest(%(v)s::bigint[], %(t)s::text[], %(o)s::bool[])"

# The lists (vertex, type, direction) in %(v)s, %(t)s, %(o)s, rebuilt from the edges
# (dropped first: ON CONFLICT only so that Citus sends no COPY, refused under row-level
# security, for an INSERT ... SELECT; the same below).
_BUILD = f"""
WITH big AS (SELECT k.vertex, k.type, k.outgoing FROM {_KEYS} k(vertex, type, outgoing))
INSERT INTO pgbraid.neighbour_lists (pipeline_id, vertex, type, outgoing, span, members)
SELECT %(p)s, x.vertex, x.type, x.outgoing, x.n / %(size)s,
       string_agg(int2send((x.n %% %(size)s)::int2), ''::bytea)
FROM (SELECT b.vertex, b.type, b.outgoing, e.dst AS n FROM big b JOIN pgbraid.edges e
        ON e.pipeline_id = %(p)s AND e.src = b.vertex AND e.type = b.type WHERE b.outgoing
      UNION ALL
      SELECT b.vertex, b.type, b.outgoing, e.src FROM big b JOIN pgbraid.edges e
        ON e.pipeline_id = %(p)s AND e.dst = b.vertex AND e.type = b.type WHERE NOT b.outgoing) x
GROUP BY x.vertex, x.type, x.outgoing, x.n / %(size)s
ON CONFLICT (pipeline_id, vertex, type, outgoing, span) DO UPDATE SET members = EXCLUDED.members
"""
_BIG = ("SELECT vertex, type, outgoing, edges FROM pgbraid.vertex_degrees WHERE pipeline_id = %(p)s"
        " AND (%(ids)s::bigint[] IS NULL OR vertex = ANY(%(ids)s)) AND edges >= %(least)s")
# length() of an uncompressed out-of-line value reads no more than its pointer
_SIZES = ("SELECT vertex, type, outgoing, sum(length(members)) / 2 FROM pgbraid.neighbour_lists"
          " WHERE pipeline_id = %(p)s AND vertex = ANY(%(ids)s) GROUP BY vertex, type, outgoing")
_SPANS = (f"SELECT n.vertex, n.type, n.outgoing, n.span, n.members FROM {_KEYS}"
          " k(v, t, o) JOIN pgbraid.neighbour_lists n ON n.pipeline_id = %(p)s AND n.vertex = k.v"
          " AND n.type = k.t AND n.outgoing = k.o WHERE n.span = ANY(%(spans)s)")
# Every row of the lists in %(v)s, %(t)s, %(o)s (those of every vertex of %(ids)s if %(all)s)
_DROP = ("DELETE FROM pgbraid.neighbour_lists n WHERE n.pipeline_id = %(p)s AND (%(ids)s::bigint[]"
         " IS NULL OR (%(all)s AND n.vertex = ANY(%(ids)s)) OR EXISTS (SELECT 1 FROM"
         f" {_KEYS} k(v, t, o) WHERE (k.v, k.t, k.o) = (n.vertex, n.type, n.outgoing)))")
_DROP_SPANS = ("DELETE FROM pgbraid.neighbour_lists n USING unnest(%(v)s::bigint[], %(t)s::text[],"
               " %(o)s::bool[], %(s)s::bigint[]) k(v, t, o, s) WHERE n.pipeline_id = %(p)s AND"
               " (n.vertex, n.type, n.outgoing, n.span) = (k.v, k.t, k.o, k.s)")
_WRITE_SPANS = ("INSERT INTO pgbraid.neighbour_lists (pipeline_id, vertex, type, outgoing, span,"
                " members) SELECT %(p)s, k.v, k.t, k.o, k.s, k.m FROM unnest(%(v)s::bigint[],"
                " %(t)s::text[], %(o)s::bool[], %(s)s::bigint[], %(m)s::bytea[]) k(v, t, o, s, m)"
                " ON CONFLICT (pipeline_id, vertex, type, outgoing, span) DO UPDATE"
                " SET members = EXCLUDED.members")
_DROP_DEGREES = ("DELETE FROM pgbraid.degree_blocks WHERE pipeline_id = %(p)s"
                 " AND (%(spans)s::bigint[] IS NULL OR block = ANY(%(spans)s))")
_DEGREES = sql.SQL("""
INSERT INTO pgbraid.degree_blocks (pipeline_id, type, outgoing, block, slots, degrees)
SELECT %(p)s, g.type, g.outgoing, g.vertex / %(size)s,
       string_agg(int2send((g.vertex %% %(size)s)::int2), ''::bytea ORDER BY g.vertex),
       string_agg(int4send(least(g.edges, 2147483647)::int4), ''::bytea ORDER BY g.vertex)
FROM {source}
GROUP BY g.type, g.outgoing, g.vertex / %(size)s
ON CONFLICT (pipeline_id, type, outgoing, block) DO UPDATE
SET slots = EXCLUDED.slots, degrees = EXCLUDED.degrees
""")
_ALL_DEGREES = sql.SQL("pgbraid.vertex_degrees g WHERE g.pipeline_id = %(p)s")
_NOW = ("SELECT vertex, type, outgoing, edges FROM pgbraid.vertex_degrees WHERE pipeline_id = %(p)s"
        " AND vertex = ANY(%(ids)s)")
_OLD_DEGREES = ("SELECT type, outgoing, block, slots, degrees FROM pgbraid.degree_blocks"
                " WHERE pipeline_id = %(p)s AND block = ANY(%(spans)s)")
_WRITE_DEGREES = ("INSERT INTO pgbraid.degree_blocks (pipeline_id, type, outgoing, block, slots,"
                  " degrees) SELECT %(p)s, k.t, k.o, k.b, k.s, k.d FROM unnest(%(t)s::text[],"
                  " %(o)s::bool[], %(b)s::bigint[], %(s)s::bytea[], %(d)s::bytea[]) k(t, o, b, s, d)"
                  " ON CONFLICT (pipeline_id, type, outgoing, block) DO UPDATE"
                  " SET slots = EXCLUDED.slots, degrees = EXCLUDED.degrees")
# a range of the primary key per span (OFFSET 0: as a join the planner scanned it all)
_SOME_DEGREES = sql.SQL(
    "unnest(%(spans)s::bigint[]) b(n) CROSS JOIN LATERAL (SELECT * FROM"
    " pgbraid.vertex_degrees d WHERE d.pipeline_id = %(p)s AND d.vertex >= b.n * %(size)s"
    " AND d.vertex < (b.n + 1) * %(size)s OFFSET 0) g")
_STAMP = "UPDATE pgbraid.graph_versions SET packed_version = version WHERE pipeline_id = %s"

Key = tuple[int, str, bool]   # (vertex, edge type, outgoing)
Edge = tuple[int, str, int]   # (src, type, dst)


def lock(conn: psycopg.Connection, pipeline_id: int) -> bool:
    """Take the pipeline's graph lock; whether its packed lists are current (a pipeline
    with no graph yet counts as current: its first load packs what it writes)."""
    row = conn.execute(_LOCK, (pipeline_id,)).fetchone()
    return row is None or row[0] == row[1]


def repack(conn: psycopg.Connection, pipeline_id: int, touched: set[int] | None,
           added: list[Edge] = (), removed: list[Edge] = ()) -> None:
    """After a write of ``added`` and ``removed`` edges (``touched``: their ends; None:
    the whole pipeline), the packed lists and degrees of those vertices, current."""
    ids = None if touched is None else sorted(touched)
    spans = None if ids is None else sorted({v // SPAN for v in ids})
    params = {"p": pipeline_id, "ids": ids, "spans": spans, "least": PACK_MIN, "size": SPAN}
    if ids is None or ids:
        big = {(v, t, o): n for v, t, o, n in conn.execute(_BIG, params)}
        if ids is not None and len(added) + len(removed) <= PATCH_MAX:
            _patch(conn, params, big, _changes(added, removed))
            _patch_degrees(conn, params)
        else:
            conn.execute(_DROP, {**params, "all": True, **_columns([])})
            _build(conn, params, big)
            conn.execute(_DROP_DEGREES, params)
            conn.execute(_DEGREES.format(source=_ALL_DEGREES if ids is None else _SOME_DEGREES),
                         params)
    conn.execute(_STAMP, (pipeline_id,))


def _patch_degrees(conn: psycopg.Connection, params: dict) -> None:
    """The degree spans of the touched vertices, with their counts as they are now (the
    other vertices' counts did not change)."""
    ids = np.array(params["ids"], dtype=np.int64)
    now: dict[tuple[str, bool], list[tuple[int, int]]] = {}
    for v, t, o, n in conn.execute(_NOW, params):
        now.setdefault((t, o), []).append((v, n))
    rows = {(t, o, b): (np.frombuffer(slots, dtype=">i2").astype(np.int64) + b * SPAN,
                        np.frombuffer(counts, dtype=">i4").astype(np.int64))
            for t, o, b, slots, counts in conn.execute(_OLD_DEGREES, params, binary=True)}
    for (t, o), found in now.items():
        for v, n in found:
            rows.setdefault((t, o, v // SPAN), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    fresh = {(t, o): dict(found) for (t, o), found in now.items()}
    written = []
    for (t, o, b), (vertices, counts) in rows.items():
        keep = ~np.isin(vertices, ids)
        mine = {v: n for v, n in fresh.get((t, o), {}).items() if v // SPAN == b}
        vertices = np.concatenate([vertices[keep], np.fromiter(mine, np.int64, len(mine))])
        counts = np.concatenate([counts[keep], np.fromiter(mine.values(), np.int64, len(mine))])
        order = np.argsort(vertices, kind="stable")
        if len(order):
            written.append((t, o, b, (vertices[order] - b * SPAN).astype(">i2").tobytes(),
                            np.minimum(counts[order], 2**31 - 1).astype(">i4").tobytes()))
    conn.execute(_DROP_DEGREES, params)
    if written:
        conn.execute(_WRITE_DEGREES, {"p": params["p"], **dict(zip("tobsd", map(list, zip(*written))))})


def _build(conn: psycopg.Connection, params: dict, keys) -> None:
    keys = list(keys)
    if keys:
        conn.execute(_BUILD, {**params, **_columns(keys)})


def _patch(conn: psycopg.Connection, params: dict, big: dict[Key, int],
           changes: dict[Key, tuple[set[int], set[int]]]) -> None:
    """Patch the spans the written edges fall in, of the lists that exist; rebuild the
    lists that are PACK_MIN long and do not exist, or whose patched length disagrees
    with vertex_degrees; drop those that fell short."""
    sizes = {(v, t, o): n for v, t, o, n in conn.execute(_SIZES, params)}
    gone = [k for k in sizes if k not in big]
    patch = [k for k in sizes if k in big and k in changes]
    rebuild = [k for k in big if k not in sizes]
    spans: dict[tuple, bytes] = {}
    if patch:
        touched = sorted({n // SPAN for k in patch for n in changes[k][0] | changes[k][1]})
        old = {(v, t, o, s): m for v, t, o, s, m in conn.execute(
            _SPANS, {**params, **_columns(patch), "spans": touched}, binary=True)}
        for key in patch:
            new, length = _patched(key, changes[key], old)
            if sizes[key] + length == big[key]:
                spans.update(new)
            else:
                rebuild.append(key)
    conn.execute(_DROP, {**params, "all": False, **_columns(gone + rebuild)})
    if spans:
        keys = list(spans)
        columns = {"v": [k[0] for k in keys], "t": [k[1] for k in keys],
                   "o": [k[2] for k in keys], "s": [k[3] for k in keys]}
        conn.execute(_DROP_SPANS, {**params, **columns})
        full = [i for i, k in enumerate(keys) if spans[k]]
        conn.execute(_WRITE_SPANS, {"p": params["p"], **{c: [v[i] for i in full] for c, v in columns.items()},
                                    "m": [spans[keys[i]] for i in full]})
    _build(conn, params, rebuild)


def _patched(key: Key, change: tuple[set[int], set[int]],
             old: dict[tuple, bytes]) -> tuple[dict[tuple, bytes], int]:
    """The list's spans that the change falls in, patched (b"": now empty), and by how
    many members the list grew."""
    add, gone = change
    new, grown = {}, 0
    for span in sorted({n // SPAN for n in add | gone}):
        members = old.get((*key, span), b"")
        offsets = np.frombuffer(members, dtype=">i2").astype(np.int64)
        out = np.array([n % SPAN for n in gone if n // SPAN == span], dtype=np.int64)
        into = np.array(sorted({n % SPAN for n in add - gone if n // SPAN == span}), dtype=np.int64)
        kept = offsets[~np.isin(offsets, out)] if len(out) else offsets
        merged = np.concatenate([kept, into[~np.isin(into, kept)]])
        new[(*key, span)] = merged.astype(">i2").tobytes()
        grown += len(merged) - len(offsets)
    return new, grown


def _changes(added: list[Edge], removed: list[Edge]) -> dict[Key, tuple[set[int], set[int]]]:
    changes: dict[Key, tuple[set[int], set[int]]] = {}
    for which, edges in ((0, added), (1, removed)):
        for src, etype, dst in edges:
            changes.setdefault((src, etype, True), (set(), set()))[which].add(dst)
            changes.setdefault((dst, etype, False), (set(), set()))[which].add(src)
    return changes


def _columns(keys) -> dict[str, list]:
    keys = list(keys)
    return {"v": [k[0] for k in keys], "t": [k[1] for k in keys], "o": [k[2] for k in keys]}


_READ_LISTS = ("SELECT vertex, span, members FROM pgbraid.neighbour_lists WHERE pipeline_id = %s"
               " AND vertex = ANY(%s) AND type = %s AND outgoing = %s ORDER BY vertex")
_READ_DEGREES = ("SELECT block, slots, degrees FROM pgbraid.degree_blocks WHERE pipeline_id = %s"
                 " AND type = %s AND outgoing = %s AND block = ANY(%s)")


def _decoded(spans: list[int], parts: list[bytes]) -> np.ndarray:
    """Rows of int2 offsets in their spans -> the ids, in row order (one decode)."""
    offsets = np.frombuffer(b"".join(parts), dtype=">i2").astype(np.int64)
    return offsets + np.repeat(np.array(spans, dtype=np.int64) * SPAN,
                               [len(p) // 2 for p in parts])


def lists(conn: psycopg.Connection, pipeline_id: int, ids: list[int], vtype: str,
          outgoing: bool) -> dict[int, np.ndarray]:
    """The packed lists of these vertices that exist: vertex -> neighbour ids (int64)."""
    rows = conn.execute(_READ_LISTS, (pipeline_id, ids, vtype, outgoing), binary=True).fetchall()
    if not rows:
        return {}
    members = _decoded([r[1] for r in rows], [r[2] for r in rows])
    vertices = [r[0] for r in rows]
    sizes: dict[int, int] = {}
    for v, row in zip(vertices, rows):
        sizes[v] = sizes.get(v, 0) + len(row[2]) // 2
    return dict(zip(sizes, np.split(members, np.cumsum(list(sizes.values()))[:-1])))


def degrees(conn: psycopg.Connection, pipeline_id: int, ids: np.ndarray, vtype: str,
            outgoing: bool) -> np.ndarray:
    """Each of ``ids``' (sorted, distinct) edges along one type and direction (0: none)."""
    if not len(ids):
        return np.zeros(0, dtype=np.int64)
    rows = conn.execute(_READ_DEGREES, (pipeline_id, vtype, outgoing,
                                        np.unique(ids // SPAN).tolist()), binary=True).fetchall()
    if not rows:
        return np.zeros(len(ids), dtype=np.int64)
    known = _decoded([r[0] for r in rows], [r[1] for r in rows])
    counts = np.frombuffer(b"".join(r[2] for r in rows), dtype=">i4")
    low, high = int(ids[0]), int(ids[-1])
    if high - low > 8 * len(known) + (1 << 20):  # ids far apart (one identity for every
        order = np.argsort(known, kind="stable")  # pipeline): look them up, no dense range
        known, counts = known[order], counts[order]
        at = np.minimum(np.searchsorted(known, ids), len(known) - 1)
        return np.where(known[at] == ids, counts[at], 0).astype(np.int64)
    dense = np.zeros(high - low + 1, dtype=np.int64)  # the spans cover ids: as dense
    inside = (known >= low) & (known <= high)
    dense[known[inside] - low] = counts[inside]
    return dense[ids - low]
