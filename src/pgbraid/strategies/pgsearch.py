"""bm25 through ParadeDB's pg_search, used only when opted in and installed.

Nothing in this module runs unless ``PGBRAID_PGSEARCH=1`` and the extension is
present; the bm25 strategy checks both before importing it. The index is the
ParadeDB BM25 index over current fragments, created on first use.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from .base import HIT_COLUMNS, Outcome, Row

_INDEX = """
CREATE INDEX IF NOT EXISTS fragments_pg_search ON pgbraid.fragments
USING bm25 (id, body) WITH (key_field = 'id')
"""

_SEARCH = """
SELECT {columns}, pdb.score(f.id) AS score
FROM pgbraid.fragments f
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
WHERE {scope} AND f.body ||| %(query)s
ORDER BY score DESC, f.id
LIMIT %(k)s
"""


def ensure_index(owner: psycopg.Connection) -> None:
    owner.execute(_INDEX)


def run_pg_search(conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
                  scope: Scope, k: int) -> Outcome:
    where, params = scope.where("f")
    statement = sql.SQL(_SEARCH).format(columns=sql.SQL(HIT_COLUMNS), scope=where)
    with conn.cursor(row_factory=class_row(Row)) as cur:
        rows = cur.execute(statement, {**params, "query": request.query, "k": k}).fetchall()
    return Outcome(rows, {"engine": "pg_search", "rows": len(rows)})
