"""fuzzy: character-level similarity with pg_trgm (misspelled names, codes).

A different question from full-text: not "which fragments contain these words"
but "which strings look like this one". The score, in 0..1, is the better of
``word_similarity(query, text)`` (the query against the most similar stretch
of the fragment) and ``similarity(title, query)``; ties are broken by the
whole-text ``similarity``, so "Apple Inc." ranks above "Apple Hospitality REIT"
for "Aple Inc". Both conditions are served by GIN ``gin_trgm_ops`` indexes,
with the threshold (``params.threshold``, default 0.5: between pg_trgm's
0.3 for similarity and 0.6 for word similarity) set per transaction.

The default adapts: when fewer than k fragments reach 0.5, the search widens
once to 0.3 and the best of those fill the list (the trace says so). A typo in
each of two words of a short name ("Pulbic Stoarge") loses most of its
trigrams, so a fixed 0.5 found nothing for 7 % of such names on the bench's
5,608 companies while 0.3 ranked the right one first in 98 %; widening only
when the list is short keeps every list that 0.5 fills as it was. A threshold
given in the request is used as given.

On an encrypted pipeline the text and title are sealed; the score is
``word_similarity(query, words)`` over the fragment's distinct words (sorted,
lower-cased: ``fragments.words``, its own trigram index), ties broken by their
whole ``similarity``.

That is the text method. Over long text it is slow: a short query's trigrams occur
in most long fragments, and each candidate is rescored over its whole text (41 s
for one query at 100k fragments). So the body trigram index holds text up to
SHORT_BODY_BYTES only (migration 053: it was half a batch's write cost); longer text
is reached through a btree of the long fragments in scope, rescored the same way, and
that arm is sent only when the scope holds some. The words method (strategies/fuzzy_words.py)
matches each query word against the pipeline's word dictionary instead and scores
fragments from per-word similarities. ``params.method`` chooses; ``auto`` takes
words when the fragments in scope are long on average (BM25's statistics of the
partitions in scope), text for short ones (names), whether or not the search is
``as_of`` (a cursor's later pages search as of the first page's snapshot: they must
rank as it did). The trace says which ran.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from .. import encryption
from ..errors import InvalidRequest
from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from . import fuzzy_words
from .base import HIT_COLUMNS, NO_WORDS, Context, Outcome, Row, Strategy, has_words
from .params import PAGING, Param

DEFAULT_THRESHOLD = 0.5
WIDENED_THRESHOLD = 0.3
MAX_QUERY_CHARS = 500
METHODS = ("auto", "text", "words")
# The average fragment length (BM25 tokens, over the partitions in scope) from which
# the word path is the cheaper one: measured, docs/benchmarks.md "Fuzzy".
WORDS_FROM_LENGTH = 12.0

# Score candidates on fragments alone, then join the k best for their columns.
_SEARCH = """
SELECT {columns}, c.score
FROM (SELECT f.id, {score} AS score, {whole} AS whole
      FROM pgbraid.fragments f
      WHERE {scope} AND {match}
      ORDER BY score DESC, whole DESC, f.id
      LIMIT %(k)s) AS c
     JOIN pgbraid.fragments f ON f.pipeline_id = %(scope_pipeline)s::bigint AND f.id = c.id
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
ORDER BY c.score DESC, c.whole DESC, f.id
"""
# Text up to this many bytes is in the body trigram index; longer text is found through
# the btree of long fragments and rescored (migration 053: the same bound, written the
# same way, so that the planner proves each partial index's predicate from its arm).
SHORT_BODY_BYTES = 256
_SHORT = f"octet_length(f.body) <= {SHORT_BODY_BYTES}"
_LONG_BODY = f"octet_length(f.body) > {SHORT_BODY_BYTES}"
# (score, whole, match) over the text and title; key_id IS NULL is the indexes' predicate.
_TEXT = ("greatest(word_similarity(%(query)s, f.body), similarity(f.title, %(query)s))",
         "similarity(f.body, %(query)s)",
         f"f.key_id IS NULL AND (({_SHORT} AND f.body %%> %(query)s) OR f.title %% %(query)s"
         "{long})")
# The arm for long text, sent only when the scope holds some: the planner has no
# statistics of text lengths per pipeline, so on names it would cost the arm as a third
# of the pipeline's fragments, each rescored, and plan a parallel scan (24.9 against
# 0.7 ms for one name, docs/benchmarks.md, Ingestion, 2026-12-04 evening).
_LONG_ARM = f" OR ({_LONG_BODY} AND f.body %%> %(query)s)"
# An encrypted pipeline's text and title are sealed: its fragments' distinct words
# (title, heading and text; encryption.distinct_words) stand in for both.
_SEALED = ("word_similarity(%(query)s, f.words)", "similarity(f.words, %(query)s)",
           "f.words IS NOT NULL AND f.words %%> %(query)s")
# The average length of the fragments in scope, from the BM25 statistics of the
# partitions it may see (Scope.partitions: nothing outside the scope moves it).
_LENGTH = """
SELECT sum(st.total_length)::float8 / nullif(sum(st.fragments), 0)
FROM pgbraid.bm25_partitions p JOIN pgbraid.bm25_partition_stats st
  ON st.pipeline_id = p.pipeline_id AND st.partition_id = p.id
