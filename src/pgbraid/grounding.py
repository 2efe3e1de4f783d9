"""Grounding: resolve a value (a supplier name someone typed) to one entity.

The cascade tries strategies from least to most likely to produce a false
positive on a short proper noun, stopping at the first that returns anything:
exact -> fuzzy -> fulltext -> bm25 (configurable). A match is evidence, not
authority (seed 000):

- one exact match                      -> ``resolved``
- an exact tie, or an approximate match -> ``clarification_needed``, with
  ``evidence.strategy`` and the candidates
- nothing                              -> ``not_found``, with ``strategiesTried``
  listing what actually ran, failed softly (an extension missing) or was
  skipped (an opt-in gate that is off), so "fuzzy ran and found nothing"
  differs from "fuzzy never ran".

The same searches answer ``search_source`` (fuzzy, fulltext, bm25 over an
entity source's text within scope values). Both run in a session as the
tenant's source role (``sources.reading``), never as the login role; the
cascade runs in one such session, each strategy under a savepoint so one that
fails (an extension missing) leaves the next its transaction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .errors import InvalidRequest
from .sources import Source, scope_condition

CASCADE = ("exact", "fuzzy", "fulltext", "bm25")
GATED = {"pg_search": "pgsearch"}
FUZZY_THRESHOLD = 0.4
LIMIT = 10

_EXACT = "SELECT {key} AS key, {text} AS text, 1.0::float8 AS score FROM {table} WHERE {scope} AND lower({text}) = lower(%(q)s) ORDER BY 1 LIMIT %(limit)s"
_FUZZY = ("SELECT {key} AS key, {text} AS text, similarity({text}, %(q)s)::float8 AS score"
          " FROM {table} WHERE {scope} AND {text} %% %(q)s ORDER BY score DESC, 1 LIMIT %(limit)s")
_FULLTEXT = ("SELECT {key} AS key, {text} AS text,"
             " ts_rank_cd(to_tsvector({lang}::regconfig, {text}), websearch_to_tsquery({lang}::regconfig, %(q)s), 1)::float8 AS score"
             " FROM {table} WHERE {scope} AND to_tsvector({lang}::regconfig, {text})"
             " @@ websearch_to_tsquery({lang}::regconfig, %(q)s) ORDER BY score DESC, 1 LIMIT %(limit)s")
# BM25 over the scoped rows, computed on the fly (Lucene idf, k1 0.9, b 0.4; dl = distinct lexemes).
_BM25 = """
WITH q AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector({lang}::regconfig, %(q)s))),
docs AS (SELECT {key} AS key, {text} AS text, to_tsvector({lang}::regconfig, {text}) AS tsv
         FROM {table} WHERE {scope}),
stats AS (SELECT count(*) AS n, greatest(avg(length(tsv)), 1) AS avgdl FROM docs),
df AS (SELECT q.lexeme, count(d.key) AS df FROM q LEFT JOIN docs d
         ON d.tsv @@ to_tsquery('simple', quote_literal(q.lexeme)) GROUP BY q.lexeme),
hits AS (SELECT d.key, d.text, df.lexeme, df.df, length(d.tsv) AS dl,
                (SELECT count(*) FROM unnest(d.tsv) u WHERE u.lexeme = df.lexeme) AS tf
         FROM docs d JOIN df ON df.df > 0 AND d.tsv @@ to_tsquery('simple', quote_literal(df.lexeme)))
SELECT key, text, sum(ln(1 + (s.n - df + 0.5) / (df + 0.5))
                     * (tf * 1.0 / (tf + 0.9 * (1 - 0.4 + 0.4 * dl / s.avgdl))))::float8 AS score
