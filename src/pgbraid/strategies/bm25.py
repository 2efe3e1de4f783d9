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
   with its terms' document frequencies and the segments holding their
   postings (one round trip);
2. take each (segment, term)'s packed arrays (int32 ordinals, uint16 tf and
   length) from the process's cache of immutable segments, fetching the
   misses in binary in one statement (bm25_postings);
3. score every posting with numpy: exact, OR semantics, no pruning that
   could change the top k;
4. verify the best candidates against the scope (classifications, filters,
   current version, quarantine) in SQL, widening until k hits are in scope.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

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
from . import bm25_postings
from .base import HIT_COLUMNS, Context, Outcome, Row, Strategy
from .bm25_postings import Postings

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
ENGINES = ("auto", "pgbraid", "pg_search")

_STATS = """
SELECT s.fragments, s.total_length, s.next_ordinal,
       (SELECT coalesce(array_agg(ordinal), '{}') FROM pgbraid.bm25_dead
         WHERE pipeline_id = %(pipeline)s::bigint) AS dead
FROM pgbraid.bm25_stats s WHERE s.pipeline_id = %(pipeline)s::bigint
"""

# One row per (query term, segment): the query's lexemes (same configuration
# and code-aware expansion as ingestion), their document frequencies and the
# segments holding their postings, with the arrays of short posting lists
# inline (rare terms: nothing worth caching); bm25_postings.load gets the rest.
_TERMS = """
WITH q AS (
    SELECT q.lexeme AS term, array_length(q.positions, 1) AS qtf, coalesce(t.df, 0) AS df
    FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) AS q
    LEFT JOIN pgbraid.bm25_terms t ON t.pipeline_id = %(pipeline)s::bigint AND t.term = q.lexeme)
SELECT q.term, q.qtf, q.df, p.segment,
       CASE WHEN p.postings <= %(inline)s THEN p.ordinals END,
       CASE WHEN p.postings <= %(inline)s THEN p.tfs END,
       CASE WHEN p.postings <= %(inline)s THEN p.lengths END
FROM q LEFT JOIN pgbraid.bm25_postings p
     ON q.df > 0 AND p.pipeline_id = %(pipeline)s::bigint AND p.term = q.term
ORDER BY q.term, p.segment
"""
INLINE_POSTINGS = 128

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
        return self._run_native(conn, pipeline, request, scope, k, context)

    def _run_native(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
                    scope: Scope, k: int, context: Context) -> Outcome:
        k1 = _number(request, "k1", DEFAULT_K1, 0.0, 10.0)
        b = _number(request, "b", DEFAULT_B, 0.0, 1.0)
        config = detect(request.query, default=pipeline.language)
        params = {"pipeline": pipeline.id, "config": config, "text": expand_code(request.query),
                  "inline": INLINE_POSTINGS}
        with conn.cursor() as stats, conn.cursor(binary=True) as segments:
            stats.execute(_STATS, params)
            segments.execute(_TERMS, params)
            n, total, size, dead = stats.fetchone()
            rows = segments.fetchall()
        details: dict[str, Any] = {"engine": "pgbraid", "config": config, "k1": k1, "b": b,
                                   "documents": n, "avgdl": round(total / n, 3) if n else 0.0}
        terms = {row[0]: (row[1], row[2]) for row in rows}
        if not terms:
            details.update(terms=[], explanation="the query has no searchable words "
                           "(only stop words or punctuation)")
            return Outcome([], details)
        lists, fetched = bm25_postings.load(
            conn, pipeline.id, pipeline.created_at,
            [((segment, term), arrays) for term, _, _, segment, *arrays in rows
             if segment is not None], context.postings)
        scores, ordinals = _score(terms, lists, n, total, size, k1, b)
        details["terms"] = [{"term": t, "qtf": q, "df": df, "idf": round(idf(df, n), 6) if df else 0.0}
                            for t, (q, df) in terms.items()]
        read = sum(len(p) for p in lists.values())
        details.update(postings_scored=read, postings_fetched=fetched)
        if len(dead):
            scores[np.asarray(dead, dtype=np.int64)] = 0.0
        hits, checked, rounds = _verify(conn, scores, scope, k, _sample(terms, lists))
        hits = _with_matched_terms(hits, lists, ordinals, len(scores))
        details.update(candidates_checked=checked, verify_rounds=rounds, rows=len(hits))
        if not hits:
            details["explanation"] = ("no query term occurs in any fragment in scope"
                                      if read == 0 else "no matching fragment is in scope")
        return Outcome(hits, details)


