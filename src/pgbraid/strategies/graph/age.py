"""The Apache AGE engine: one AGE graph per pipeline mirroring its vertices and
edges, asked in Cypher. Imported only with PGBRAID_AGE=1 and ``engine: "age"``.

The mirror (graph ``pgbraid_p<pipeline id>``): one vertex label ``entity``
(properties ``vid`` = pgbraid's vertex id, ``type``, ``key``) and one edge label
``link`` (``type``, ``weight``); vertex and edge graphids are derived from
pgbraid's own ids, so loads upsert and deletes find their rows without a lookup.
User data (types, keys, edge types) is never part of a label or of Cypher text:
it travels in properties, and queries take it as agtype parameters only.

Lifecycle:
- ``prepare`` (before the search's read-only snapshot): creates the extension when
  the server has it available, creates the graph (DDL as the login role: a
  graph is a schema), refusing a graph of that name that is not pgbraid's; and
  rebuilds the mirror in the tenant's session when it is behind the pipeline's
  graph version (``pgbraid.graph_versions``), saying so in the trace;
- ``sync_load`` / ``sync_delete`` (store.py, with PGBRAID_AGE=1): the same
  transaction as the load or delete keeps a current mirror current;
- ``adjacency`` (in the snapshot): the lookups ``walks`` needs, as Cypher.

AGE's Cypher needs ``ag_catalog`` on the search_path and its library loaded:
the path is set with ``set_config(..., true)`` (SET LOCAL) around each Cypher
statement and put back right after, so pgbraid's own statements in the same
transaction never run under it; the library loads when the session first casts
to agtype (LOAD would need a superuser).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from itertools import accumulate
from contextlib import contextmanager
from typing import Any, Iterator

import psycopg
from psycopg import sql

from ...errors import Conflict, NotEnabled
from ... import pipelines
from .hubs import Ask, Probed, passes
from .walks import REVERSE, Lists, heaviest_first

EXTENSION = "age"
VERTEX, EDGE = "entity", "link"
NOT_INSTALLED = ("Apache AGE is opted in (PGBRAID_AGE=1) but the age extension is not installed "
                 "on this PostgreSQL server: build it with `pgbraid extension build "
                 "apache-age-PG18-1.8.0.tar.gz` (embedded server) or install it there")
_PATH = "ag_catalog, pg_catalog, public"

_VERTEX_PROPS = ("jsonb_build_object('vid', {v}.id, 'type', {v}.type, 'key', {v}.key)"
                 "::text::ag_catalog.agtype")
_EDGE_PROPS = "jsonb_build_object('type', {e}.type, 'weight', {e}.weight)::text::ag_catalog.agtype"


def graph_name(pipeline_id: int) -> str:
    return f"pgbraid_p{pipeline_id}"


# -- the mirror's lifecycle -----------------------------------------------------------------

def prepare(db, tenant: str, pipeline_name: str) -> dict[str, Any]:
    """Make the pipeline's mirror exist and be current (see the module docstring)."""
    started = time.perf_counter()
    _ensure_extension(db)
    with db.session(tenant) as conn:
        pipeline = pipelines.get(conn, pipeline_name)
        row = _mirror(conn, pipeline.id)
    name = graph_name(pipeline.id)
    if row is None:
        with db.admin() as owner:
            labels = _create_graph(owner, name)
        with db.session(tenant) as conn:
            conn.execute("INSERT INTO pgbraid.age_graphs (pipeline_id, graph, vertex_label,"
                         " edge_label) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                         (pipeline.id, name, *labels))
    note: dict[str, Any] = {"graph": name, "rebuilt": False}
    with db.session(tenant) as conn:
        row = conn.execute("SELECT graph, vertex_label, edge_label, version FROM pgbraid.age_graphs"
                           " WHERE pipeline_id = %s FOR UPDATE", (pipeline.id,)).fetchone()
        current = _version(conn, pipeline.id)
        if row[3] != current:
            note.update(rebuilt=True, reason="the mirror was created just now" if row[3] < 0 else
                        f"the mirror held graph version {row[3]}, the pipeline is at {current} "
                        "(loaded or deleted while PGBRAID_AGE was unset)")
            counts = _rebuild(conn, pipeline.id, row[0], row[1], row[2], current)
    if note["rebuilt"]:
        with db.admin() as owner:  # fresh statistics, or AGE's plans start from every edge
            owner.execute(sql.SQL("ANALYZE {}, {}").format(*_tables(name)))
        note.update(counts, rebuild_ms=round((time.perf_counter() - started) * 1000, 1))
    return note


def _ensure_extension(db) -> None:
    if EXTENSION in db.extensions:
        return
    with db.admin() as owner:
        available = owner.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s",
                                  (EXTENSION,)).fetchone()
        if available is None:
            raise NotEnabled(NOT_INSTALLED, extension=EXTENSION)
        try:
            owner.execute("CREATE EXTENSION IF NOT EXISTS age")
        except psycopg.errors.InsufficientPrivilege:
            raise NotEnabled(f"{NOT_INSTALLED} (available, but this login role may not create "
                             "it)", extension=EXTENSION) from None
        db.extensions = db.extensions | {EXTENSION}


