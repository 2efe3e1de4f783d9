"""fuzzy, word by word: a query word against the pipeline's dictionary, never the text.

Each word of the query (``encryption.distinct_words``: lower-cased, edge punctuation
stripped; words with no trigram, such as "&", left out) is expanded to the words of
the pipeline's dictionary (``pgbraid.fuzzy_words``, ingest/dictionary.py) whose
trigram ``similarity`` to it reaches the threshold, served by the dictionary's
trigram index. There is no limit on an expansion but the similarity, so words of
fragments a reader cannot see never crowd out the words of those it can. Fragments
holding an expanded word are found through ``fragments.word_set`` (the fragment's
distinct words, GIN over unquarantined fragments), only among the fragments
in scope (current, or valid at as_of). A fragment's score is the mean, over the query words, of the best
similarity of any of its own words to that query word (0 when none reaches the
threshold); it qualifies when the mean reaches the threshold too. Ties go to the
fragment with fewer words (the closest thing to the text path's whole-text
similarity that needs no text), then to the smaller id.

Reading every fragment that holds any expanded word costs a heap fetch each
(thousands for a common word). So for up to MAX_GROUPS query words the search
asks for fragments holding an expansion of *every* word of a subset of the query
words, subsets in decreasing order of the best score a fragment holding only
them could reach, so GIN intersects the word lists before any row is read; it
stops once that bound falls below the k-th score found or the threshold. The
result is exact: what a subset's bound excludes cannot enter the top k. Longer
queries score the union in one statement.

A score depends on the fragment's own words and the query only, and the dictionary
is a superset of every fragment's words, so what the dictionary holds besides (words
of other classifications, quarantined or expired documents) changes no hit, score or
count. The trace reports none of the expansions.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from .. import encryption
from ..scope import Scope
from .base import HIT_COLUMNS, Row

MAX_GROUPS = 6
# Float sums of the same similarities, in Python and in SQL.
_EPSILON = 1e-6

# Each query word with trigrams (its ordinal) and its expansions (none: a NULL word).
# pg_trgm's similarity_threshold, set to the search's threshold, bounds each one.
_EXPANSIONS = """
WITH q AS MATERIALIZED (
    SELECT w, n FROM unnest(%(words)s::text[]) WITH ORDINALITY AS q(w, n)
    WHERE show_trgm(w) <> '{{}}')
SELECT q.n, d.word, similarity(d.word, q.w)
FROM q LEFT JOIN pgbraid.fuzzy_words d
       ON d.pipeline_id = %(scope_pipeline)s::bigint AND d.word %% q.w
"""
# The fragments in scope holding an expansion of each word of a subset ({holds}), not
# seen before, with their words (scored here: measured faster than in SQL).
_SUBSET = """
SELECT f.id, f.word_set FROM pgbraid.fragments f
WHERE {scope} AND {holds} AND f.id <> ALL(%(seen)s::bigint[])
"""
# Every fragment holding any expansion: one probe of the words index per expanded
# word. OFFSET 0 keeps the lateral a probe (flattened, the planner joined every
# fragment to every expansion: 58 s at 100k fragments).
_UNION = """
WITH e AS MATERIALIZED (
    SELECT * FROM unnest(%(e_words)s::text[], %(e_ns)s::int[], %(e_sims)s::float8[])
        AS e(word, n, sim)),
m AS (
    SELECT f.id, e.n, max(e.sim) AS sim, max(f.size) AS size
    FROM e CROSS JOIN LATERAL (
        SELECT f.id, cardinality(f.word_set) AS size FROM pgbraid.fragments f
        WHERE {scope} AND f.word_set && ARRAY[e.word] OFFSET 0) AS f
    GROUP BY f.id, e.n)
SELECT m.id, sum(m.sim)::float8 AS total, max(m.size) AS size
FROM m GROUP BY m.id HAVING sum(m.sim) >= %(need)s
ORDER BY total DESC, size, m.id LIMIT %(k)s
"""
_ROWS = """
SELECT {columns}, c.score
FROM unnest(%(ids)s::bigint[], %(scores)s::float8[]) WITH ORDINALITY AS c(id, score, n)
     JOIN pgbraid.fragments f ON f.pipeline_id = %(scope_pipeline)s::bigint AND f.id = c.id
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
ORDER BY c.n
"""


def words(query: str) -> list[str]:
    """The query's words, as fragments' words are made."""
    return encryption.distinct_words(query).split()


def search(conn: psycopg.Connection, query: str, scope: Scope, k: int,
           threshold: float) -> list[Row]:
    """The k best fragments in scope (current or as_of) at ``threshold`` (pg_trgm's
    thresholds set to it)."""
    where, params = scope.where("f")
    groups: dict[int, dict[str, float]] = {}
    for n, word, sim in conn.execute(sql.SQL(_EXPANSIONS).format(),
                                     {**params, "words": words(query)}):
        groups.setdefault(n, {})
        if word is not None:
            groups[n][word] = sim
    if not groups:
        return []
    expansions = {"e_words": [w for g in groups.values() for w in g],
                  "e_ns": [n for n, g in groups.items() for _ in g],
                  "e_sims": [s for g in groups.values() for s in g.values()]}
    need = threshold * len(groups) - _EPSILON
    found = _by_subsets if sum(1 for g in groups.values() if g) <= MAX_GROUPS else _by_union
    best = found(conn, where, {**params, **expansions}, groups, k, need)
    with conn.cursor(row_factory=class_row(Row)) as cur:
        return cur.execute(sql.SQL(_ROWS).format(columns=sql.SQL(HIT_COLUMNS)), {
            "ids": [i for i, _, _ in best], "scope_pipeline": params["scope_pipeline"],
            "scores": [total / len(groups) for _, total, _ in best]}).fetchall()


def _by_subsets(conn: psycopg.Connection, where: sql.Composable, params: dict[str, Any],
                groups: dict[int, dict[str, float]], k: int,
                need: float) -> list[tuple[int, float, int]]:
    tops = {n: max(g.values()) for n, g in groups.items() if g}
    subsets = sorted((s for size in range(len(tops), 0, -1) for s in combinations(tops, size)),
                     key=lambda s: -sum(tops[n] for n in s))
    found: dict[int, tuple[int, float, int]] = {}
    for subset in subsets:
        bound = sum(tops[n] for n in subset)
        ranked = _ranked(found.values(), need)
        if bound < need or (len(ranked) >= k and bound < ranked[k - 1][1] - _EPSILON):
            break
        holds = sql.SQL(" AND ").join(
            sql.SQL("f.word_set && {}::text[]").format(sql.Placeholder(f"g{n}")) for n in subset)
        rows = conn.execute(sql.SQL(_SUBSET).format(scope=where, holds=holds),
                            {**params, "seen": list(found),
                             **{f"g{n}": list(groups[n]) for n in subset}})
        for fragment, held in rows:
            total = sum(max((g.get(w, 0.0) for w in held), default=0.0) for g in groups.values())
            found[fragment] = (fragment, total, len(held))
    return _ranked(found.values(), need)[:k]


def _by_union(conn: psycopg.Connection, where: sql.Composable, params: dict[str, Any],
              groups: dict[int, dict[str, float]], k: int,
              need: float) -> list[tuple[int, float, int]]:
    return conn.execute(sql.SQL(_UNION).format(scope=where),
                        {**params, "need": need, "k": k}).fetchall()


def _ranked(found, need: float) -> list[tuple[int, float, int]]:
    """Best first: the higher total, then fewer words, then the smaller id."""
    return sorted((r for r in found if r[1] >= need), key=lambda r: (-r[1], r[2], r[0]))
