"""bm25 (alias ``search``): Okapi BM25 over pgbraid's own postings, exact top-k.

Scoring (Lucene's variant, as in bm25s ``method="lucene"`` and Anserini)::

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d) = sum over query terms t of  qtf(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

with N, df and avgdl counting current fragments only. Defaults k1 = 0.9,
b = 0.4: Anserini's BEIR settings, which hold across collections better than
Lucene's 1.2 / 0.75 on short documents (measured on SciFact in bench/).

Query path:
1. read the pipeline statistics, and tokenize the query in PostgreSQL (same
   code-aware expansion and text-search configuration as ingestion) together
   with its terms' document frequencies and posting segments (packed int32
   ordinals, uint16 tf and length, in binary);
2. score every posting with numpy: exact, OR semantics, no pruning that
   could change the top k;
3. verify the best candidates against the scope (classifications, filters,
   current version, quarantine) in SQL, widening until k hits are in scope.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

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
SELECT s.fragments, s.total_length, s.next_ordinal,
       (SELECT coalesce(array_agg(ordinal), '{}') FROM pgbraid.bm25_dead
         WHERE pipeline_id = %(pipeline)s::bigint) AS dead
FROM pgbraid.bm25_stats s WHERE s.pipeline_id = %(pipeline)s::bigint
"""

# One row per (query term, segment); a term absent from the pipeline has df 0
# and no postings. Sent together with _STATS: one round trip.
_TERMS = """
WITH q AS (
    SELECT q.lexeme AS term, array_length(q.positions, 1) AS qtf, coalesce(t.df, 0) AS df
    FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) AS q
    LEFT JOIN pgbraid.bm25_terms t ON t.pipeline_id = %(pipeline)s::bigint AND t.term = q.lexeme)
SELECT q.term, q.qtf, q.df, p.ordinals, p.tfs, p.lengths
FROM q LEFT JOIN pgbraid.bm25_postings p
     ON q.df > 0 AND p.pipeline_id = %(pipeline)s::bigint AND p.term = q.term
ORDER BY q.term
"""

# Candidates arrive in score order; the first k in scope, with their columns,
# in one statement. Each candidate is one probe of (pipeline_id, bm25_ordinal).
_VERIFY = """
SELECT {columns}, f.bm25_ordinal AS ordinal
FROM unnest(%(candidates)s::int[]) WITH ORDINALITY AS c(ordinal, position)
     JOIN pgbraid.fragments f
       ON f.pipeline_id = %(scope_pipeline)s::bigint AND f.bm25_ordinal = c.ordinal
     JOIN pgbraid.versions v ON v.id = f.version_id
     JOIN pgbraid.documents d ON d.id = f.document_id
WHERE {scope}
ORDER BY c.position
LIMIT %(k)s
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
        with conn.cursor() as stats, conn.cursor(binary=True) as postings:
            stats.execute(_STATS, params)
            postings.execute(_TERMS, params)
            n, total, size, dead = stats.fetchone()
            rows = postings.fetchall()
        details: dict[str, Any] = {"engine": "pgbraid", "config": config, "k1": k1, "b": b,
                                   "documents": n, "avgdl": round(total / n, 3) if n else 0.0}
        terms = list(dict.fromkeys(r[0] for r in rows))
        if not terms:
            details.update(terms=[], explanation="the query has no searchable words "
                           "(only stop words or punctuation)")
            return Outcome([], details)
        scores, read, postings = _score(rows, n, total, size, k1, b)
        details["terms"] = [{"term": t, "qtf": q, "df": df, "idf": round(idf(df, n), 6) if df else 0.0}
                            for t, q, df in dict.fromkeys((r[0], r[1], r[2]) for r in rows)]
        details["postings_scored"] = read
        if len(dead):
            scores[np.asarray(dead, dtype=np.int64)] = 0.0
        hits, checked, rounds = _verify(conn, scores, scope, k)
        hits = [_with_matched_terms(hit, ordinal, postings) for hit, ordinal in hits]
        details.update(candidates_checked=checked, verify_rounds=rounds, rows=len(hits))
        if not hits:
            details["explanation"] = ("no query term occurs in any fragment in scope"
                                      if read == 0 else "no matching fragment is in scope")
        return Outcome(hits, details)


def _score(rows: list[tuple], n: int, total: int, size: int, k1: float,
           b: float) -> tuple[np.ndarray, int, dict[str, list[np.ndarray]]]:
    """Score every posting of the query's terms.

    Returns the scores by ordinal, the number of postings read, and each term's
    ordinals (to tell which terms matched a hit without asking the database).
    """
    avgdl = total / n if n else 1.0
    scores = np.zeros(max(size, 1), dtype=np.float32)
    postings: dict[str, list[np.ndarray]] = {}
    read = 0
    for term, qtf, df, ordinals, tfs, lengths in rows:
        if df <= 0 or ordinals is None:
            continue
        ords = np.frombuffer(ordinals, dtype="<i4")
        scores[ords] += term_scores(np.frombuffer(tfs, "<u2"), np.frombuffer(lengths, "<u2"),
                                    weight=qtf * idf(df, n), k1=k1, b=b, avgdl=avgdl)
        postings.setdefault(term, []).append(ords)
        read += len(ords)
    return scores, read, postings


def _with_matched_terms(row: Row, ordinal: int, postings: dict[str, list[np.ndarray]]) -> Row:
    matched = [t for t, arrays in postings.items() if any((a == ordinal).any() for a in arrays)]
    return dataclasses.replace(row, matched_terms=matched)


def _verify(conn: psycopg.Connection, scores: np.ndarray, scope: Scope,
            k: int) -> tuple[list[tuple[Row, int]], int, int]:
    """The k best in-scope fragments (with their ordinals): candidates in score order,
    widening each round."""
    remaining = np.flatnonzero(scores > 0)
    if not len(remaining) or k == 0:
        return [], 0, 0
    where, params = scope.where("f")
    statement = sql.SQL(_VERIFY).format(columns=sql.SQL(HIT_COLUMNS), scope=where)
    found: list[tuple[Row, int]] = []
    checked, width, rounds = 0, max(4 * k, 32), 0
    while len(found) < k and len(remaining):
        # Only the best `width` of what is left need sorting this round.
        if len(remaining) > width:
            top = np.argpartition(-scores[remaining], width - 1)[:width]
            batch, remaining = remaining[top], np.delete(remaining, top)
        else:
            batch, remaining = remaining, remaining[:0]
        batch = batch[np.lexsort((batch, -scores[batch]))]
        rounds += 1
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, {**params, "candidates": batch.tolist(), "k": k - len(found)})
            for row in cur.fetchall():
                ordinal = row.pop("ordinal")
                found.append((Row(**row, score=float(scores[ordinal])), ordinal))
        checked += len(batch)
        width *= 8
    return found, checked, rounds
