"""graph: structural similarity and k-hop neighbourhoods over a pipeline's edges.

A seed entity comes from ``params.seed`` (its key, with ``params.seed_type`` when
keys repeat across types) or is resolved from the query text by its label:
exact (case-insensitive), then trigram similarity; the trace says which.

``mode: similar``: entities sharing neighbours with the seed along
``params.edge_type`` (e.g. group -uses-> technique), optionally only neighbours
of ``params.neighbour_type``, following at most ``params.max_fanout`` (default
10,000) edges out of each shared neighbour (hubs are named in the trace),
ranked by ``params.measure``:
    jaccard     |N(s) ∩ N(c)| / |N(s) ∪ N(c)|
    cosine      |N(s) ∩ N(c)| / sqrt(|N(s)| · |N(c)|)
    adamic-adar Σ over shared z of 1 / ln(deg(z))
with the shared neighbours as evidence.

``mode: neighbours``: entities within ``params.hops`` (1-3) along
``params.edge_types``, walked by a recursive CTE that follows at most
``params.max_fanout`` (default 100) edges (heaviest first) out of each vertex, so a hub with
10k edges cannot blow up a 2-hop walk; capped vertices are named in the trace.

Entities that describe documents become citable hits (the document's first
current fragment in scope); every entity found is listed in the trace.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ...errors import InvalidRequest, NotEnabled, NotFound
from ...models import SearchRequest, check_text, shown
from ...pipelines import Pipeline
from ...scope import Scope
from ..base import HIT_COLUMNS, Context, Outcome, Row, Strategy
from ..params import PAGING, Param

MEASURES = ("jaccard", "cosine", "adamic-adar")
DIRECTIONS = ("out", "in", "both")
MODES = ("similar", "neighbours")
NO_RELATIONSHIPS = "no relationships materialised for this entity"
SIMILAR_FANOUT = 10_000   # per shared neighbour; ATT&CK's busiest technique has far fewer
NEIGHBOUR_FANOUT = 100    # per walked vertex

_SIMILAR = """
WITH seed_n AS (SELECT DISTINCT e.{b} AS b FROM pgbraid.edges e JOIN pgbraid.vertices nv ON nv.id = e.{b}
                WHERE e.pipeline_id = %(p)s AND e.{a} = %(seed)s AND e.type = ANY(%(types)s)
                  AND (%(nt)s::text IS NULL OR nv.type = %(nt)s)),
cands AS (SELECT x.a AS cand, array_agg(DISTINCT s.b) AS shared
          FROM seed_n s
          CROSS JOIN LATERAL (SELECT e.{a} AS a FROM pgbraid.edges e
                              WHERE e.pipeline_id = %(p)s AND e.{b} = s.b AND e.type = ANY(%(types)s)
                                AND e.{a} <> %(seed)s
                              ORDER BY e.weight DESC, e.{a} LIMIT %(cap)s) AS x
          JOIN pgbraid.vertices cv ON cv.id = x.a
          WHERE cv.type = %(ct)s GROUP BY x.a),
deg AS (SELECT c.cand, (SELECT count(DISTINCT e.{b}) FROM pgbraid.edges e
                         JOIN pgbraid.vertices nv ON nv.id = e.{b}
                         WHERE e.pipeline_id = %(p)s AND e.{a} = c.cand AND e.type = ANY(%(types)s)
                           AND (%(nt)s::text IS NULL OR nv.type = %(nt)s)) AS degree
        FROM cands c),
zdeg AS MATERIALIZED (SELECT s.b, (SELECT count(DISTINCT e.{a}) FROM pgbraid.edges e
                       WHERE e.pipeline_id = %(p)s AND e.{b} = s.b AND e.type = ANY(%(types)s)) AS degree
         FROM seed_n s)
SELECT c.cand AS id, d.degree, (SELECT count(*) FROM seed_n) AS seed_degree,
       (SELECT coalesce(sum(1.0 / ln(z.degree)), 0) FROM zdeg z
         WHERE z.b = ANY(c.shared) AND z.degree > 1)::float8 AS adamic_adar,
       (SELECT array_agg(v.key ORDER BY v.key) FROM pgbraid.vertices v WHERE v.id = ANY(c.shared)) AS shared,
       (SELECT array_agg(v.type || ':' || v.key || ' (' || z.degree || ')') FROM zdeg z
         JOIN pgbraid.vertices v ON v.id = z.b WHERE z.degree > %(cap)s) AS capped