def _create_graph(owner: psycopg.Connection, name: str) -> tuple[int, int]:
    """The graph, its two labels, indexes and grants (as the login role); a graph of
    this name that pgbraid did not register is somebody else's: refused."""
    with owner.transaction():
        taken = owner.execute("SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (name,)).fetchone()
        if taken:
            raise Conflict(f"an Apache AGE graph named {name} already exists and is not "
                           f"pgbraid's: rename or drop it to use engine age on this pipeline",
                           graph=name)
        owner.execute("SELECT set_config('search_path', %s, true)", (_PATH,))  # AGE's opclasses
        owner.execute("SELECT ag_catalog.create_graph(%s)", (name,))
        for create, label in (("create_vlabel", VERTEX), ("create_elabel", EDGE)):
            owner.execute(sql.SQL("SELECT ag_catalog.{}(%s, %s)").format(sql.Identifier(create)),
                          (name, label))
        g = sql.Identifier(name)
        owner.execute(sql.SQL("CREATE INDEX ON {}.{} USING gin (properties)").format(
            g, sql.Identifier(VERTEX)))
        owner.execute(sql.SQL("CREATE UNIQUE INDEX ON {}.{} (id)").format(g, sql.Identifier(EDGE)))
        owner.execute(sql.SQL("GRANT USAGE ON SCHEMA ag_catalog, {} TO pgbraid_app").format(g))
        owner.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {}"
                              " TO pgbraid_app").format(g))
        labels = dict(owner.execute(
            "SELECT l.name, l.id FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g"
            " ON g.graphid = l.graph WHERE g.name = %s", (name,)).fetchall())
    return labels[VERTEX], labels[EDGE]


def drop_mirror(owner: psycopg.Connection, graph: str) -> None:
    """Drop a deleted pipeline's mirror (as the login role), if AGE still holds it: its
    vertices and edges are the pipeline's, and pgbraid_app is granted its tables."""
    with owner.transaction():
        if owner.execute("SELECT to_regclass('ag_catalog.ag_graph') IS NOT NULL").fetchone()[0] \
                and owner.execute("SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s",
                                  (graph,)).fetchone():
            owner.execute("SELECT set_config('search_path', %s, true)", (_PATH,))
            owner.execute("SELECT ag_catalog.drop_graph(%s, true)", (graph,))


def _mirror(conn: psycopg.Connection, pipeline_id: int):
    return conn.execute("SELECT graph, vertex_label, edge_label, version FROM pgbraid.age_graphs"
                        " WHERE pipeline_id = %s", (pipeline_id,)).fetchone()


def _version(conn: psycopg.Connection, pipeline_id: int) -> int:
    row = conn.execute("SELECT version FROM pgbraid.graph_versions WHERE pipeline_id = %s",
                       (pipeline_id,)).fetchone()
    return row[0] if row else 0


def _tables(graph: str) -> tuple[sql.Composed, sql.Composed]:
    g = sql.Identifier(graph)
    return (sql.SQL("{}.{}").format(g, sql.Identifier(VERTEX)),
            sql.SQL("{}.{}").format(g, sql.Identifier(EDGE)))


