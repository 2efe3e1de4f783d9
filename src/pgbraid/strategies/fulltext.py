"""fulltext: PostgreSQL text search over the stored tsvector.

The query is parsed with ``websearch_to_tsquery`` in the pipeline's only
text-search configuration, or, when its fragments use several, in that of the
query's detected language (the pipeline's language when detection is unsure),
matched against the GIN-indexed ``tsv`` and ranked by ``ts_rank_cd`` divided
by 1 + log(length) (normalization 1). Every word must match (AND semantics), so
when nothing matches the explanation names the tokens that over-restricted it:
each token's document frequency in scope and how many rows would match
without it (seed 002).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from . import history, query_language
from .base import HIT_COLUMNS, Context, Outcome, Row, Strategy
from .params import HIGHLIGHT, PAGING, Param

# Ties in ingest order (fragment ids are random).
_SEARCH = """
SELECT {columns}, ts_rank_cd(f.tsv, q.query, 1) AS score
FROM (SELECT websearch_to_tsquery(%(config)s::regconfig, %(query)s) AS query) AS q,
     pgbraid.fragments f
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
WHERE {scope} AND f.tsv @@ q.query AND ts_rank_cd(f.tsv, q.query, 1) >= %(threshold)s
ORDER BY score DESC, f.bm25_ordinal
LIMIT %(k)s
"""

# The tsquery, and the text-search configurations of the partitions in scope.
_QUERY_TEXT = sql.SQL("SELECT websearch_to_tsquery(%(config)s::regconfig, %(query)s)::text, {configs}")
_TSQUERY = "SELECT websearch_to_tsquery(%(config)s::regconfig, %(query)s)::text"

_LEXEME = re.compile(r"'((?:[^']|'')*)'")
MAX_EXPLAINED_TOKENS = 64


def tokens_of(tsquery: str) -> list[str]:
    """The distinct lexemes of a tsquery's text form, in order."""
    return list(dict.fromkeys(m.group(1).replace("''", "'") for m in _LEXEME.finditer(tsquery)))


def _quoted(token: str) -> str:
    return "'" + token.replace("'", "''") + "'"


class FullText(Strategy):
    name = "fulltext"
    description = "PostgreSQL full-text search: stemmed words, all must match, ts_rank_cd"
    params = (*PAGING, HIGHLIGHT, Param(
        "threshold", "number", 0.0, "the minimum score (ts_rank_cd / (1 + ln length)); "
        "null: 0", low=0.0, nullable=True))

    def unavailable(self, pipeline: Pipeline, context: Context) -> str | None:
        if not pipeline.fulltext:
            return f"pipeline {pipeline.name!r} was created without full-text search"
        return None

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        params: dict[str, Any] = {"query": request.query, "k": k,
                                  "threshold": self.param(request, "threshold")}
        config, tsquery = _tsquery(conn, pipeline, request.query, scope, context, params)
        tokens = tokens_of(tsquery)
        details: dict[str, Any] = {"raw_query": request.query, "config": config,
                                   "tsquery": tsquery, "tokens": tokens}
        if not tokens:
            details.update(rows=0, explanation="the query has no searchable words "
                           "(only stop words or punctuation)")
            return Outcome([], details)
        search, scope_params = statement(scope)
        with conn.cursor(row_factory=class_row(Row)) as cur:
            rows = cur.execute(search, {**params, **scope_params}).fetchall()
        details["rows"] = len(rows)
        if not rows and k > 0:
            details.update(explain_zero_rows(conn, tokens, scope))
        return Outcome(rows, details)


def statement(scope: Scope) -> tuple[sql.Composed, dict[str, Any]]:
    """The search statement under ``scope``, and the scope's parameters (the request
    adds ``config``, ``query``, ``threshold`` and ``k``)."""
    where, params = scope.where("f")
    return sql.SQL(_SEARCH).format(columns=sql.SQL(HIT_COLUMNS), scope=where), params