FROM cands c JOIN deg d ON d.cand = c.cand
"""

# Both directions: the same question over the union of both edge orientations.
_ADJ_BOTH = ("SELECT src AS a, dst AS b FROM pgbraid.edges WHERE pipeline_id = %(p)s AND type = ANY(%(types)s)"
             " UNION ALL SELECT dst, src FROM pgbraid.edges WHERE pipeline_id = %(p)s AND type = ANY(%(types)s)")
_SIMILAR_BOTH = """
WITH adj AS MATERIALIZED ({adj}),
seed_n AS (SELECT DISTINCT adj.b FROM adj JOIN pgbraid.vertices nv ON nv.id = adj.b
           WHERE adj.a = %(seed)s AND (%(nt)s::text IS NULL OR nv.type = %(nt)s)),
cands AS (SELECT adj.a AS cand, array_agg(DISTINCT adj.b) AS shared FROM adj JOIN seed_n s ON s.b = adj.b
          JOIN pgbraid.vertices cv ON cv.id = adj.a WHERE adj.a <> %(seed)s AND cv.type = %(ct)s
          GROUP BY adj.a),
deg AS (SELECT adj.a AS cand, count(DISTINCT adj.b) AS degree FROM adj
        JOIN pgbraid.vertices nv ON nv.id = adj.b
        WHERE adj.a IN (SELECT cand FROM cands) AND (%(nt)s::text IS NULL OR nv.type = %(nt)s)
        GROUP BY adj.a),
zdeg AS (SELECT adj.b, count(DISTINCT adj.a) AS degree FROM adj
         WHERE adj.b IN (SELECT b FROM seed_n) GROUP BY adj.b)
SELECT c.cand AS id, d.degree, (SELECT count(*) FROM seed_n) AS seed_degree,
       (SELECT coalesce(sum(1.0 / ln(z.degree)), 0) FROM zdeg z
         WHERE z.b = ANY(c.shared) AND z.degree > 1)::float8 AS adamic_adar,
       (SELECT array_agg(v.key ORDER BY v.key) FROM pgbraid.vertices v WHERE v.id = ANY(c.shared)) AS shared
FROM cands c JOIN deg d ON d.cand = c.cand
"""

_WALK = """
WITH RECURSIVE walk(vertex, depth, path, edge_types) AS (
    SELECT %(seed)s::bigint, 0, ARRAY[%(seed)s::bigint], ARRAY[]::text[]
  UNION ALL
    SELECT n.next, w.depth + 1, w.path || n.next, w.edge_types || n.type
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT x.next, x.type FROM (
            SELECT e.dst AS next, e.type, e.weight FROM pgbraid.edges e
             WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = w.vertex AND e.type = ANY(%(types)s)
            UNION ALL
            SELECT e.src, e.type, e.weight FROM pgbraid.edges e
             WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = w.vertex AND e.type = ANY(%(types)s)
        ) x ORDER BY x.weight DESC, x.next LIMIT %(cap)s) AS n
    WHERE w.depth < %(hops)s AND NOT n.next = ANY(w.path)
)
SELECT DISTINCT ON (vertex) vertex AS id, depth, path, edge_types FROM walk
WHERE depth > 0 ORDER BY vertex, depth, path
"""

# Which walked vertices had more edges than the cap: counted only up to cap + 1,
# so a hub with 100k edges costs no more than any other capped vertex.
_CAPPED = """
SELECT v.type || ':' || v.key AS vertex, d.degree
FROM pgbraid.vertices v
CROSS JOIN LATERAL (SELECT count(*) AS degree FROM (
    SELECT 1 FROM pgbraid.edges e WHERE %(out)s AND e.pipeline_id = %(p)s AND e.src = v.id
       AND e.type = ANY(%(types)s)
    UNION ALL
    SELECT 1 FROM pgbraid.edges e WHERE %(in)s AND e.pipeline_id = %(p)s AND e.dst = v.id
       AND e.type = ANY(%(types)s)
    LIMIT %(cap)s + 1) AS x) AS d