def _rebuild(conn, pipeline_id, graph, vertex_label, edge_label, version) -> dict[str, int]:
    vertices, edges = _tables(graph)
    conn.execute(sql.SQL("DELETE FROM {}").format(edges))
    conn.execute(sql.SQL("DELETE FROM {}").format(vertices))
    v = conn.execute(sql.SQL(
        "INSERT INTO {} (id, properties) SELECT ag_catalog._graphid(%(vl)s, v.id), "
        + _VERTEX_PROPS.format(v="v") + " FROM pgbraid.vertices v WHERE v.pipeline_id = %(p)s"
    ).format(vertices), {"vl": vertex_label, "p": pipeline_id}).rowcount
    e = conn.execute(sql.SQL(
        "INSERT INTO {} (id, start_id, end_id, properties) SELECT ag_catalog._graphid(%(el)s, e.id),"
        " ag_catalog._graphid(%(vl)s, e.src), ag_catalog._graphid(%(vl)s, e.dst), "
        + _EDGE_PROPS.format(e="e") + " FROM pgbraid.edges e WHERE e.pipeline_id = %(p)s"
    ).format(edges), {"vl": vertex_label, "el": edge_label, "p": pipeline_id}).rowcount
    conn.execute("UPDATE pgbraid.age_graphs SET version = %s WHERE pipeline_id = %s",
                 (version, pipeline_id))
    return {"vertices": v, "edges": e}


# -- keeping a current mirror current (store.py, same transaction) ----------------------------

def _current_mirror(conn, pipeline_id: int, before: int):
    """The mirror when it held the version before this write (else it is rebuilt later)."""
    row = _mirror(conn, pipeline_id)
    return row if row is not None and row[3] == before else None


def sync_load(conn, pipeline_id: int, before: int, after: int, vertex_ids: list[int],
              edge_ids: list[int]) -> None:
    row = _current_mirror(conn, pipeline_id, before)
    if row is None:
        return
    graph, vl, el, _ = row
    vertices, edges = _tables(graph)
    if vertex_ids:
        conn.execute(sql.SQL(
            "INSERT INTO {} (id, properties) SELECT ag_catalog._graphid(%(vl)s, v.id), "
            + _VERTEX_PROPS.format(v="v") + " FROM pgbraid.vertices v WHERE v.id = ANY(%(ids)s)"
            " ON CONFLICT (id) DO UPDATE SET properties = EXCLUDED.properties"
        ).format(vertices), {"vl": vl, "ids": vertex_ids})
    if edge_ids:
        conn.execute(sql.SQL(
            "INSERT INTO {} (id, start_id, end_id, properties) SELECT"
            " ag_catalog._graphid(%(el)s, e.id), ag_catalog._graphid(%(vl)s, e.src),"
            " ag_catalog._graphid(%(vl)s, e.dst), " + _EDGE_PROPS.format(e="e")
            + " FROM pgbraid.edges e WHERE e.id = ANY(%(ids)s)"
            " ON CONFLICT (id) DO UPDATE SET properties = EXCLUDED.properties"
        ).format(edges), {"vl": vl, "el": el, "ids": edge_ids})
    conn.execute("UPDATE pgbraid.age_graphs SET version = %s WHERE pipeline_id = %s",
                 (after, pipeline_id))


def sync_delete(conn, pipeline_id: int, before: int, after: int, vertex_id: int) -> None:
    row = _current_mirror(conn, pipeline_id, before)
    if row is None:
        return
    graph, vl, _, _ = row
    vertices, edges = _tables(graph)
    params = {"vl": vl, "v": vertex_id}
    conn.execute(sql.SQL(
        "DELETE FROM {} WHERE start_id OPERATOR(ag_catalog.=) ag_catalog._graphid(%(vl)s, %(v)s)"
        " OR end_id OPERATOR(ag_catalog.=) ag_catalog._graphid(%(vl)s, %(v)s)").format(edges), params)
    conn.execute(sql.SQL(
        "DELETE FROM {} WHERE id OPERATOR(ag_catalog.=) ag_catalog._graphid(%(vl)s, %(v)s)").format(
        vertices), params)
    conn.execute("UPDATE pgbraid.age_graphs SET version = %s WHERE pipeline_id = %s",
                 (after, pipeline_id))