def _tsquery(conn: psycopg.Connection, pipeline: Pipeline, query: str, scope: Scope,
             context: Context, params: dict[str, Any]) -> tuple[str, str]:
    """The configuration and the tsquery the query becomes: in the configuration(s) of
    the partitions in scope, or as of a time, of the fragments valid then
    (strategies/history.py)."""
    if scope.as_of is not None:
        params["config"] = history.configuration_at(conn, pipeline, scope, query)
        return params["config"], conn.execute(_TSQUERY, params).fetchone()[0]
    held = scope.classifications
    config = params["config"] = query_language.choose(context.languages, pipeline, held, query)
    partitions, partition_params = scope.partitions("p")
    statement = _QUERY_TEXT.format(
        configs=sql.SQL(query_language.CONFIGS).format(partitions=partitions))
    tsquery, configs = conn.execute(statement, {**params, **partition_params}).fetchone()
    again = query_language.recheck(context.languages, pipeline, held, query, config, configs)
    if again:
        config = params["config"] = again
        tsquery = conn.execute(statement, {**params, **partition_params}).fetchone()[0]
    return config, tsquery


# Each tsvector is read (detoasted) once, without its positions, then matched token by
# token: half the time of comparing every token with tsvector_to_array's lexemes.
_PATTERNS = """
SELECT ARRAY(SELECT u.t FROM unnest(%(tokens)s::text[], %(token_queries)s::tsquery[]) AS u (t, q)
             WHERE l.tsv @@ u.q) AS present,
       count(*) AS fragments
FROM pgbraid.fragments f
     CROSS JOIN LATERAL (SELECT strip(f.tsv) AS tsv OFFSET 0) AS l
WHERE {scope} AND f.tsv @@ %(any_token)s::tsquery
GROUP BY 1
"""


def explain_zero_rows(conn: psycopg.Connection, tokens: list[str], scope: Scope) -> dict[str, Any]:
    """Which tokens over-restricted an AND query, measured within the scope.

    One pass over the fragments holding any token groups them by which tokens
    they hold (each tsvector is read once). From that: each token's document
    frequency, and how many fragments would match all the *other* tokens.
    Tokens found nowhere restrict by themselves; when every token exists, the
    restricting ones are those whose removal lets rows through. ``best_partial``
    is the most query tokens any one fragment holds.
    """
    tokens = tokens[:MAX_EXPLAINED_TOKENS]
    where, params = scope.where("f")
    queries = [_quoted(t) for t in tokens]
    params.update(tokens=tokens, token_queries=queries, any_token=" | ".join(queries))
    patterns = conn.execute(sql.SQL(_PATTERNS).format(scope=where), params).fetchall()
    frequencies = {t: 0 for t in tokens}
    rows_without = {t: 0 for t in tokens}
    best = 0
    for present, count in patterns:
        held = set(present)
        best = max(best, len(held))
        for token in held:
            frequencies[token] += count
        missing = [t for t in tokens if t not in held]
        if len(missing) == 1:
            rows_without[missing[0]] += count
    n = len(tokens)
    absent = [t for t in tokens if frequencies[t] == 0]
    restricting = absent or [t for t in tokens if rows_without[t] > 0]
    return {
        "token_document_frequency": frequencies,
        "rows_without_token": rows_without,
        "restricting_tokens": restricting,
        "best_partial": {"tokens_matched": best, "of": n},
        "explanation": _explanation(absent, restricting, best, n),
    }


def _explanation(absent: list[str], restricting: list[str], best: int, n: int) -> str:
    if absent:
        return (f"no fragment in scope contains {', '.join(absent)}; every word must match, "
                "so these tokens alone empty the result")
    if restricting:
        return (f"every token occurs somewhere, but no fragment holds all {n}; dropping any of "
                f"{', '.join(restricting)} would let rows through")
    return (f"every token occurs somewhere, but at most {best} of the {n} occur together in one "
            "fragment; the query is too long for AND matching (try bm25)")
