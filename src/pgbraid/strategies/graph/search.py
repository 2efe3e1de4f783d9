"""graph: structural similarity and k-hop neighbourhoods over a pipeline's edges.

A seed entity comes from ``params.seed`` (its key, with ``params.seed_type`` when
keys repeat across types) or is resolved from the query text by its label:
exact (case-insensitive), then trigram similarity; the trace says which.

``mode: similar``: entities sharing neighbours with the seed along
``params.edge_type`` (e.g. group -uses-> technique), optionally only neighbours
of ``params.neighbour_type``; a neighbour with more than ``params.max_fanout``
(default 1,000) edges is a hub, whose list is read only as far as proving that no
candidate sharing only hubs is missing needs (``hubs.py``; the trace's ``hubs``
says what was read and whether the answer is certified exact, within
``params.hub_budget`` edges), ranked by ``params.measure``:
    jaccard     |N(s) ∩ N(c)| / |N(s) ∪ N(c)|
    cosine      |N(s) ∩ N(c)| / sqrt(|N(s)| · |N(c)|)
    adamic-adar Σ over shared z of 1 / ln(deg(z))
with the shared neighbours as evidence.

``mode: neighbours``: entities within ``params.hops`` (1-3) along
``params.edge_types``, walked breadth first, following at most ``params.max_fanout``
(default 100) edges (heaviest first) out of each vertex, so a hub with 100k edges
cannot blow up a 2-hop walk; capped vertices are named in the trace.

``params.engine``: ``pgbraid`` (SQL over pgbraid.edges: ``native``) or ``age``
(Cypher over the pipeline's Apache AGE mirror: ``age``; PGBRAID_AGE=1). Both
answer through ``walks``, so entities, evidence and trace agree.

Entities that describe documents become citable hits (the document's first
current fragment in scope); every entity found is listed in the trace.
"""

from __future__ import annotations

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
from . import walks
from .native import Native

MEASURES = ("jaccard", "cosine", "adamic-adar")
DIRECTIONS = ("out", "in", "both")
MODES = ("similar", "neighbours")
NO_RELATIONSHIPS = "no relationships materialised for this entity"
SIMILAR_FANOUT = 1_000    # a neighbour with more edges is a hub; ATT&CK's busiest technique has 498
NEIGHBOUR_FANOUT = 100    # per walked vertex
HUB_BUDGET = 2_000_000    # edges similar reads next to hubs (tally.py; hubs.py's certificate)

