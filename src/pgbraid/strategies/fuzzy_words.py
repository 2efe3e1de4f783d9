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
stops once that bound falls below the k-th score found or the threshold. Within a
subset, fragments are read in the ranking's tie order, a page first, then only
those placed before the k-th best once it reaches the subset's bound (fuzzy_subsets). The
result is exact: what a bound excludes cannot enter the top k. Longer queries score
the union in one statement.

Short words cost the most to expand: a word of three letters shares two of its four
trigrams with thousands of dictionary words, each rechecked ("red": 12,054 for 17
expansions). So at thresholds from 0.5, the shortest words (up to four letters,
ASCII) are expanded only to the words exactly as similar (similarity 1, a cheap
lookup: every trigram must match), and a fragment holding none of those gets from
such a word at most what a word below similarity 1 can reach (t / (t + 1) for t
trigrams: 0.8 for "the"), which bounds the subsets without it. As many words are
taken so as together they add less than the threshold's total, so a fragment must
hold an expansion of another word to qualify and the subsets find it. Its own words
then give the short word's exact share (trigrams.similarity: pg_trgm's value in
Python), computed only for fragments whose bound can still reach the k-th score:
the hits and scores are those of the full expansion.

A score depends on the fragment's own words and the query only, and the dictionary
is a superset of every fragment's words, so what the dictionary holds besides (words
of other classifications, quarantined or expired documents) changes no hit, score or
count. The trace reports none of the expansions.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from .. import encryption
from ..db.transaction_settings import set_local
from ..scope import Scope
from .base import HIT_COLUMNS, Row
from .fuzzy_subsets import EPSILON as _EPSILON, Subsets
from .trigrams import similarity, trigrams

MAX_GROUPS = 6
# Query words of at most this many trigrams (four letters) are the costly ones to
# expand: their trigrams are shared by thousands of dictionary words, each rechecked
# ("red": 12,054 candidates for 17 words at 0.5).
SHORT_TRIGRAMS = 5
# ... and only at thresholds from this one: below it a fragment holding an expansion
# counts little more than the most a short word outside its similarity-1 words can add
# (0.8), so the subsets without it are read nearly whole ("raft proteome suing" widened
# to 0.3: 9,228 fragments read for "proteome" alone, 18 s, against 0.4 s expanded).
SHORT_FROM = 0.5
# The word search's statements use the trigram and word indexes, never a sequential scan:
# the planner costs `word_set && expansions` as one operator call a row, but over a few
# hundred expansions each call compares thousands of word pairs ("the Tasmasnian Devil"
# widened to 0.3, 44 and 171 expansions: a parallel sequential scan of the fragments,
# 3 s, where the word index found the same 2,719 in ms; docs/benchmarks.md, Fuzzy).
# Set for the search's statements only, and back to the default after them.
_INDEX_SCANS = {"enable_seqscan": "off"}
_SEQUENTIAL_SCANS = {"enable_seqscan": "on"}

# Each query word to expand with trigrams (its ordinal) and its expansions (none: a NULL
# word). pg_trgm's similarity_threshold, set to the search's threshold, bounds each
# one. float8: the float4's exact value, as trigrams.similarity gives it.
_EXPANSIONS = """
WITH q AS MATERIALIZED (
    SELECT w, n FROM unnest(%(words)s::text[], %(ns)s::int[]) AS q(w, n)
    WHERE show_trgm(w) <> '{{}}')
SELECT q.n, d.word, similarity(d.word, q.w)::float8
FROM q LEFT JOIN pgbraid.fuzzy_words d
       ON d.pipeline_id = %(scope_pipeline)s::bigint AND d.word %% q.w
"""
# The similarity of words that are not ASCII to the words scored from fragments' own.
_SIMILARITIES = """
SELECT u.word, s.n, similarity(u.word, s.w)::float8
FROM unnest(%(words)s::text[]) AS u(word), unnest(%(short)s::text[], %(ns)s::int[]) AS s(w, n)
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
    thresholds set to it here, for the transaction)."""
    where, params = scope.where("f")
    asked = words(query)
    short = _short(asked, threshold)
    groups = _expansions(conn, params, asked, [n for n in range(1, len(asked) + 1)
                                               if n not in short], sorted(short), threshold)
    if not groups:
        set_local(conn, _SEQUENTIAL_SCANS)
        return []
    expansions = {"e_words": [w for g in groups.values() for w in g],
                  "e_ns": [n for n, g in groups.items() for _ in g],
                  "e_sims": [s for g in groups.values() for s in g.values()]}
    need = threshold * len(groups) - _EPSILON
    if sum(1 for g in groups.values() if g) <= MAX_GROUPS:
        scores = _Scores(conn, groups, short, asked, threshold)
        best = Subsets(conn, where, {**params, **expansions}, scores, k, need).run(
            groups, short, lambda: _expansions(conn, params, asked, sorted(short), [], threshold))
    else:
        best = _by_union(conn, where, {**params, **expansions}, k, need)
    with conn.cursor(row_factory=class_row(Row)) as cur:
        with conn.pipeline():
            set_local(conn, _SEQUENTIAL_SCANS)
            cur.execute(sql.SQL(_ROWS).format(columns=sql.SQL(HIT_COLUMNS)), {
                "ids": [i for i, _, _ in best], "scope_pipeline": params["scope_pipeline"],
                "scores": [total / len(groups) for _, total, _ in best]})
        return cur.fetchall()


