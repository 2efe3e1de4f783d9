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
those placed before the k-th best once it reaches the subset's bound (_Subsets). The
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

from heapq import heappush, heappushpop
from itertools import combinations
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from .. import encryption
from ..db.transaction_settings import set_local
from ..scope import Scope
from .base import HIT_COLUMNS, Row
from .trigrams import similarity, trigrams

MAX_GROUPS = 6
# The first page of a subset's fragments (at least 4 k); the rest are read whole.
PAGE = 64
_START = (-1, 0)  # (words, id) before every fragment's
_PAST = (2 ** 31 - 1, 2 ** 63 - 1)  # (words, id) after every fragment's
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
# Float sums of the same similarities, in Python and in SQL.
_EPSILON = 1e-6

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
# The fragments in scope holding an expansion of each word of a subset ({holds}), not
# seen before, with their words (scored here: measured faster than in SQL), between two
# places of the ranking's tie order (fewer words, then the smaller id); {page}: the first
# of them in that order, or all.
_SUBSET = """
SELECT f.id, f.word_set FROM pgbraid.fragments f
WHERE {scope} AND {holds} AND f.id <> ALL(%(seen)s::bigint[]){after}{before}
{page}
"""
_AFTER = "\n  AND (cardinality(f.word_set), f.id) > (%(after_size)s, %(after_id)s)"
_BEFORE = "\n  AND (cardinality(f.word_set), f.id) < (%(before_size)s, %(before_id)s)"
# "+ 0": sorted, not walked in the order of the words index (fragments_word_count): a walk
# filtering on the words held reads most of the pipeline when few fragments hold them.
_PAGE = "ORDER BY cardinality(f.word_set) + 0, f.id LIMIT %(page)s"
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
        best = _Subsets(conn, where, {**params, **expansions}, scores, k, need).run(
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


class _Subsets:
    """The subset search: subsets of the query words whose known expansions a fragment
    holds, by their bound (their best similarities, plus what each short word outside
    can add); in a subset's fragments, by their own bound, each scored only while it
    can still enter. When a subset is left to read only for what the short words might
    add, those are expanded in full instead (what it costs without them) and the
    search goes on, the fragments read so far kept.

    A subset is read a page at a time in the ranking's tie order (fewer words, then the
    smaller id), and no further once the k-th best so far scores at least the subset's
    bound and comes before the page's last fragment in that order: every fragment left
    ranks below it. (A stop word beside a misspelled one, "and the scleep": 70,953
    fragments hold "and" and "the", all tied at the bound; the ten with the fewest
    words are in the first page.) A fragment left unread in one subset and met in a
    later one ranks below that subset's k-th, so it cannot enter either."""

    def __init__(self, conn: psycopg.Connection, where: sql.Composable, params: dict[str, Any],
                 scores: "_Scores", k: int, need: float):
        self.conn, self.where, self.params, self.scores = conn, where, params, scores
        self.k, self.need = k, need
        self.found: dict[int, tuple[int, float, int]] = {}
        # The k best (total, -words, -id) reaching need: a heap, the k-th best at its root.
        self.best: list[tuple[float, int, int]] = []
        self.seen: list[int] = []

    def run(self, groups: dict[int, dict[str, float]], short: dict[int, float],
            widen) -> list[tuple[int, float, int]]:
        while True:
            tops = {n: max(g.values()) for n, g in groups.items() if g}

            def bound(subset: tuple[int, ...], rest: bool = True) -> float:
                return sum(tops[n] for n in subset) + (
                    sum(r for n, r in short.items() if n not in subset) if rest else 0.0)

            for subset in sorted((s for size in range(len(tops), 0, -1)
                                  for s in combinations(tops, size)), key=lambda s: -bound(s)):
                if bound(subset) < self.floor():
                    return self.ranked()
                if short and bound(subset, rest=False) < self.floor():
                    break
                # The short words' caps are not similarities pg_trgm can give exactly: a
                # margin; without them the bound is a sum of the similarities themselves.
                outside = any(n not in subset for n in short)
                self.read(groups, subset, bound(subset) + (_EPSILON if outside else 0.0))
            else:
                return self.ranked()
            groups = {**groups, **widen()}
            short = {}
            self.scores.expand(groups)

    def floor(self) -> float:
        return self.best[0][0] - _EPSILON if len(self.best) >= self.k else self.need

    def ranked(self) -> list[tuple[int, float, int]]:
        return _ranked(self.found.values(), self.need)[:self.k]

    def read(self, groups: dict[int, dict[str, float]], subset: tuple[int, ...],
             bound: float) -> None:
        """A first page of the subset's fragments; when it is full and more can enter,
        a page of those holding the best expansion of each word (they reach the bound,
        so the k-th best soon does), then the rest up to the k-th best's place."""
        after = self.page(groups, subset, bound, _START)
        if after is None:
            return
        tops = {n: {w: s for w, s in groups[n].items() if s == max(groups[n].values())}
                for n in subset}
        if any(len(tops[n]) < len(groups[n]) for n in subset):
            self.page(tops, subset, bound, _START)
            if self.last(bound) <= after:
                return
        self.page(groups, subset, bound, after, whole=True)

    def page(self, groups: dict[int, dict[str, float]], subset: tuple[int, ...], bound: float,
             after: tuple[int, int], whole: bool = False) -> tuple[int, int] | None:
        """Read and score the subset's fragments after ``after`` in the tie order (a page,
        or all of them up to the k-th best's place); the page's last place when it was
        full and a fragment after it may still enter, else None."""
        holds = sql.SQL(" AND ").join(
            sql.SQL("f.word_set && {}::text[]").format(sql.Placeholder(f"g{n}")) for n in subset)
        size = max(PAGE, 4 * self.k)
        before = self.last(bound)
        rows = self.conn.execute(
            sql.SQL(_SUBSET).format(scope=self.where, holds=holds,
                                    after=sql.SQL(_AFTER if after != _START else ""),
                                    before=sql.SQL(_BEFORE if before != _PAST else ""),
                                    page=sql.SQL("" if whole else _PAGE)),
            {**self.params, **{f"g{n}": list(groups[n]) for n in subset}, "seen": self.seen,
             "after_size": after[0], "after_id": after[1], "before_size": before[0],
             "before_id": before[1], "page": size}).fetchall()
        self.seen += [fragment for fragment, _ in rows]
        self.score(rows)
        if whole or len(rows) < size:
            return None
        last = (len(rows[-1][1]), rows[-1][0])
        return None if self.last(bound) <= last else last

    def last(self, bound: float) -> tuple[int, int]:
        """The tie order's (words, id) from which no fragment scoring at most ``bound``
        can enter: the k-th best's when it reaches the bound, else past every fragment."""
        if len(self.best) >= self.k and self.best[0][0] >= bound:
            return -self.best[0][1], -self.best[0][2]
        return _PAST

    def score(self, rows: list[tuple[int, list[str]]]) -> None:
        for fragment, known, cap, missing, held in self.scores.known(rows):
            if cap < self.floor():
                break
            total = known + self.scores.rest(held, missing, rows)
            self.found[fragment] = (fragment, total, len(held))
            if total >= self.need:
                (heappush if len(self.best) < self.k else heappushpop)(
                    self.best, (total, -len(held), -fragment))


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


def _ranked(found, need: float) -> list[tuple[int, float, int]]:
    """Best first: the higher total, then fewer words, then the smaller id."""
    return sorted((r for r in found if r[1] >= need), key=lambda r: (-r[1], r[2], r[0]))