WHERE {partitions}
"""
# Whether the scope holds long text: fragments_body_long read longest first, the only
# order that index gives; a plain EXISTS was planned as a seq scan of fragments on a
# pipeline of names (the planner guesses a third of any pipeline long): 15-30 ms a query.
_HAS_LONG = f"""
SELECT EXISTS (SELECT 1 FROM (SELECT 1 FROM pgbraid.fragments f
               WHERE {{scope}} AND f.key_id IS NULL AND {_LONG_BODY}
               ORDER BY octet_length(f.body) DESC LIMIT 1) AS longest)
"""


class Fuzzy(Strategy):
    name = "fuzzy"
    description = "pg_trgm trigram similarity over fragment text and titles, or word by word"
    params = (*PAGING, Param("threshold", "number", DEFAULT_THRESHOLD, "the minimum score "
                             "(trigram similarity, 0..1); omitted or null: 0.5, widened once to 0.3 when fewer "
                             "than k fragments reach 0.5", low=0.0, high=1.0,
                             nullable=True),
              Param("method", "choice", "auto", "text: the query against each candidate's "
                    "text and title; words: each query word against the pipeline's word "
                    "dictionary; auto: words when the fragments in scope average "
                    f"{WORDS_FROM_LENGTH:g} tokens or more",
                    choices=METHODS))

    def validate(self, request: SearchRequest, context: Context) -> None:
        if len(request.query) > MAX_QUERY_CHARS:
            raise InvalidRequest(f"fuzzy matches strings of at most {MAX_QUERY_CHARS} characters; "
                                 "use fulltext or bm25 for longer text", field="query")

    def unavailable(self, pipeline: Pipeline, context: Context) -> str | None:
        if "pg_trgm" not in context.extensions:
            return "the pg_trgm extension is not installed on this server"
        return None

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        threshold = self.param(request, "threshold")
        if not has_words(request.query):  # pg_trgm takes no trigram from it: sends nothing
            return Outcome([], {"threshold": threshold, "rows": 0, "explanation": NO_WORDS})
        method, long = _shape(conn, self.param(request, "method"), scope)
        def search(t: float) -> list[Row]:
            if method == "words":  # the thresholds set in its first round trip
                return fuzzy_words.search(conn, request.query, scope, k, t)
            with conn.cursor(row_factory=class_row(Row)) as cur:
                with conn.pipeline():  # the thresholds and the search, one round trip
                    fuzzy_words.set_thresholds(conn, t)
                    cur.execute(*statement(request.query, scope, k, t,
                                           encryption.encrypted(pipeline), long=long))
                return cur.fetchall()
        rows = search(threshold)
        details: dict[str, Any] = {"threshold": threshold, "method": method}
        if len(rows) < k and request.params.get("threshold") is None:
            rows = search(WIDENED_THRESHOLD)
            details.update(threshold=WIDENED_THRESHOLD,
                           widened=f"fewer than {k} fragments reached {threshold}")
            threshold = WIDENED_THRESHOLD
        details["rows"] = len(rows)
        if not rows:
            what = "words" if method == "words" else "text or title"
            details["explanation"] = (f"no fragment {what} in scope reaches trigram "
                                      f"similarity {threshold}; lower params.threshold to widen")
        return Outcome(rows, details)


def _shape(conn: psycopg.Connection, asked: str, scope: Scope) -> tuple[str, bool]:
    """(method, whether the text method must look at long text), in one round trip: auto
    reads the average length of the fragments in scope, text whether any is long (as of
    a time, the long fragments' index does not apply: always)."""
    if asked == "words":
        return asked, False
    length, long = conn.execute(*shape_statement(asked, scope)).fetchone()
    if asked != "auto":
        return asked, long
    return ("words" if length is not None and length >= WORDS_FROM_LENGTH else "text"), long


def shape_statement(asked: str, scope: Scope) -> tuple[sql.Composable, dict[str, Any]]:
    """_shape's statement: the average length in scope, and whether the scope holds long
    text, asked only where the text method will run (an InitPlan runs when first needed:
    auto's words path never reads the scope's long fragments)."""
    where, params = scope.partitions("p")
    if scope.as_of is None:
        found, found_params = scope.where("f")
        long = sql.SQL(_HAS_LONG).format(scope=found)
        params = {**params, **found_params}
    else:
        long = sql.SQL("true")
    return sql.SQL(
        "SELECT l.length, CASE WHEN %(text_asked)s OR l.length IS NULL"
        " OR l.length < %(words_from)s THEN ({}) ELSE false END FROM ({}) AS l(length)"
    ).format(long, sql.SQL(_LENGTH).format(partitions=where)), {
        **params, "text_asked": asked == "text", "words_from": WORDS_FROM_LENGTH}


def statement(query: str, scope: Scope, k: int, threshold: float, sealed: bool, *,
              long: bool = True) -> tuple[sql.Composable, dict[str, Any]]:
    """(statement, parameters) of one search by the text method: the k best fragments
    reaching ``threshold`` (pg_trgm's thresholds set to it), on a ``sealed`` (encrypted)
    pipeline or not; ``long``: the scope may hold text longer than SHORT_BODY_BYTES."""
    where, params = scope.where("f")
    score, whole, match = _SEALED if sealed else _TEXT
    match = match.replace("{long}", _LONG_ARM if long else "")
    return (sql.SQL(_SEARCH).format(columns=sql.SQL(HIT_COLUMNS), scope=where,
                                    score=sql.SQL(score), whole=sql.SQL(whole),
                                    match=sql.SQL(match)),
            {**params, "query": query, "k": k})

