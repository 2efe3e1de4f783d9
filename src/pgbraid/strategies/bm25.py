"""bm25 (alias ``search``): Okapi BM25 over pgbraid's own postings, exact top-k.

Scoring (Lucene's variant, as in bm25s ``method="lucene"`` and Anserini)::

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d) = sum over query terms t of  qtf(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

with N, df and avgdl counting current fragments of the BM25 partitions in the
reader's scope only (each classification set is a partition: see
ingest/bm25_index.py), so nothing outside the scope moves a score, a rank or
a value of the trace. Defaults k1 = 0.9, b = 0.4: Anserini's BEIR settings,
which hold across collections better than Lucene's 1.2 / 0.75 on short
documents (measured on SciFact in bench/).

Query path:
1. read the statistics of the partitions in scope, and tokenize the query in
   PostgreSQL (same code-aware expansion and text-search configuration as
   ingestion) together with its terms' document frequencies and the segments
   holding their postings (one round trip);
2. take each (segment, term)'s packed arrays (int32 ordinals, uint16 tf and
   length) from the process's cache of immutable segments, fetching the
   misses in binary in one statement (bm25_postings);
3. rank with numpy (bm25_topk): exact top-k, OR semantics, by block-max over
   windows of ordinals (bm25_blockmax: only windows whose bound reaches the
   k-th best score are scored) once a query holds 750k postings, or 250k
   with 20 terms or more, scoring every posting below (a term's lists in
   several segments merged into one first: bm25_postings.by_term);
   ``params.pruning`` "blockmax", "maxscore" or "none" forces one (all give
   the same top k and the same scores);
4. verify the best candidates against the scope (classifications, filters,
   current version, quarantine) in SQL, widening until k hits are in scope.

As of a time, the postings (current fragments only) cannot answer:
bm25_history.py ranks the forward index of the fragments valid then.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .. import encryption
from ..db.database import SnapshotEnded, run_last
from ..errors import InvalidRequest, NotEnabled
from ..ingest.tokens import expand_code
from ..models import SearchRequest, number
from ..pipelines import Pipeline
from ..scope import Scope
from . import bm25_postings, query_language
from .base import HIT_COLUMNS, Context, Opening, Outcome, Row, Strategy
from .params import HIGHLIGHT, PAGING, Param
from .bm25_postings import Postings
from .bm25_topk import Ranking, Term

DEFAULT_K1 = 0.9
DEFAULT_B = 0.4
ENGINES = ("auto", "pgbraid", "pg_search", "pg_textsearch")
PRUNING = ("auto", "blockmax", "maxscore", "none")
# Opt-in engines: the Context flag and the variable that sets it.
GATES = {"pg_search": ("pgsearch", "PGBRAID_PGSEARCH"),
         "pg_textsearch": ("textsearch", "PGBRAID_TEXTSEARCH")}

# The statistics of the partitions in scope ({partitions}: Scope.partitions; dead
# ordinals on the first row only), then one row per (query term, segment of those
# partitions): the query's lexemes (same configuration and code-aware expansion as
# ingestion) and the segments holding their postings, with the arrays of short
# lists inline (rare terms: nothing worth caching); bm25_postings.load gets the
# rest. One round trip.
_TERMS = sql.SQL("""
WITH parts AS MATERIALIZED (SELECT p.id FROM pgbraid.bm25_partitions p WHERE {partitions}),
s AS (
    SELECT coalesce(sum(st.fragments), 0)::bigint AS fragments,
           coalesce(sum(st.total_length), 0)::bigint AS total_length,
           coalesce(array_agg(DISTINCT st.config ORDER BY st.config)
                    FILTER (WHERE st.fragments > 0), '{{}}') AS configs
    FROM pgbraid.bm25_partition_stats st
    WHERE st.pipeline_id = %(scope_pipeline)s::bigint AND st.partition_id IN (SELECT id FROM parts)),
h AS (
    SELECT b.next_ordinal,
           (SELECT coalesce(array_agg(d.ordinal), '{{}}') FROM pgbraid.bm25_dead d
             WHERE d.pipeline_id = %(scope_pipeline)s::bigint
               AND d.partition_id IN (SELECT id FROM parts)) AS dead
    FROM pgbraid.bm25_stats b WHERE b.pipeline_id = %(scope_pipeline)s::bigint),