def _score(terms: dict[str, tuple[int, int]], lists: dict[tuple[int, str], Postings], n: int,
           total: int, size: int, k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Score every posting of the query's terms (exact, OR semantics).

    Returns the scores by ordinal (one bincount over all postings, summed in
    float64) and all postings' ordinals, list after list.
    """
    avgdl = total / n if n else 1.0
    if not lists:
        return np.zeros(max(size, 1), dtype=np.float32), np.zeros(0, dtype=np.int32)
    ordinals = np.concatenate([p.ordinals for p in lists.values()])
    weights = np.concatenate([np.float32(terms[term][0] * idf(terms[term][1], n))
                              * postings.impacts(k1, b, avgdl)
                              for (_, term), postings in lists.items()])
    scores = np.bincount(ordinals, weights=weights, minlength=max(size, 1)).astype(np.float32)
    return scores, ordinals


def _with_matched_terms(hits: list[tuple[Row, int]], lists: dict[tuple[int, str], Postings],
                        ordinals: np.ndarray, size: int) -> list[Row]:
    """Each hit with the query terms whose postings hold its ordinal (a few numpy
    calls over all postings, not a few per list)."""
    if not hits:
        return []
    slot = np.full(size, -1, dtype=np.int32)
    slot[[ordinal for _, ordinal in hits]] = np.arange(len(hits), dtype=np.int32)
    names = [term for _, term in lists]
    positions = slot[ordinals]
    owners = np.repeat(np.arange(len(names)), [len(p) for p in lists.values()])
    found = positions >= 0
    matched: list[dict[str, None]] = [{} for _ in hits]
    for position, owner in zip(positions[found].tolist(), owners[found].tolist()):
        matched[position][names[owner]] = None
    return [dataclasses.replace(row, matched_terms=sorted(terms))
            for (row, _), terms in zip(hits, matched)]


def _verify(conn: psycopg.Connection, scores: np.ndarray, scope: Scope, k: int,
            sample: np.ndarray) -> tuple[list[tuple[Row, int]], int, int]:
    """The k best in-scope fragments: candidates in score order, widening each round."""
    if k == 0:
        return [], 0, 0
    where, params = scope.where("f")
    statement = sql.SQL(_VERIFY).format(columns=sql.SQL(HIT_COLUMNS), scope=where)
    found: list[tuple[Row, int]] = []
    checked = rounds = 0
    for batch in _batches(scores, max(4 * k, 32), sample):
        rounds += 1
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, {**params, "candidates": batch.tolist(), "k": k - len(found)})
            for row in cur.fetchall():
                ordinal = row.pop("ordinal")
                found.append((Row(**row, score=float(scores[ordinal])), ordinal))
        checked += len(batch)
        if len(found) >= k:
            break
    return found, checked, rounds


def _batches(scores: np.ndarray, width: int, sample: np.ndarray) -> Iterator[np.ndarray]:
    """Ordinals with a positive score, best first (ties by ordinal), in batches
    growing eightfold; only each batch's members are sorted."""
    def ordered(batch: np.ndarray) -> np.ndarray:
        return batch[np.lexsort((batch, -scores[batch]))]

    first = _top(scores, width, sample)
    if not len(first):
        return
    yield ordered(first)
    remaining = np.flatnonzero(scores > 0)
    remaining = remaining[~np.isin(remaining, first, assume_unique=True)]
    while len(remaining):
        width *= 8
        if len(remaining) > width:
            pick = np.argpartition(-scores[remaining], width - 1)[:width]
            batch, remaining = remaining[pick], np.delete(remaining, pick)
        else:
            batch, remaining = remaining, remaining[:0]
        yield ordered(batch)


def _top(scores: np.ndarray, width: int, sample: np.ndarray) -> np.ndarray:
    """The ``width`` best positive ordinals, unordered.

    The width-th best score of a sample of distinct ordinals is a lower bound of
    the width-th best overall, so only ordinals scoring at least that much need
    partitioning (a few hundred instead of every ordinal of the pipeline).
    """
    pool = None
    if len(sample) > width:
        theta = np.partition(scores[sample], len(sample) - width)[len(sample) - width]
        if theta > 0:
            pool = np.flatnonzero(scores >= theta)
    if pool is None:
        pool = np.flatnonzero(scores > 0)
    if len(pool) > width:
        pool = pool[np.argpartition(scores[pool], len(pool) - width)[-width:]]
    return pool


def _sample(terms: dict[str, tuple[int, int]], lists: dict[tuple[int, str], Postings],
            size: int = 4096) -> np.ndarray:
    """Distinct ordinals from the rarest terms' postings (the likeliest best scores)."""
    chosen, count = [], 0
    for (_, term), postings in sorted(lists.items(), key=lambda item: terms[item[0][1]][1]):
        if count >= size:
            break
        chosen.append(postings.ordinals[:size - count])
        count += len(chosen[-1])
    if not chosen:
        return np.zeros(0, dtype=np.int32)
    ordinals = np.sort(np.concatenate(chosen))  # np.unique hashes: 10x slower here
    return ordinals[np.concatenate(([True], ordinals[1:] != ordinals[:-1]))]