# -- asking it ------------------------------------------------------------------------------------

# The two orientations of one edge pattern: constants, chosen by direction ("both" asks
# both: AGE plans an undirected pattern as a join filter over every edge pair).
_PATTERNS = {"out": "-[r:link]->", "in": "<-[r:link]-"}
_MATCH = "UNWIND $ids AS i MATCH (v:entity {{vid: i}}){pattern}(n:entity) WHERE r.type IN $types"
_QUERIES = {
    "lists": _MATCH + " RETURN i, n.vid",
    "lists_of_type": _MATCH + " RETURN i, n.vid, n.type",
    "counts": _MATCH + " RETURN i, count(r)",
    "heaviest": _MATCH + " RETURN i, n.vid, r.type, r.weight",
}
_COLUMNS = {"lists": 2, "lists_of_type": 3, "counts": 2, "heaviest": 4, "types": 2}
_TYPES = "UNWIND $ids AS i MATCH (v:entity {vid: i}) RETURN i, v.type"


def adjacency(conn: psycopg.Connection, pipeline, context, details: dict) -> "Age":
    """The mirror's adjacency, in the search's snapshot; the trace says what prepare did."""
    if EXTENSION not in context.extensions:
        raise NotEnabled(NOT_INSTALLED, extension=EXTENSION)
    row = _mirror(conn, pipeline.id)
    if row is None:
        raise NotEnabled("this pipeline has no Apache AGE mirror yet (it is made before a graph "
                         "search with engine age)", extension=EXTENSION)
    note = dict(context.age_mirror or {"graph": row[0], "rebuilt": False})
    current = _version(conn, pipeline.id)
    if row[3] != current:
        note["stale"] = (f"a write while PGBRAID_AGE was unset moved the pipeline to graph "
                         f"version {current} after the mirror (version {row[3]}) was checked")
    details["age"] = note
    return Age(conn, row[0])