l AS (
    SELECT q.lexeme AS term, array_length(q.positions, 1) AS qtf, pp.segment,
           CASE WHEN pp.postings <= %(inline)s THEN pp.ordinals END AS ordinals,
           CASE WHEN pp.postings <= %(inline)s THEN pp.tfs END AS tfs,
           CASE WHEN pp.postings <= %(inline)s THEN pp.lengths END AS lengths
    FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s)) AS q
    LEFT JOIN pgbraid.bm25_postings pp
           ON pp.pipeline_id = %(scope_pipeline)s::bigint AND pp.term = q.lexeme
          AND pp.partition_id = ANY(ARRAY(SELECT id FROM parts)))
SELECT s.fragments, s.total_length, h.next_ordinal, s.configs,
       CASE WHEN row_number() OVER (ORDER BY l.term, l.segment) = 1 THEN h.dead END,
       l.term, l.qtf, l.segment, l.ordinals, l.tfs, l.lengths
FROM s CROSS JOIN h LEFT JOIN l ON true
ORDER BY l.term, l.segment
""")
INLINE_POSTINGS = 128

# Candidates arrive in score order; the first k in scope, with their columns,
# in one statement. Each candidate is one probe of (pipeline_id, bm25_ordinal).
_VERIFY = """
SELECT {columns}, f.bm25_ordinal AS ordinal
FROM unnest(%(candidates)s::int[]) WITH ORDINALITY AS c(ordinal, position)
     JOIN pgbraid.fragments f
       ON f.pipeline_id = %(scope_pipeline)s::bigint AND f.bm25_ordinal = c.ordinal
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
WHERE {scope}
ORDER BY c.position
LIMIT %(k)s
"""


def _terms(pipeline: Pipeline, query: str, scope: Scope, context: Context) -> Opening:
    """The statement of the query's terms and statistics (_TERMS) in the configuration
    chosen for it."""
    config = query_language.choose(context.languages, pipeline, scope.classifications, query)
    partitions, params = scope.partitions("p")
    params.update(config=config, text=expand_code(query), inline=INLINE_POSTINGS)
    return Opening(_TERMS.format(partitions=partitions), params, (pipeline, scope, query),
                   binary=True)


def _tokenize(conn: psycopg.Connection, pipeline: Pipeline, query: str, scope: Scope,
              context: Context) -> tuple[str, tuple[int, int, int, list[int]], list[tuple]]:
    """The configuration used, the statistics in scope (N, total length, ordinals, dead)
    and a row per (term, segment): term, qtf, segment, arrays (or None). The statement
    was usually sent ahead (opening.py); only when it was built from these inputs
    are its rows used."""
    terms = context.opened
    sent = terms is not None and terms.inputs == (pipeline, scope, query)
    if not sent:
        terms = _terms(pipeline, query, scope, context)
    params = terms.params
    with conn.cursor(binary=True) as cur:
        rows = terms.rows() if sent else cur.execute(terms.statement, params).fetchall()
        again = rows and query_language.recheck(context.languages, pipeline,
                                                scope.classifications, query, params["config"],
                                                rows[0][3])
        if again:
            params = {**params, "config": again}
            rows = cur.execute(terms.statement, params).fetchall()
    if not rows:
        return params["config"], (0, 0, 0, []), []
    n, total, size, _, dead = rows[0][:5]
    return params["config"], (n, total, size, dead), [row[5:] for row in rows if row[5] is not None]


def _rank(conn: psycopg.Connection, pipeline: Pipeline, rows: list[tuple], qtfs: dict[str, int],
          stats: tuple[int, int, int, list[int]], context: Context, *, k1: float, b: float,
          pruning: str) -> tuple[Ranking, dict[str, tuple[int, int]], int]:
    """The query's posting lists, loaded, and the Ranking over them; each term's
    (qtf, df); how many postings PostgreSQL sent."""
    n, total, size, dead = stats
    lists, fetched = bm25_postings.load(
        conn, pipeline.id, pipeline.created_at,
        [((segment, term), arrays) for term, _, segment, *arrays in rows if segment is not None],
        context.postings)
    by_term = bm25_postings.by_term(pipeline.id, pipeline.created_at, lists, list(qtfs),
                                    context.postings)
    dead_ordinals = np.asarray(dead, dtype=np.int64)
    frequencies = _frequencies(by_term, dead_ordinals, size)
    terms = {t: (q, frequencies[t]) for t, q in qtfs.items()}
    ranking = Ranking([Term(t, q * idf(df, n) if df else 0.0, by_term[t])
                       for t, (q, df) in terms.items()],
                      size, dead_ordinals, (k1, b, total / n if n else 1.0), pruning=pruning)
    return ranking, terms, fetched


def _frequencies(by_term: dict[str, list[Postings]], dead: np.ndarray, size: int) -> dict[str, int]:
    """Each term's document frequency: its postings, less those of dead fragments
    (expired, not yet merged away)."""
    df = {term: sum(len(p) for p in lists) for term, lists in by_term.items()}
    if len(dead):
        mask = np.zeros(max(size, 1), dtype=bool)
        mask[dead] = True
        for term, lists in by_term.items():
            df[term] -= sum(int(mask[p.ordinals].sum()) for p in lists)
    return df


def _native(pipeline: Pipeline, request: SearchRequest, context: Context) -> bool:
    """Whether pgbraid's own postings answer (not pg_search, nor pg_textsearch)."""
    engine = request.params.get("engine", "auto")
    if engine == "pg_textsearch":
        return False
    return not (engine in ("auto", "pg_search") and context.pgsearch
                and "pg_search" in context.extensions and not encryption.encrypted(pipeline))