_DOCUMENT_HITS = """
SELECT DISTINCT ON (d.external_id) {columns}, 0.0::float8 AS score
FROM pgbraid.documents d
     JOIN pgbraid.fragments f ON f.pipeline_id = d.pipeline_id AND f.document_id = d.id
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
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
    Param("max_fanout", "integer", None, "neighbours: edges followed out of each vertex, "
          "heaviest first; similar: a neighbour with more edges is a hub, read smallest first and only "
          "as far as proving the answer needs",
          low=1, high=100_000, rule=f"{SIMILAR_FANOUT} (similar), {NEIGHBOUR_FANOUT} (neighbours)"),
    Param("hub_budget", "integer", HUB_BUDGET, "similar: the most edges read (hub lists and "
          "the candidates found in them) to prove that no candidate sharing only hubs with the "
          "seed is missing; past it the trace says not certified exact", low=0, high=100_000_000),
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
        known = _known_types(conn, pipeline.id)
        types = _types(request) or known["edges"]
        unknown = [t for t in types if t not in known["edges"]]
        if not known["edges"]:
            raise InvalidRequest("this pipeline has no edges yet: load vertices and edges first",
                                 remedy="load_graph", field="edge_types")
        if unknown:
            raise InvalidRequest(f"unknown edge type(s) {', '.join(map(shown, unknown))}; this "
                                 f"pipeline has {', '.join(known['edges'])}", field="edge_types")
        for key in ("seed_type", "neighbour_type", "candidate_type"):
            value = request.params.get(key)
            if value is not None and value not in known["vertices"]:
                raise InvalidRequest(f"unknown vertex type {shown(value)}; this pipeline has "
                                     f"{known['vertices']}", field=key)
        seed, how = _seed(conn, pipeline.id, request)
        mode, direction = _mode(request)
        details: dict[str, Any] = {"mode": mode, "seed": {k: seed[k] for k in ("type", "key", "label")},
                                   "seed_resolved_by": how, "edge_types": types, "direction": direction}
        adj = self._adjacency(conn, pipeline, request, context, details, known["packed"])
        answer = _similar if mode == "similar" else _neighbours
        entities = answer(adj, conn, seed, types, direction, request, details, known["vertices"])
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


    def _adjacency(self, conn, pipeline, request, context, details, packed):
        if request.params.get("engine") != "age":
            details["engine"] = "pgbraid"
            return Native(conn, pipeline.id, packed)
        from . import age  # only with PGBRAID_AGE=1 and engine "age": nothing else touches AGE

        details["engine"] = "age"
        return age.adjacency(conn, pipeline, context, details)


def _known_types(conn: psycopg.Connection, pipeline_id: int) -> dict[str, Any]:
    """The vertex and edge types ever loaded (kept by store.py: a DISTINCT over every
    edge would cost more than the search; a type whose last edge was deleted stays known
    and simply finds nothing), and whether the packed lists are current (packed.py)."""
    row = conn.execute("SELECT vertex_types, edge_types, packed_version = version"
                       " FROM pgbraid.graph_versions WHERE pipeline_id = %s", (pipeline_id,)).fetchone()
    return ({"vertices": row[0], "edges": row[1], "packed": bool(row[2])} if row
            else {"vertices": [], "edges": [], "packed": False})


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


def _similar(adj, conn, seed, types, direction, request, details, kinds) -> list[dict]:
    measure = _DECLARED["measure"].value(request.params)
    cap = request.params.get("max_fanout", SIMILAR_FANOUT)
    budget = _DECLARED["hub_budget"].value(request.params)
    kind = request.params.get("candidate_type", seed["type"])
    question = walks.Question(seed["id"], types, direction, request.params.get("neighbour_type"),
                              None if kinds == [kind] else kind, measure,
                              _want(request))
    scored, hubs, search = walks.similar(adj, question, cap=cap, budget=budget)
    tallied = getattr(search, "tallied", None)  # a HubSearch of before 047 has none (bench)
    considered = len(scored) if tallied is None else tallied
    scored = _best(scored, question.want)
    keys = _keys(conn, sorted({s["id"] for s in scored} | {z for s in scored for z in s["shared"]}
                              | set(hubs)))
    name = {z: f"{keys[z]['type']}:{keys[z]['key']}" for z in hubs}
    details.update(measure=measure, candidates=considered, max_fanout=cap,
                   capped=sorted(f"{name[z]} ({n:,} edges)" for z, n in hubs.items()))
    if search is not None:
        details["hubs"] = _hub_trace(search, name, question)
    entities = [{**keys[s["id"]], "score": round(s["score"], 6),
                 "evidence": {"shared_neighbours": sorted(keys[z]["key"] for z in s["shared"]),
                              "shared": len(s["shared"]), "degree": s["degree"],
                              "seed_degree": s["seed_degree"]}}
                for s in scored]
    return sorted(entities, key=lambda e: (-e["score"], e["key"]))


def _best(scored: list[dict], want: int) -> list[dict]:
    """The candidates that can be on the page: the ``want`` best scores, ties at the last
    one included (they are ordered by key, which is looked up only for these; a sum of
    Adamic-Adar weights in another order may differ in its last bit: a tie too)."""
    if len(scored) <= want:
        return scored
    last = sorted((s["score"] for s in scored), reverse=True)[want - 1]
    return [s for s in scored if s["score"] >= last * (1 - walks.SLACK)]


_BOUNDS = {"jaccard": "jaccard <= shared / |N(seed)|", "cosine": "cosine <= sqrt(shared / |N(seed)|)",
           "adamic-adar": "adamic-adar <= the sum of 1 / ln(degree) over the unread hubs"}


def _hub_trace(search, name: dict[int, str], question) -> dict[str, Any]:
    """How candidates sharing only hubs with the seed were handled (hubs.py)."""
    t = "none yet" if search.threshold is None else f"{search.threshold:.6f}"
    read = search.order[:search.read]
    trace = {"certified_exact": search.certified, "hubs": [name[z] for z in search.order],
             "hubs_read": [name[z] for z in read], "hub_edges_read": search.hub_edges_read,
             "edges_read": search.edges_read,
             "rounds": search.rounds, "candidates_verified": search.verified,
             "budget": search.budget, "kth_best": search.threshold,
             "unseen_bound": round(search.bound, 6),
             "lists": "packed, all at once" if getattr(search, "packed", False) else "rows, smallest hubs first"}
    if search.certified:
        trace["bound"] = (f"a candidate in none of the {len(read)} hub lists read shares only "
                          f"the other {len(search.order) - len(read)} hubs: "
                          f"{_BOUNDS[question.measure]} = {search.bound:.6f} < the k-th best "
                          f"score {t} (k = {question.want})" if len(read) < len(search.order) else
                          "every hub's list was read: no candidate was left out")
        trace["note"] = "certified exact: no candidate sharing only hubs can enter the answer"
    else:
        trace["note"] = (f"not certified exact: {search.stopped}; candidates sharing only the "
                         f"unread hubs may be missing (raise params.hub_budget)")
    return trace


def _want(request: SearchRequest) -> int:
    """How many candidates the page needs (offset + k)."""
    return _DECLARED["k"].value(request.params) + _DECLARED["offset"].value(request.params)


def _neighbours(adj, conn, seed, types, direction, request, details, kinds) -> list[dict]:
    hops = request.params.get("hops", 2)
    cap = request.params.get("max_fanout", NEIGHBOUR_FANOUT)
    rows, capped = walks.neighbours(adj, seed["id"], types, direction, hops=hops, cap=cap)
    keys = _keys(conn, sorted({v for r in rows for v in r["path"]} | set(capped)))
    details.update(hops=hops, max_fanout=cap, reached=len(rows),
                   capped=sorted(f"{keys[v]['type']}:{keys[v]['key']}" for v in capped))
    if capped:
        details["cap_note"] = (f"{len(capped)} vertices have more than {cap} edges; the walk followed "
                               f"only their {cap} heaviest (raise params.max_fanout to see more)")
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