WHERE v.id = ANY(%(ids)s) AND d.degree > %(cap)s
"""

_DOCUMENT_HITS = """
SELECT DISTINCT ON (d.external_id) {columns}, 0.0::float8 AS score
FROM pgbraid.documents d
     JOIN pgbraid.fragments f ON f.document_id = d.id
     JOIN pgbraid.versions v ON v.id = f.version_id
WHERE d.pipeline_id = %(scope_pipeline)s AND d.external_id = ANY(%(ids)s) AND {scope}
ORDER BY d.external_id, f.ordinal
"""


def _types(request: SearchRequest) -> list[str] | None:
    value = request.params.get("edge_types", request.params.get("edge_type"))
    if value is None:
        return None
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvalidRequest("params.edge_types must be an edge type or a list of them",
                             field="edge_types")
    return value


def _check_names(request: SearchRequest) -> None:
    """Edge types, the seed and vertex types: text PostgreSQL can compare (a seed may be an int)."""
    for name in _types(request) or ():
        check_text(name, "params.edge_types", "edge_types")
    for key in ("seed", "seed_type", "neighbour_type", "candidate_type"):
        value = request.params.get(key)
        if key == "seed" and isinstance(value, int) and not isinstance(value, bool):
            continue
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"params.{key} must be a string", field=key)
        if value is not None:
            check_text(value, f"params.{key}", key)


_EDGES = "every edge type of the pipeline"
PARAMS = (
    *PAGING,
    Param("mode", "choice", "similar", "similar: entities sharing neighbours with the seed; "
          "neighbours: entities within hops", choices=MODES),
    Param("measure", "choice", "jaccard", "how shared neighbours score (mode similar)",
          choices=MEASURES),
    Param("direction", "choice", None, "which way edges are followed", choices=DIRECTIONS,
          rule="out (similar), both (neighbours)"),
    Param("seed", "key", None, "the seed entity's key (a string or an integer)",
          rule="resolved from the query by label"),
    Param("seed_type", "string", None, "the seed's vertex type, when keys repeat across types"),
    Param("edge_type", "strings", None, "the edge types followed: a name or a list", rule=_EDGES),
    Param("edge_types", "strings", None, "the same as edge_type", rule=_EDGES),
    Param("neighbour_type", "string", None, "only neighbours of this vertex type count "
          "(mode similar)"),
    Param("candidate_type", "string", None, "the vertex type of the entities found (mode "
          "similar)", rule="the seed's type"),
    Param("hops", "integer", 2, "how far the walk goes (mode neighbours)", low=1, high=3),
    Param("max_fanout", "integer", None, "edges followed out of each vertex, heaviest first",
          low=1, high=100_000, rule=f"{SIMILAR_FANOUT} (similar), {NEIGHBOUR_FANOUT} (neighbours)"),
    Param("engine", "choice", "pgbraid", "pgbraid's SQL, or Apache AGE when opted in",
          choices=("pgbraid", "age")),
)
_DECLARED = {p.name: p for p in PARAMS}
NOT_VERSIONED = "the graph is not versioned: as_of cannot apply to graph searches"


def _mode(request: SearchRequest) -> tuple[str, str]:
    """The mode and the direction (its default depends on the mode)."""
    mode = _DECLARED["mode"].value(request.params)
    return mode, _DECLARED["direction"].value(request.params) or (
        "out" if mode == "similar" else "both")


class Graph(Strategy):
    name = "graph"
    description = "shared-neighbour similarity and k-hop walks over the pipeline's edges"
    versioned = False
    params = PARAMS

    def validate(self, request: SearchRequest, context: Context) -> None:
        if request.as_of is not None:
            raise InvalidRequest(NOT_VERSIONED, field="as_of")
        _check_names(request)
        if request.params.get("engine") == "age" and not context.age:
            raise NotEnabled("Apache AGE is not opted in: set PGBRAID_AGE=1", strategy=self.name)

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        if request.params.get("engine") == "age":
            raise NotEnabled("the Apache AGE path needs the age extension, which is not installed",
                             strategy=self.name)
        known = _known_types(conn, pipeline.id)
        types = _types(request) or known["edges"]
        unknown = [t for t in types if t not in known["edges"]]
        if unknown or not types:
            raise InvalidRequest(f"unknown edge type(s) {unknown or types}; this pipeline has "
                                 f"{known['edges'] or 'no edges'}", field="edge_types")
        for key in ("seed_type", "neighbour_type", "candidate_type"):
            value = request.params.get(key)
            if value is not None and value not in known["vertices"]:
                raise InvalidRequest(f"unknown vertex type {shown(value)}; this pipeline has "
                                     f"{known['vertices']}", field=key)
        seed, how = _seed(conn, pipeline.id, request)
        mode, direction = _mode(request)
        details: dict[str, Any] = {"mode": mode, "seed": {k: seed[k] for k in ("type", "key", "label")},
                                   "seed_resolved_by": how, "edge_types": types, "direction": direction}
        if mode == "similar":
            entities = _similar(conn, pipeline.id, seed, types, direction, request, details)
        else:
            entities = _neighbours(conn, pipeline.id, seed, types, direction, request, details)
        entities = entities[:k]
        details["entities"] = entities
        if not entities:
            degree = conn.execute("SELECT count(*) FROM pgbraid.edges WHERE pipeline_id = %s AND"
                                  " (src = %s OR dst = %s)", (pipeline.id, seed["id"], seed["id"])).fetchone()[0]
            details["explanation"] = NO_RELATIONSHIPS if degree == 0 else (
                "the entity has relationships, but none along these edge types share neighbours"
                if mode == "similar" else "no entity reachable along these edge types")
        rows = _document_hits(conn, scope, entities)
        details["rows"] = len(rows)
        return Outcome(rows, details)


def _known_types(conn: psycopg.Connection, pipeline_id: int) -> dict[str, list[str]]:
    edges = [r[0] for r in conn.execute("SELECT DISTINCT type FROM pgbraid.edges WHERE pipeline_id = %s"
                                        " ORDER BY 1", (pipeline_id,))]
    vertices = [r[0] for r in conn.execute("SELECT DISTINCT type FROM pgbraid.vertices"
                                           " WHERE pipeline_id = %s ORDER BY 1", (pipeline_id,))]
    return {"edges": edges, "vertices": vertices}


def _seed(conn: psycopg.Connection, pipeline_id: int, request: SearchRequest) -> tuple[dict, str]:
    key, vtype = request.params.get("seed"), request.params.get("seed_type")
    with conn.cursor(row_factory=dict_row) as cur:
        if key is not None:
            rows = cur.execute("SELECT id, type, key, label FROM pgbraid.vertices WHERE pipeline_id = %s"
                               " AND key = %s AND (%s::text IS NULL OR type = %s)",
                               (pipeline_id, str(key), vtype, vtype)).fetchall()
            how = "params.seed"
        else:
            rows = cur.execute("SELECT id, type, key, label FROM pgbraid.vertices WHERE pipeline_id = %s"
                               " AND lower(label) = lower(%s) AND (%s::text IS NULL OR type = %s)",
                               (pipeline_id, request.query, vtype, vtype)).fetchall()
            how = "exact label match on the query"
            if not rows:
                rows = cur.execute(
                    "SELECT id, type, key, label FROM pgbraid.vertices WHERE pipeline_id = %s"
                    " AND (%s::text IS NULL OR type = %s) AND similarity(label, %s) >= 0.5"
                    " ORDER BY similarity(label, %s) DESC, key LIMIT 2",
                    (pipeline_id, vtype, vtype, request.query, request.query)).fetchall()[:1]
                how = "fuzzy label match on the query (pg_trgm similarity >= 0.5)"
    if not rows:
        raise NotFound(f"seed entity {key or request.query!r} not found in this pipeline's graph",
                       seed=key or request.query)
    if len(rows) > 1:
        raise InvalidRequest(f"seed {key or request.query!r} matches vertices of types "
                             f"{sorted(r['type'] for r in rows)}: give params.seed_type", field="seed_type")
    return rows[0], how


def _similar(conn, pipeline_id, seed, types, direction, request, details) -> list[dict]:
    measure = _DECLARED["measure"].value(request.params)
    cap = request.params.get("max_fanout", SIMILAR_FANOUT)
    params = {"p": pipeline_id, "types": types, "seed": seed["id"], "cap": cap,
              "nt": request.params.get("neighbour_type"),
              "ct": request.params.get("candidate_type", seed["type"])}
    if direction == "both":
        statement = sql.SQL(_SIMILAR_BOTH).format(adj=sql.SQL(_ADJ_BOTH))
    else:
        a, b = ("src", "dst") if direction == "out" else ("dst", "src")
        statement = sql.SQL(_SIMILAR).format(a=sql.Identifier(a), b=sql.Identifier(b))
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(statement, params).fetchall()
    capped = sorted({c for r in rows for c in (r.get("capped") or [])})
    details.update(measure=measure, candidates=len(rows), max_fanout=cap, capped=capped)
    if capped:
        details["cap_note"] = (f"{len(capped)} shared neighbours have more than {cap} edges; only "
                               f"their {cap} heaviest were followed, so scores through them are partial")
    scored = []
    for r in rows:
        shared = len(r["shared"])
        value = {"jaccard": shared / (r["seed_degree"] + r["degree"] - shared),
                 "cosine": shared / math.sqrt(r["seed_degree"] * r["degree"]),
                 "adamic-adar": r["adamic_adar"]}[measure]
        scored.append((value, r))
    keys = _keys(conn, [r["id"] for _, r in scored])
    entities = [{**keys[r["id"]], "score": round(v, 6),
                 "evidence": {"shared_neighbours": r["shared"], "shared": len(r["shared"]),
                              "degree": r["degree"], "seed_degree": r["seed_degree"]}}
                for v, r in scored]
    return sorted(entities, key=lambda e: (-e["score"], e["key"]))


def _neighbours(conn, pipeline_id, seed, types, direction, request, details) -> list[dict]:
    hops = request.params.get("hops", 2)
    cap = request.params.get("max_fanout", NEIGHBOUR_FANOUT)
    params = {"p": pipeline_id, "types": types, "seed": seed["id"], "hops": hops, "cap": cap,
              "out": direction in ("out", "both"), "in": direction in ("in", "both")}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_WALK, params).fetchall()
        expanded = [seed["id"]] + [r["id"] for r in rows if r["depth"] < hops]
        capped = cur.execute(_CAPPED, {**params, "ids": expanded}).fetchall()
    details.update(hops=hops, max_fanout=cap, reached=len(rows),
                   capped=[c["vertex"] for c in capped])
    if capped:
        details["cap_note"] = (f"{len(capped)} vertices have more than {cap} edges; the walk followed "
                               f"only their {cap} heaviest (raise params.max_fanout to see more)")
    keys = _keys(conn, sorted({v for r in rows for v in r["path"]}))
    entities = [{**keys[r["id"]], "score": round(1.0 / r["depth"], 6), "hops": r["depth"],
                 "evidence": {"path": [f"{keys[v]['type']}:{keys[v]['key']}" for v in r["path"]],
                              "edge_types": r["edge_types"]}} for r in rows]
    return sorted(entities, key=lambda e: (e["hops"], e["key"]))


def _keys(conn: psycopg.Connection, ids: list[int]) -> dict[int, dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return {r["id"]: {"type": r["type"], "key": r["key"], "label": r["label"],
                          "documents": r["documents"]}
                for r in cur.execute("SELECT id, type, key, label, documents FROM pgbraid.vertices"
                                     " WHERE id = ANY(%s)", (ids,))}


def _document_hits(conn: psycopg.Connection, scope: Scope, entities: list[dict]) -> list[Row]:
    """Each entity's documents within scope; entities keep only those (never the ids of
    documents the reader may not see), and the best entity citing a document cites it."""
    wanted = {doc: e for e in reversed(entities) for doc in e.get("documents") or []}
    found: list[dict] = []
    if wanted:
        where, params = scope.where("f")
        statement = sql.SQL(_DOCUMENT_HITS).format(columns=sql.SQL(HIT_COLUMNS), scope=where)
        with conn.cursor(row_factory=dict_row) as cur:
            found = cur.execute(statement, {**params, "ids": list(wanted)}).fetchall()
    visible = {record["document_id"] for record in found}
    for entity in entities:
        entity["documents"] = [d for d in entity.get("documents") or [] if d in visible]
    rows = []
    for record in found:
        entity = wanted[record["document_id"]]
        record.update(score=entity["score"], evidence={"entity": f"{entity['type']}:{entity['key']}",
                                                        **entity["evidence"]})
        rows.append(Row(**record))
    order = {id(e): i for i, e in enumerate(entities)}
    return sorted(rows, key=lambda r: order[id(wanted[r.document_id])])