class Age:
    """Adjacency lookups as Cypher over one mirror graph."""

    def __init__(self, conn: psycopg.Connection, graph: str) -> None:
        self.conn = conn
        self.graph = graph
        conn.execute("SELECT 'null'::ag_catalog.agtype")  # loads AGE's library into the session

    @contextmanager
    def _age_path(self) -> Iterator[None]:
        """ag_catalog on the search_path, and nested loops over AGE's indexes (its
        estimates for UNWIND lists are 1,000 rows, which picks a hash join over every
        edge), for one Cypher statement; then the session's own values again."""
        old = self.conn.execute(
            "SELECT current_setting('search_path'), current_setting('enable_hashjoin'),"
            " current_setting('enable_mergejoin'), set_config('search_path', %s, true),"
            " set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)",
            (_PATH,)).fetchone()
        try:
            yield
        finally:
            self.conn.execute("SELECT set_config('search_path', %s, true),"
                              " set_config('enable_hashjoin', %s, true),"
                              " set_config('enable_mergejoin', %s, true)", old[:3])

    def _cypher(self, query: str, columns: int, params: dict) -> list[tuple]:
        names = sql.SQL(", ").join(sql.SQL("{} ag_catalog.agtype").format(sql.Identifier(f"c{i}"))
                                   for i in range(columns))
        statement = sql.SQL("SELECT * FROM ag_catalog.cypher({}, $$ {} $$, %s) AS ({})").format(
            sql.Literal(self.graph), sql.SQL(query), names)
        with self._age_path():
            rows = self.conn.execute(statement, (json.dumps(params),)).fetchall()
        return [tuple(json.loads(value) for value in row) for row in rows]

    def _match(self, name: str, ids, direction, types, **extra) -> list[tuple]:
        if not ids:
            return []
        query = _QUERIES[name].format(pattern=_PATTERNS[direction])
        return self._cypher(query, _COLUMNS[name], {"ids": list(ids), "types": list(types), **extra})

    def lists(self, ids, direction, types, of_type=None) -> Lists:
        found: Lists = {}
        for direction in (("out", "in") if direction == "both" else (direction,)):
            if of_type is None:
                rows = self._match("lists", ids, direction, types)
            else:  # the type filtered here: in Cypher it makes AGE start from every vertex
                rows = [(v, n) for v, n, kind in self._match("lists_of_type", ids, direction, types)
                        if kind == of_type]
            for v, n in rows:
                found.setdefault(v, set()).add(n)
        return found

    def profiles(self, ids, direction, types, of_type, among) -> dict[int, tuple[int, set[int]]]:
        return {v: (len(n), n & among) for v, n in self.lists(ids, direction, types, of_type).items()}

    def degrees(self, ids, direction, types) -> dict[int, int]:
        found: dict[int, int] = {}
        for way in (("out", "in") if direction == "both" else (direction,)):
            for v, n in self._match("counts", ids, way, types):
                found[v] = found.get(v, 0) + n
        return found

    def counts(self, ids, direction, types) -> dict[int, int]:
        return {v: len(n) for v, n in self.lists(ids, direction, types).items()}

    def _kept(self, hubs, direction, types, unread, need, done) -> dict[int, tuple]:
        pointing = self.lists(hubs, REVERSE[direction], types)
        shared = Counter(c for z in hubs for c in pointing.get(z, ()) if c not in done)
        lowest = min(need[0] + [need[1]])  # no degree can help a candidate below this
        hopeful = sorted(c for c, a in shared.items() if a + unread >= lowest)
        degree = self.degrees(hopeful, direction, types) if hopeful else {}
        return {c: (shared[c], degree.get(c, 0), None) for c in hopeful
                if passes(shared[c], degree.get(c, 0), unread, *need)}

    def tally(self, hubs, direction, types, unread, need, afford, done=frozenset()):
        kept = self._kept(hubs, direction, types, unread, need, done)
        cost = sum(d for _, d, _ in kept.values())
        return ({}, None) if cost > afford else (kept, cost)

    def probe(self, ask: Ask, direction, types) -> Probed:
        kept = self._kept(ask.hubs, direction, types, ask.unread, ask.need, ask.done)
        ranked = sorted(kept, key=lambda c: (-ask.bound.order(kept[c][0], kept[c][1], ask.unread), c))
        if sum(d for _, d, _ in kept.values()) > ask.afford:  # the most promising only
            spent = list(accumulate(kept[c][1] for c in ranked[:ask.quota]))
            ranked = [c for c, total in zip(ranked, spent) if total <= ask.afford]
        theirs = self.lists(ranked, direction, types) if ranked else {}
        kinds = self.types_of(ranked) if ask.of_type is not None and ranked else {}
        found = Probed({}, set(), sum(kept[c][1] for c in ranked), len(kept) - len(ranked))
        for c in ranked:
            a, d, _ = kept[c]
            mine = theirs.get(c, set()) & ask.among
            if (ask.of_type is None or kinds.get(c) == ask.of_type) and passes(len(mine), d, 0, *ask.keep):
                found.kept[c] = (a, d, mine)
            else:
                found.gone.add(c)
        _below_kth(found, ask)
        return found

    def heaviest(self, ids, direction, types, cap) -> dict[int, list[tuple[int, str]]]:
        rows = [row for direction in (("out", "in") if direction == "both" else (direction,))
                for row in self._match("heaviest", ids, direction, types)]
        return {v: found[:cap + 1] for v, found in heaviest_first(rows).items()}

    def types_of(self, ids) -> dict[int, str]:
        return dict(self._cypher(_TYPES, 2, {"ids": list(ids)})) if ids else {}


def _below_kth(found: Probed, ask: Ask) -> None:
    """What native.py's probe does in SQL: (Jaccard, cosine) a scored candidate below the
    k-th best of the round's own exact scores is gone."""
    if ask.bound.measure not in ("jaccard", "cosine") or len(found.kept) < ask.want:
        return
    n = ask.bound.size
    score = {c: len(mine) / (n + d - len(mine)) if ask.bound.measure == "jaccard"
             else len(mine) / math.sqrt(n * d) for c, (_, d, mine) in found.kept.items()}
    kth = sorted(score.values(), reverse=True)[ask.want - 1]
    for c in [c for c, value in score.items() if value < kth]:
        del found.kept[c]
        found.gone.add(c)
