"""bm25 (alias ``search``): Okapi BM25 over pgbraid's own postings, exact top-k.

Scoring (Lucene's variant, as in bm25s ``method="lucene"`` and Anserini)::

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d) = sum over query terms t of  qtf(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

with N, df and avgdl counting current fragments only. Defaults k1 = 0.9,
b = 0.4: Anserini's BEIR settings, which hold across collections better than
Lucene's 1.2 / 0.75 on short documents (measured on SciFact in bench/).

Query path (two round trips plus one per verification round):
1. tokenize the query in PostgreSQL with the same code-aware expansion and
   text-search configuration as ingestion, and read the pipeline statistics;
2. read the query terms' posting segments (packed int32 ordinals, uint16 tf
   and length) in binary and score every posting with numpy: exact, OR
   semantics, no pruning that could change the top k;
3. verify the best candidates against the scope (classifications, filters,
   current version, quarantine) in SQL, widening until k hits are in scope.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import class_row

from ..errors import InvalidRequest, NotEnabled
from ..ingest.language import detect
from ..ingest.tokens import expand_code
from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from .base import HIT_COLUMNS, Context, Outcome, Row, Strategy

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
ENGINES = ("auto", "pgbraid", "pg_search")

_STATS = """
WITH q AS (
    SELECT q.lexeme, array_length(q.positions, 1) AS qtf, coalesce(t.df, 0) AS df
    FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) AS q
    LEFT JOIN pgbraid.bm25_terms t ON t.pipeline_id = %(pipeline)s AND t.term = q.lexeme)
SELECT s.fragments, s.total_length, s.next_ordinal,
       (SELECT coalesce(array_agg(ordinal), '{}') FROM pgbraid.bm25_dead
         WHERE pipeline_id = %(pipeline)s) AS dead,
       (SELECT coalesce(array_agg(lexeme ORDER BY lexeme), '{}') FROM q) AS terms,
       (SELECT coalesce(array_agg(qtf ORDER BY lexeme), '{}') FROM q) AS qtfs,
       (SELECT coalesce(array_agg(df ORDER BY lexeme), '{}') FROM q) AS dfs
FROM pgbraid.bm25_stats s WHERE s.pipeline_id = %(pipeline)s
"""

_POSTINGS = """
SELECT term, ordinals, tfs, lengths FROM pgbraid.bm25_postings
WHERE pipeline_id = %(pipeline)s AND term = ANY(%(terms)s)
"""

# Candidates drive the join so each is one probe of (pipeline_id, bm25_ordinal);
# the scope needs only fragment columns, so verification reads no text.
_IN_SCOPE = """
SELECT f.bm25_ordinal
FROM unnest(%(candidates)s::int[]) AS c(ordinal)
     JOIN pgbraid.fragments f ON f.pipeline_id = %(scope_pipeline)s::bigint AND f.bm25_ordinal = c.ordinal
WHERE {scope}
"""

_HITS = """
SELECT {columns}, f.bm25_ordinal AS ordinal,
       ARRAY(SELECT t FROM unnest(f.bm25_terms) AS t WHERE t = ANY(%(terms)s)) AS matched_terms
FROM pgbraid.fragments f
     JOIN pgbraid.versions v ON v.id = f.version_id
     JOIN pgbraid.documents d ON d.id = f.document_id
WHERE f.pipeline_id = %(pipeline)s::bigint AND f.bm25_ordinal = ANY(%(ordinals)s::int[])
"""


def idf(df: int, n: int) -> float:
    """Lucene's BM25 idf (always positive)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def term_scores(tfs: np.ndarray, lengths: np.ndarray, *, weight: float, k1: float, b: float,
                avgdl: float) -> np.ndarray:
    """weight * tf / (tf + k1 * (1 - b + b * dl / avgdl)); weight = qtf * idf."""
    tf = tfs.astype(np.float32)
    norm = k1 * (1.0 - b + b * lengths.astype(np.float32) / np.float32(avgdl))
    return np.float32(weight) * tf / (tf + norm)


def _number(request: SearchRequest, name: str, default: float, low: float, high: float) -> float:
    value = request.params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InvalidRequest(f"params.{name} must be a number from {low} to {high}", field=name)
    return float(value)


