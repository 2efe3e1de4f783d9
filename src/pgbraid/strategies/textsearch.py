"""bm25 through Tiger Data's pg_textsearch, used only when opted in and installed.

Nothing in this module runs unless ``PGBRAID_TEXTSEARCH=1``, the extension is
created in the database (the engine creates it when the server can: see
``pgbraid extension build``) and a request names ``params.engine:
"pg_textsearch"``; the bm25 strategy checks the first two before importing it.

Same scope, same response shape as pgbraid's own postings:

- one partial bm25 index per (pipeline, BM25 partition), over the fragment's
  title and body, holding current, unquarantined fragments of that
  classification set only (created on first use, by the owner role: searches
  run read-only). So N, avgdl and df are the partition's, as for pgbraid's
  postings; a scope that sees several classification sets would mix
  statistics an index cannot combine, and is refused (use engine pgbraid);
- candidates come from the index in score order and are checked against the
  whole scope (tenant, classifications, filters, current version,
  quarantine) in the same statement, widening until k are in scope;
- k1 and b are fixed when the index is built (0.9 and 0.4, as pgbraid's
  defaults); the index tokenizes with the pipeline's language (no
  per-fragment language, no code-aware expansion: those are pgbraid's).

Expired and quarantined fragments leave the partial index's scans at once
(PostgreSQL's visibility), but pg_textsearch counts their entries in its
statistics until VACUUM removes the dead tuples: scores can differ from
pgbraid's until then. No as_of (the index holds current fragments only).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ..errors import InvalidRequest, NotEnabled
from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from .base import HIT_COLUMNS, Context, Outcome, Row

K1, B = 0.9, 0.4
_TEXT = sql.SQL("(coalesce({f}.title, '') || ' ' || {f}.body)")

_PARTITIONS = """
SELECT p.id, p.classifications FROM pgbraid.bm25_partitions p
WHERE {partitions} AND EXISTS (
    SELECT 1 FROM pgbraid.bm25_partition_stats s WHERE s.pipeline_id = p.pipeline_id AND s.partition_id = p.id AND s.fragments > 0)
ORDER BY p.id
"""

_INDEX = """
CREATE INDEX IF NOT EXISTS {name} ON pgbraid.fragments
USING bm25 ({text}) WITH (text_config = {config}, k1 = {k1}, b = {b})
WHERE {predicate}
"""

# The index's candidates in score order (its predicate repeated, as literals, so the
# planner proves it), then the first k in scope; with how many candidates there were
# (a row even when none is in scope).
_SEARCH = """
WITH hits AS MATERIALIZED (
    SELECT f.id, {text} <@> to_bm25query(%(query)s, {index}) AS distance
    FROM pgbraid.fragments f WHERE {predicate}
    ORDER BY distance LIMIT %(depth)s)
SELECT c.found, r.* FROM (SELECT count(*) AS found FROM hits) AS c
LEFT JOIN LATERAL (
    SELECT {columns}, -h.distance AS score
    FROM hits h JOIN pgbraid.fragments f ON f.id = h.id
         JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
         JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
    WHERE {scope} AND h.distance < 0  -- a fragment holding no query term scores 0
    ORDER BY h.distance, f.id
    LIMIT %(k)s) AS r ON true
"""


def ensure_extension(owner: psycopg.Connection) -> bool:
    """Create the extension when the server can load it (built, preloaded); whether it
    is there now."""
    row = owner.execute("SELECT installed_version IS NOT NULL, current_setting("
                        "'shared_preload_libraries') ~ 'pg_textsearch' FROM pg_available_extensions"
                        " WHERE name = 'pg_textsearch'").fetchone()
    if row is None or not (row[0] or row[1]):
        return False
    if not row[0]:
        owner.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
    return True


def index_name(pipeline: Pipeline, partition: int) -> str:
    return f"fragments_pg_textsearch_{pipeline.id}_{partition}"


def _predicate(pipeline: Pipeline, classifications: list[str], f: str = "f") -> sql.Composable:
    alias = sql.Identifier(f)
    held = sql.Literal(classifications)
    return sql.SQL("{f}.pipeline_id = {p} AND {f}.classifications @> {c}::text[]"
                   " AND {f}.classifications <@ {c}::text[] AND {f}.current"
                   " AND NOT {f}.quarantined").format(f=alias, p=sql.Literal(pipeline.id), c=held)


def ensure_index(context: Context, pipeline: Pipeline, partition: int,
                 classifications: list[str]) -> None:
    """The partition's index, built by the owner role when it does not exist."""
    create = sql.SQL(_INDEX).format(
        name=sql.Identifier(index_name(pipeline, partition)), text=_TEXT.format(
            f=sql.Identifier("fragments")), config=sql.Literal(pipeline.language),
        k1=sql.Literal(K1), b=sql.Literal(B),
        predicate=_predicate(pipeline, classifications, "fragments"))
    if context.owner is None:
        raise NotEnabled("pg_textsearch's index for this classification set does not exist and "
                         "no owner connection is at hand to build it", strategy="bm25")
    with context.owner() as owner:
        owner.execute(create)


def run_pg_textsearch(conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
                      scope: Scope, k: int, context: Context) -> Outcome:
    for name, fixed in (("k1", K1), ("b", B)):
        if name in request.params and float(request.params[name]) != fixed:
            raise InvalidRequest(f"pg_textsearch fixes {name} at {fixed} when it builds its "
                                 "index: use engine pgbraid for other values", field=name)
    partitions, params = scope.partitions("p")
    visible = conn.execute(sql.SQL(_PARTITIONS).format(partitions=partitions), params).fetchall()
    details: dict[str, Any] = {"engine": "pg_textsearch", "k1": K1, "b": B,
                               "config": pipeline.language}
    if not visible:
        return Outcome([], {**details, "rows": 0})
    if len(visible) > 1:
        raise InvalidRequest("pg_textsearch keeps one index per classification set and this "
                             f"scope sees {len(visible)}: use engine pgbraid", field="engine")
    partition, classifications = visible[0]
    name = index_name(pipeline, partition)
    if conn.execute("SELECT to_regclass(%s) IS NULL", (f"pgbraid.{name}",)).fetchone()[0]:
        ensure_index(context, pipeline, partition, list(classifications))
    where, scope_params = scope.where("f")
    statement = sql.SQL(_SEARCH).format(
        text=_TEXT.format(f=sql.Identifier("f")), index=sql.Literal(f"pgbraid.{name}"),
        predicate=_predicate(pipeline, list(classifications)), columns=sql.SQL(HIT_COLUMNS),
        scope=where)
    depth, rounds = max(4 * k, 32), 0
    while True:  # LEFT JOIN LATERAL keeps the rows in their order
        rounds += 1
        found = conn.execute(statement, {**scope_params, "query": request.query,
                                         "depth": depth, "k": k}).fetchall()
        rows = sorted((Row(*values[1:]) for values in found if values[1] is not None),
                      key=lambda row: (-row.score, row.fragment_id))
        if len(rows) >= k or found[0][0] < depth:
            break
        depth *= 8
    details.update(index=name, candidates_checked=depth, verify_rounds=rounds, rows=len(rows))
    return Outcome(rows, details)