def _short(asked: list[str], threshold: float) -> dict[int, float]:
    """The short query words (ordinal: the most a word outside its known expansions can
    add) expanded only to the words as similar as themselves (similarity 1), the rest
    of their expansion left to scoring: the shortest ASCII words of up to SHORT_TRIGRAMS
    trigrams, as many as together add less than the threshold's total, so that a
    fragment holding none of the known expansions never qualifies.

    A word that shares c of a short word's t trigrams and has u of its own scores
    c / (t + u - c); below 1 that is at most t / (t + 1) (c = t, u = t + 1) or
    (t - 1) / t (u = c = t - 1)."""
    if len(asked) > MAX_GROUPS or threshold < SHORT_FROM:
        return {}
    sets = [trigrams(w) for w in asked]
    room = threshold * sum(1 for s in sets if s) - _EPSILON  # at most the need
    short: dict[int, float] = {}
    for size, n in sorted((len(s), n) for n, s in enumerate(sets, 1)
                          if s and len(s) <= SHORT_TRIGRAMS):
        if sum(short.values()) + size / (size + 1) >= room:
            break
        short[n] = size / (size + 1)
    return short


def _expansions(conn: psycopg.Connection, params: dict[str, Any], asked: list[str],
                full: list[int], exact: list[int],
                threshold: float) -> dict[int, dict[str, float]]:
    """The expansions (ordinal: word: similarity) of the query words ``full`` at the
    threshold and of ``exact`` at similarity 1 (pg_trgm's threshold set to 1 for that
    statement), in one round trip."""
    def expand(ns: list[int]) -> psycopg.Cursor:
        return conn.execute(sql.SQL(_EXPANSIONS).format(), {
            **params, "words": [asked[n - 1] for n in ns], "ns": ns})

    with conn.pipeline():  # queued, as set_local does in a pipeline
        set_thresholds(conn, threshold, _INDEX_SCANS)  # the last statement resets the scans
        cursors = [expand(full)]
        if exact:
            set_thresholds(conn, 1.0)
            cursors.append(expand(exact))
            set_thresholds(conn, threshold)
    groups: dict[int, dict[str, float]] = {}
    for cursor in cursors:
        for n, word, sim in cursor.fetchall():
            groups.setdefault(n, {})
            if word is not None:
                groups[n][word] = sim
    return groups


def set_thresholds(conn: psycopg.Connection, threshold: float,
                   more: dict[str, str] | None = None) -> None:
    """pg_trgm's similarity and word similarity thresholds (and ``more`` settings), for
    the transaction."""
    set_local(conn, {"pg_trgm.similarity_threshold": str(threshold),
                     "pg_trgm.word_similarity_threshold": str(threshold), **(more or {})})


class _Scores:
    """A fragment's total from its own words: per query word, the best similarity of one
    of them reaching the threshold. ``known``: from the expansions (a short word's
    similarity-1 words included); ``rest``: a short word's for a fragment holding
    none of those, computed from its words (trigrams.similarity; the server's for words
    not ASCII). The dictionary holds every fragment's words, so the total is the one
    a full expansion gives."""

    def __init__(self, conn: psycopg.Connection, groups: dict[int, dict[str, float]],
                 short: dict[int, float], asked: list[str], threshold: float):
        self.conn, self.short, self.threshold = conn, short, threshold
        self.words = {n: asked[n - 1] for n in short}
        self.order = sorted(groups)
        self.near: dict[str, list[tuple[int, float]]] = {}
        for n, group in groups.items():
            for word, sim in group.items():
                self.near.setdefault(word, []).append((n, sim))
        self.grams = {n: trigrams(w) for n, w in self.words.items()}
        self.sims: dict[str, dict[int, float]] = {}  # word: short word: similarity

    def expand(self, groups: dict[int, dict[str, float]]) -> None:
        """The short words expanded in full: their expansions are known from now on."""
        for n in self.short:
            for word, sim in groups[n].items():
                self.near.setdefault(word, []).append((n, sim))
        self.short = {}

    def known(self, rows: list[tuple[int, list[str]]]) -> list[tuple[int, float, float, list[int],
                                                                    list[str]]]:
        """(fragment, total from the expansions, the most its total can be, short words it
        holds none of the similarity-1 words of, its words), the highest bound first."""
        out = []
        for fragment, held in rows:
            top: dict[int, float] = {}
            for word in held:
                for n, sim in self.near.get(word, ()):
                    if sim > top.get(n, 0.0):
                        top[n] = sim
            known = sum(top.get(n, 0.0) for n in self.order)
            missing = [n for n in self.short if n not in top]
            out.append((fragment, known, known + sum(self.short[n] for n in missing), missing, held))
        return sorted(out, key=lambda r: -r[2])

    def rest(self, held: list[str], missing: list[int], rows: list[tuple[int, list[str]]]) -> float:
        if not missing:
            return 0.0
        if any(w not in self.sims for w in held if not w.isascii()):
            self._ask({w for _, words in rows for w in words if not w.isascii()} - set(self.sims))
        total = 0.0
        for n in missing:
            total += max((self._sims(w).get(n, 0.0) for w in held), default=0.0)
        return total

    def _sims(self, word: str) -> dict[int, float]:
        if word not in self.sims:
            grams = trigrams(word)
            self.sims[word] = {n: s for n, q in self.grams.items()
                               if (s := similarity(q, grams)) >= self.threshold}
        return self.sims[word]

    def _ask(self, words: set[str]) -> None:
        for word in words:
            self.sims[word] = {}
        for word, n, sim in self.conn.execute(_SIMILARITIES, {
                "words": list(words), "short": list(self.words.values()), "ns": list(self.words)}):
            if sim >= self.threshold:
                self.sims[word][n] = sim


def _by_union(conn: psycopg.Connection, where: sql.Composable, params: dict[str, Any],
              k: int, need: float) -> list[tuple[int, float, int]]:
    return conn.execute(sql.SQL(_UNION).format(scope=where),
                        {**params, "need": need, "k": k}).fetchall()