class BM25(Strategy):
    name = "bm25"
    description = "Okapi BM25 over pgbraid's postings (OR semantics, exact top-k)"

    def validate(self, request: SearchRequest, context: Context) -> None:
        _number(request, "k1", DEFAULT_K1, 0.0, 10.0)
        _number(request, "b", DEFAULT_B, 0.0, 1.0)
        engine = request.params.get("engine", "auto")
        if engine not in ENGINES:
            raise InvalidRequest(f"params.engine must be one of {', '.join(ENGINES)}", field="engine")
        if engine == "pg_search" and not context.pgsearch:
            raise NotEnabled("pg_search is not opted in: set PGBRAID_PGSEARCH=1", strategy=self.name)

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        engine = request.params.get("engine", "auto")
        installed = "pg_search" in context.extensions
        if engine == "pg_search" and not installed:
            raise NotEnabled("the pg_search extension is not installed on this server",
                             strategy=self.name)
        if engine != "pgbraid" and context.pgsearch and installed:
            from .pgsearch import run_pg_search

            return run_pg_search(conn, pipeline, request, scope, k)
        return self._run_native(conn, pipeline, request, scope, k)

    def _run_native(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
                    scope: Scope, k: int) -> Outcome:
        k1 = _number(request, "k1", DEFAULT_K1, 0.0, 10.0)
        b = _number(request, "b", DEFAULT_B, 0.0, 1.0)
        config = detect(request.query, default=pipeline.language)
        params = {"pipeline": pipeline.id, "config": config, "text": expand_code(request.query)}
        n, total, size, dead, terms, qtfs, dfs = conn.execute(_STATS, params).fetchone()
        details: dict[str, Any] = {"engine": "pgbraid", "config": config, "k1": k1, "b": b,
                                   "documents": n, "avgdl": round(total / n, 3) if n else 0.0}
        if not terms:
            details.update(terms=[], explanation="the query has no searchable words "
                           "(only stop words or punctuation)")
            return Outcome([], details)
        scores, postings = _score(conn, pipeline.id, dict(zip(terms, qtfs)),
                                  dict(zip(terms, dfs)), n, total, size, k1, b)
        term_info = [{"term": t, "qtf": q, "df": df, "idf": round(idf(df, n), 6) if df else 0.0}
                     for t, q, df in zip(terms, qtfs, dfs)]
        details.update(terms=term_info, postings_scored=postings)
        if len(dead):
            scores[np.asarray(dead, dtype=np.int64)] = 0.0
        rows, checked, rounds = _verify(conn, scores, terms, scope, k)
        details.update(candidates_checked=checked, verify_rounds=rounds, rows=len(rows))
        if not rows:
            details["explanation"] = ("no query term occurs in any fragment in scope"
                                      if postings == 0 else "no matching fragment is in scope")
        return Outcome(rows, details)


def _score(conn: psycopg.Connection, pipeline_id: int, qtf: dict[str, int], df: dict[str, int],
           n: int, total: int, size: int, k1: float, b: float) -> tuple[np.ndarray, int]:
    """Score every posting of the query's terms; returns (scores by ordinal, postings read)."""
    avgdl = total / n if n else 1.0
    scores = np.zeros(max(size, 1), dtype=np.float32)
    postings = 0
    terms = [t for t in qtf if df[t] > 0]
    if not terms:
        return scores, 0
    with conn.cursor(binary=True) as cur:
        cur.execute(_POSTINGS, {"pipeline": pipeline_id, "terms": terms})
        for term, ordinals, tfs, lengths in cur:
            ords = np.frombuffer(ordinals, dtype="<i4")
            scores[ords] += term_scores(np.frombuffer(tfs, "<u2"), np.frombuffer(lengths, "<u2"),
                                        weight=qtf[term] * idf(df[term], n), k1=k1, b=b, avgdl=avgdl)
            postings += len(ords)
    return scores, postings


def _verify(conn: psycopg.Connection, scores: np.ndarray, terms: list[str], scope: Scope,
            k: int) -> tuple[list[Row], int, int]:
    """The k best in-scope fragments: check candidates in score order, widening each round."""
    positive = np.flatnonzero(scores > 0)
    if not len(positive) or k == 0:
        return [], 0, 0
    where, params = scope.where("f")
    statement = sql.SQL(_IN_SCOPE).format(scope=where)
    kept: list[int] = []
    start, width, rounds = 0, max(4 * k, 32), 0
    remaining = positive
    while len(kept) < k and len(remaining):
        # Only the best `width` of what is left need sorting this round.
        if len(remaining) > width:
            top = np.argpartition(-scores[remaining], width - 1)[:width]
            batch, remaining = remaining[top], np.delete(remaining, top)
        else:
            batch, remaining = remaining, remaining[:0]
        batch = batch[np.lexsort((batch, -scores[batch]))]
        rounds += 1
        allowed = {r[0] for r in conn.execute(statement, {**params, "candidates": batch.tolist()})}
        kept.extend(int(o) for o in batch if int(o) in allowed)
        start += len(batch)
        width *= 8
    winners = kept[:k]
    with conn.cursor() as cur:
        cur.execute(sql.SQL(_HITS).format(columns=sql.SQL(HIT_COLUMNS)),
                    {"pipeline": scope.pipeline_id, "terms": terms, "ordinals": winners})
        columns = [c.name for c in cur.description]
        rows = {r["ordinal"]: r for r in (dict(zip(columns, row)) for row in cur)}
    return [_row(rows[o], float(scores[o])) for o in winners], start, rounds


def _row(row: dict[str, Any], score: float) -> Row:
    row.pop("ordinal")
    return Row(**row, score=score)