def idf(df: int, n: int) -> float:
    """Lucene's BM25 idf (always positive)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _number(request: SearchRequest, name: str, default: float, low: float, high: float) -> float:
    return number(request.params, name, default, low, high)


class BM25(Strategy):
    name = "bm25"
    description = "Okapi BM25 over pgbraid's postings (OR semantics, exact top-k)"
    params = (*PAGING, HIGHLIGHT,
              Param("k1", "number", DEFAULT_K1, "term-frequency saturation", low=0.0, high=10.0),
              Param("b", "number", DEFAULT_B, "length normalisation", low=0.0, high=1.0),
              Param("engine", "choice", "auto", "pgbraid's postings, ParadeDB pg_search or Tiger "
                    "Data's pg_textsearch when opted in and installed (auto: pg_search then)",
                    choices=ENGINES),
              Param("pruning", "choice", "auto", "block-max over ordinal windows, MaxScore, or "
                    "score every posting (all give the same top k; auto: block-max from 750k "
                    "postings, or 250k with 20 terms or more)", choices=PRUNING))

    def validate(self, request: SearchRequest, context: Context) -> None:
        engine = self.param(request, "engine")
        if engine in GATES and request.as_of is not None:
            raise InvalidRequest(f"{engine} indexes current fragments only: as_of needs "
                                 "engine pgbraid or auto", field="engine")
        if engine in GATES and not getattr(context, GATES[engine][0]):
            raise NotEnabled(f"{engine} is not opted in: set {GATES[engine][1]}=1",
                             strategy=self.name)

    def opening(self, pipeline: Pipeline, request: SearchRequest, scope: Scope,
                context: Context) -> Opening | None:
        if scope.as_of is not None or not _native(pipeline, request, context):
            return None
        return _terms(pipeline, request.query, scope, context)

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        if scope.as_of is not None:
            from .bm25_history import run_as_of  # it builds on this module

            return run_as_of(conn, pipeline, request, scope, k, context)
        engine = request.params.get("engine", "auto")
        if engine in GATES and engine not in context.extensions:
            raise NotEnabled(f"the {engine} extension is not installed on this server",
                             strategy=self.name)
        sealed = encryption.encrypted(pipeline)  # pg_search/pg_textsearch would index sealed text
        if engine in GATES and sealed:
            raise NotEnabled(f"{engine} indexes the stored text, which this encrypted pipeline "
                             "seals: use engine pgbraid or auto", strategy=self.name)
        if engine == "pg_textsearch":
            from .textsearch import run_pg_textsearch

            return run_pg_textsearch(conn, pipeline, request, scope, k, context)
        if not _native(pipeline, request, context):
            from .pgsearch import run_pg_search

            return run_pg_search(conn, pipeline, request, scope, k)
        return self._run_native(conn, pipeline, request, scope, k, context)

    def _run_native(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
                    scope: Scope, k: int, context: Context) -> Outcome:
        k1 = _number(request, "k1", DEFAULT_K1, 0.0, 10.0)
        b = _number(request, "b", DEFAULT_B, 0.0, 1.0)
        config, (n, total, size, dead), rows = _tokenize(conn, pipeline, request.query, scope,
                                                          context)
        details: dict[str, Any] = {"engine": "pgbraid", "config": config, "k1": k1, "b": b,
                                   "documents": n, "avgdl": round(total / n, 3) if n else 0.0}
        qtfs = {row[0]: row[1] for row in rows}
        if not qtfs:
            details.update(terms=[], explanation="the query has no searchable words "
                           "(only stop words or punctuation)")
            return Outcome([], details)
        ranking, terms, fetched = _rank(conn, pipeline, rows, qtfs, (n, total, size, dead),
                                        context, k1=k1, b=b,
                                        pruning=self.param(request, "pruning"))
        details["terms"] = [{"term": t, "qtf": q, "df": df,
                             "idf": round(idf(df, n), 6) if df else 0.0}
                            for t, (q, df) in terms.items()]
        try:
            hits, checked, rounds = _verify(conn, ranking, scope, k, ending=context.ends_snapshot)
        finally:
            ranking.release()  # the hits hold their scores: the dense array is free again
        pruning = ranking.stats
        details.update(postings=pruning.postings, postings_scored=pruning.scored,
                       postings_fetched=fetched, candidates=pruning.candidates,
                       exhaustive=pruning.exhaustive, windows=pruning.windows,
                       windows_scored=pruning.windows_scored, candidates_checked=checked,
                       verify_rounds=rounds, rows=len(hits))
        if not hits:  # df counts current fragments of the partitions in scope only
            details["explanation"] = ("no query term occurs in any fragment in scope"
                                      if not any(df for _, df in terms.values())
                                      else "no matching fragment is in scope")
        return Outcome(hits, details)


def _verify(conn: psycopg.Connection, ranking: Ranking, scope: Scope, k: int,
            ending: bool = False) -> tuple[list[Row], int, int]:
    """The k best in-scope fragments, with their matched terms: candidates in score
    order, widening each round.

    ``ending`` (nothing runs after this strategy) and no metadata filter: the first
    round's statement ends the snapshot with it (run_last). Without a filter no
    candidate falls out of scope (the postings hold current, unquarantined fragments
    of the partitions in scope only, dead ordinals never rank), so no second round
    is needed; if one were, SnapshotEnded has the engine search again without this."""
    if k == 0:
        return [], 0, 0
    where, params = scope.where("f")
    statement = sql.SQL(_VERIFY).format(columns=sql.SQL(HIT_COLUMNS), scope=where)
    found: list[dict[str, Any]] = []
    checked = rounds = 0
    ended = False
    # Every ranking prunes by the width-th best score (block-max its windows, the others
    # the contenders they look up): ask for k first when no filter can reject one (the
    # postings hold what the scope may see), else for a few more.
    batches = ranking.batches(k if ranking.blockmax or not scope.filters else max(4 * k, 32))
    for batch in batches:
        if ended:
            raise SnapshotEnded("bm25 needs another round of candidates")
        rounds += 1
        # An int[] literal: psycopg's list dumper costs more per candidate in Python.
        values = {**params, "candidates": "{" + ",".join(map(str, batch.tolist())) + "}",
                  "k": k - len(found)}
        ended = ending and not scope.filters
        if ended:
            rows = run_last(conn, statement, values, row_factory=dict_row)
        else:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(statement, values).fetchall()
        found += rows
        checked += len(batch)
        if len(found) >= k:
            break
    ordinals = [row.pop("ordinal") for row in found]
    return [Row(**row, score=ranking.score(ordinal), matched_terms=names)
            for row, ordinal, names in zip(found, ordinals, ranking.matched(ordinals))
            ], checked, rounds
