"""bm25 as of a time: an exact computation from the forward index.

The postings hold current fragments only (an expired version's fragments go to
the dead list and merges drop them), so a search ``as_of`` a time ranks the
fragments valid then from their own arrays, written at ingestion and never
changed: ``fragments.bm25_terms``, ``bm25_tfs`` and ``bm25_length``.

- N, avgdl and each term's df count the fragments valid at as_of that the
  reader's classifications may see, not quarantined, without the metadata
  filter (history.statistics_scope): what the current statistics count, at
  that time. Nothing outside the scope moves them.
- From the fragments holding a query term, one posting list per term (sorted
  by ordinal, the arrays current segments hold) goes to the same ``Ranking``
  (bm25_topk) as a current search, and the best candidates are checked against
  the whole scope (filters too) by the same statement (bm25._verify). So the
  same fragments give the same scores, ranks and ties as a current search
  would have then.

Cost: two statements, each a scan of the pipeline's fragments valid at as_of
(no index serves an arbitrary time; docs/benchmarks.md, "Point in time").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from ..ingest.tokens import expand_code
from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from . import bm25, history
from .base import Context, Outcome
from .bm25_postings import Postings
from .bm25_topk import Ranking, Term

UINT16 = 65_535

_STATS = """
SELECT count(*), coalesce(sum(f.bm25_length), 0), coalesce(max(f.bm25_ordinal), -1) + 1,
       coalesce(array_agg(DISTINCT f.ts_config::text ORDER BY f.ts_config::text), '{{}}')
FROM pgbraid.fragments f WHERE {scope}
"""

# Each query lexeme (as ingestion tokenizes: same configuration, code-aware
# expansion) with its qtf, and its postings among the fragments valid at as_of:
# each fragment's arrays unnested once, kept where the term is the query's
# (measured: array overlap (&&) or array_position per term cost 2-3x more).
_FORWARD = """
WITH q AS MATERIALIZED (
    SELECT lexeme AS term, array_length(positions, 1) AS qtf
    FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s))),
p AS (
    SELECT t.term, array_agg(f.bm25_ordinal ORDER BY f.bm25_ordinal) AS ordinals,
           array_agg(t.tf ORDER BY f.bm25_ordinal) AS tfs,
           array_agg(f.bm25_length ORDER BY f.bm25_ordinal) AS lengths
    FROM pgbraid.fragments f
         CROSS JOIN LATERAL (
             SELECT u.term, u.tf FROM unnest(f.bm25_terms, f.bm25_tfs) AS u(term, tf)
             WHERE u.term = ANY(ARRAY(SELECT term FROM q))) AS t
    WHERE {scope}
    GROUP BY t.term)
SELECT q.term, q.qtf, p.ordinals, p.tfs, p.lengths FROM q LEFT JOIN p USING (term)
ORDER BY q.term
"""


def run_as_of(conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
              scope: Scope, k: int, context: Context) -> Outcome:
    strategy = bm25.BM25()
    k1, b = strategy.param(request, "k1"), strategy.param(request, "b")
    where, params = history.statistics_scope(scope).where("f")
    n, total, size, configs = conn.execute(sql.SQL(_STATS).format(scope=where),
                                           params).fetchone()
    config = history.configuration(pipeline, request.query, list(configs))
    rows = conn.execute(sql.SQL(_FORWARD).format(scope=where),
                        {**params, "config": config, "text": expand_code(request.query)}).fetchall()
    details: dict[str, Any] = {"engine": "pgbraid", "index": "forward index, as of",
                               "as_of": scope.as_of.isoformat(), "config": config, "k1": k1,
                               "b": b, "documents": n, "avgdl": round(total / n, 3) if n else 0.0}
    if not rows:
        details.update(terms=[], explanation="the query has no searchable words "
                       "(only stop words or punctuation)")
        return Outcome([], details)
    terms = [_term(term, qtf, arrays, n) for term, qtf, *arrays in rows]
    details["terms"] = [{"term": t.name, "qtf": qtf, "df": _df(t), "idf": round(
        bm25.idf(_df(t), n), 6) if _df(t) else 0.0} for t, (_, qtf, *_) in zip(terms, rows)]
    ranking = Ranking(terms, size, np.zeros(0, dtype=np.int64),
                      (k1, b, total / n if n else 1.0),
                      pruning=strategy.param(request, "pruning"))
    try:
        found, checked, rounds = bm25._verify(conn, ranking, scope, k)
    finally:
        ranking.release()
    stats = ranking.stats
    details.update(postings=stats.postings, postings_scored=stats.scored,
                   candidates=stats.candidates, exhaustive=stats.exhaustive,
                   candidates_checked=checked, verify_rounds=rounds, rows=len(found))
    if not found:
        details["explanation"] = ("no query term occurs in any fragment in scope"
                                  if stats.postings == 0 else "no matching fragment is in scope")
    return Outcome(found, details)


def _term(name: str, qtf: int, arrays: list[list[int] | None], n: int) -> Term:
    """A query term and its one posting list (qtf * idf as its weight)."""
    ordinals, tfs, lengths = arrays
    if ordinals is None:
        return Term(name, 0.0, [])
    postings = Postings(np.asarray(ordinals, dtype="<i4"),
                        np.minimum(np.asarray(tfs, dtype=np.int64), UINT16).astype("<u2"),
                        np.minimum(np.asarray(lengths, dtype=np.int64), UINT16).astype("<u2"))
    return Term(name, qtf * bm25.idf(len(postings), n), [postings])


def _df(term: Term) -> int:
    return sum(len(p) for p in term.lists)