FROM hits, stats s GROUP BY key, text ORDER BY score DESC, 1 LIMIT %(limit)s
"""
TEMPLATES = {"exact": _EXACT, "fuzzy": _FUZZY, "fulltext": _FULLTEXT, "bm25": _BM25}


@dataclass(frozen=True)
class Gates:
    pgsearch: bool = False


def validate_cascade(strategies: list[str] | None) -> list[str]:
    chosen = list(strategies or CASCADE)
    allowed = [*TEMPLATES, *GATED]
    unknown = [s for s in chosen if s not in allowed]
    if unknown or not chosen:
        raise InvalidRequest(f"unknown grounding strategies {unknown}; use any of {allowed}",
                             field="strategies")
    return chosen


def candidates(conn: psycopg.Connection, source: Source, strategy: str, value: str,
               scope: dict[str, Any], limit: int = LIMIT) -> list[dict[str, Any]]:
    """One strategy over the source's text within the scope, best first (in the caller's session)."""
    where, params = scope_condition(source, scope)
    params = {**params, "q": value, "limit": limit}
    statement = sql.SQL(TEMPLATES[strategy]).format(
        key=sql.Identifier(source.key_column), text=source.text, table=source.table,
        scope=where, lang=sql.Literal(source.language))
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT set_config('pg_trgm.similarity_threshold', %s, true)",
                    (str(FUZZY_THRESHOLD),))
        return cur.execute(statement, params).fetchall()


MAX_VALUE_CHARS = 1000
"""The longest value grounded or searched in an entity source (SourceSearch.query too)."""


def ground(source_loader: Callable[[], tuple[Source, Callable]], entity: str, value: str, *,
           scope: dict[str, Any] | None = None, strategies: list[str] | None = None,
           gates: Gates = Gates()) -> dict[str, Any]:
    """``source_loader`` returns the source and a factory of read sessions over it."""
    if (not isinstance(value, str) or not value.strip() or "\x00" in value
            or len(value) > MAX_VALUE_CHARS):
        raise InvalidRequest("the value to ground must be 1 to 1000 characters of text", field="value")
    chosen = validate_cascade(strategies)
    scope = scope or {}
    tried: list[dict[str, Any]] = []
    runnable = []
    for name in chosen:
        gate = GATED.get(name)
        if gate and not getattr(gates, gate):
            tried.append({"strategy": name, "status": "skipped",
                          "reason": f"not opted in (PGBRAID_{gate.upper()}=1)"})
        else:
            runnable.append(name)
    result: dict[str, Any] = {"entity": entity, "value": value, "scope": scope}
    if not runnable:  # every strategy gated off: answer without touching the database
        return {**result, "status": "not_found", "strategiesTried": tried}
    source, read_session = source_loader()
    scope_condition(source, scope)  # reject unknown scope columns before any search
    with read_session() as conn:
        for name in runnable:
            found = _attempt(conn, source, name, value, scope, tried)
            if found:
                return {**result, **_outcome(name, found), "strategiesTried": tried}
    return {**result, "status": "not_found", "strategiesTried": tried}


def _attempt(conn: psycopg.Connection, source: Source, name: str, value: str,
             scope: dict[str, Any], tried: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run one strategy of the cascade and record what happened to it."""
    if name in GATED:
        tried.append({"strategy": name, "status": "failed",
                      "reason": "pg_search grounding is not supported on entity sources yet"})
        return []
    began = time.perf_counter()
    try:
        with conn.transaction():  # a savepoint: a failure leaves the session usable
            found = candidates(conn, source, name, value, scope)
    except (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedObject) as exc:
        tried.append({"strategy": name, "status": "failed", "ms": _ms(began),
                      "reason": "extension missing: PostgreSQL lacks a function or operator "
                                f"this strategy needs (SQLSTATE {exc.sqlstate})"})
        return []
    except psycopg.errors.QueryCanceled:
        tried.append({"strategy": name, "status": "failed", "ms": _ms(began),
                      "reason": "PostgreSQL cancelled the statement (statement timeout)"})
        return []
    tried.append({"strategy": name, "status": "ran", "hits": len(found), "ms": _ms(began)})
    return found


def _outcome(strategy: str, found: list[dict[str, Any]]) -> dict[str, Any]:
    shown = [{"key": str(c["key"]), "text": c["text"], "score": round(float(c["score"]), 6)}
             for c in found]
    if strategy == "exact" and len(found) == 1:
        return {"status": "resolved", "match": shown[0],
                "evidence": {"strategy": "exact", "candidates": shown}}
    reason = "exact tie" if strategy == "exact" else "approximate match"
    return {"status": "clarification_needed", "candidates": shown,
            "evidence": {"strategy": strategy, "reason": reason, "candidates": shown}}


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)

