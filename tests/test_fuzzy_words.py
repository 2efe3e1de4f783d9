"""fuzzy's word method: a dictionary that follows every write and shows no reader a word
it may not see; auto choosing it for long text only."""

from __future__ import annotations

import re
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from psycopg import sql

import pgbraid
from pgbraid import encryption, pipelines
from pgbraid.strategies import fuzzy, fuzzy_subsets, fuzzy_words, trigrams

from .bm25_worker import scifact
from .conftest import shared
from .test_bm25_concurrency import _wait, _workers

MIGRATION = Path(fuzzy.__file__).parents[1] / "db" / "migrations" / "028_fuzzy_words.sql"
LONG = ("Our quokka almanac describes the island fauna, the seasonal migration of seabirds, "
        "the breeding colonies along the western cliffs and the rangers who count them each "
        "spring, together with notes on weather, tides and the ferry timetable for visitors.")


def _name() -> str:
    return f"fw-{uuid.uuid4().hex[:8]}"


def _words(client, pipeline: str, query: str, **request):
    params = {"k": 10, "method": "words", **request.pop("params", {})}
    return client.search(pipeline, query, type="fuzzy", params=params, **request)


def _dictionary(client, pipeline: str) -> set[str]:
    with client.session() as conn:
        pid = pipelines.get(conn, pipeline).id
        return {r[0] for r in conn.execute(
            "SELECT word FROM pgbraid.fuzzy_words WHERE pipeline_id = %s", (pid,))}


def _fragment_words(client, pipeline: str) -> set[str]:
    with client.session() as conn:
        pid = pipelines.get(conn, pipeline).id
        return {w for (words,) in conn.execute(
            "SELECT word_set FROM pgbraid.fragments WHERE pipeline_id = %s", (pid,))
            for w in words}


def test_auto_takes_words_for_long_fragments_and_text_for_names(client):
    names, texts = _name(), _name()
    for name in (names, texts):
        client.create_pipeline(name, embedder="none")
    client.ingest(names, [{"id": "a", "text": "Apple Inc."}, {"id": "b", "text": "Quokka Holdings"}])
    client.ingest(texts, [{"id": "a", "text": LONG},
                          {"id": "b", "text": LONG.replace("quokka", "wallaby")}])
    short = client.search(names, "Quoka Holdings", type="fuzzy")
    assert short.trace.retrievers[0].details["method"] == "text"
    assert short.hits[0].document_id == "b"
    long = client.search(texts, "quoka almanac", type="fuzzy")
    assert long.trace.retrievers[0].details["method"] == "words"
    assert [h.document_id for h in long.hits] == ["a", "b"]  # b holds "almanac" only
    assert long.hits[0].score > long.hits[1].score
    # Both methods rank the misspelled word's fragment first on the long text.
    text = client.search(texts, "quoka almanac", type="fuzzy", params={"method": "text"})
    assert text.hits[0].document_id == "a"


def test_scores_are_the_mean_of_per_word_similarities(client):
    name = _name()
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "a", "text": "Vitamin D deficiency in elderly patients"},
                         {"id": "b", "text": "Vitamin supplements"}])
    response = _words(client, name, "Vitamin D deficency", params={"threshold": 0.3})
    assert [h.document_id for h in response.hits] == ["a", "b"]
    with client.session() as conn:
        expected = conn.execute("SELECT (1 + 1 + similarity('deficiency', 'deficency')) / 3,"
                                " 1.0 / 3").fetchone()
    assert [round(h.score, 5) for h in response.hits] == [round(float(e), 5) for e in expected]
    # "&" has no trigram: it is not a query word, so it lowers no score.
    assert _words(client, name, "Vitamin & supplements").hits[0].score == pytest.approx(1.0)


def test_the_dictionary_follows_versions_deletes_and_quarantine(client):
    name = _name()
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "d1", "text": LONG}, {"id": "d2", "text": "unrelated ferry notes"}])
    assert "quokka" in _dictionary(client, name)
    assert [h.document_id for h in _words(client, name, "quoka").hits] == ["d1"]
    time.sleep(0.01)
    before = datetime.now(timezone.utc)
    client.ingest(name, [{"id": "d1", "text": LONG.replace("quokka", "wombat")}])
    assert _words(client, name, "quoka").hits == ()
    assert [h.document_id for h in _words(client, name, "wombta").hits] == ["d1"]
    # The old version's words stay in the dictionary: as_of finds them, by either method.
    old = client.search(name, "quoka almanac", type="fuzzy", as_of=before.isoformat())
    assert old.trace.retrievers[0].details["method"] == "words"  # auto: as without as_of
    assert [(h.document_id, h.version) for h in old.hits] == [("d1", 1)]
    assert [(h.document_id, h.version) for h in
            _words(client, name, "quoka", as_of=before.isoformat()).hits] == [("d1", 1)]
    text = client.search(name, "quoka almanac", type="fuzzy", as_of=before.isoformat(),
                         params={"method": "text"})
    assert [(h.document_id, h.version) for h in text.hits] == [("d1", 1)]
    client.quarantine_document(name, "d1", reason="test")
    assert _words(client, name, "wombta").hits == ()
    client.release_document(name, "d1")
    assert [h.document_id for h in _words(client, name, "wombta").hits] == ["d1"]
    client.delete_document(name, "d1")
    assert _words(client, name, "wombta").hits == ()
    assert {"quokka", "wombat"} <= _dictionary(client, name)
    assert _dictionary(client, name) == _fragment_words(client, name)


def test_words_of_another_classification_or_tenant_change_no_response(client, data_dir):
    name = _name()
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "p", "text": LONG}])
    queries = ["marmelade quoka", "wombta", "zyxomorfic almanac"]

    def responses():
        out = []
        for query in queries:
            for threshold in (None, 0.3):
                r = _words(client, name, query, classification=["public"],
                           params={"threshold": threshold})
                details = dict(r.trace.retrievers[0].details)
                out.append(([(h.document_id, h.score) for h in r.hits], details))
        return out

    seen = responses()
    hidden = "marmalade wombat zyxomorphic quokka almanacs"
    client.ingest(name, [{"id": "s", "text": hidden, "classification": ["fw-secret"]},
                         {"id": "q", "text": hidden}])
    client.quarantine_document(name, "q", reason="test")
    with pgbraid.connect(data_dir=data_dir, tenant="fw-other") as other:
        other.create_pipeline(name, embedder="none")
        other.ingest(name, [{"id": "o", "text": hidden + " wombats"}])
        assert _dictionary(other, name) == set(hidden.split()) | {"wombats"}
    assert {"marmalade", "zyxomorphic"} <= _dictionary(client, name)
    assert "wombats" not in _dictionary(client, name)  # row-level security
    assert responses() == seen
    # The holder of the classification does see it.
    held = _words(client, name, "zyxomorfic", classification=["fw-secret"]).hits
    assert [h.document_id for h in held] == ["s"]


def test_an_encrypted_pipeline_matches_words_through_the_dictionary(client, superuser):
    name = _name()
    client.create_pipeline(name, embedder="none", encrypt=True)
    client.ingest(name, [{"id": "a", "text": LONG}, {"id": "b", "text": "wombat " + LONG[40:]}])
    response = client.search(name, "quoka almanac", type="fuzzy")
    assert response.trace.retrievers[0].details["method"] == "words"
    assert response.hits[0].document_id == "a" and response.hits[0].page_content == LONG
    assert "quokka" in _dictionary(client, name)
    text = client.search(name, "quoka almanac", type="fuzzy", params={"method": "text"})
    assert text.hits[0].document_id == "a"  # the sealed text method: the words' trigrams


def test_two_writing_processes_lose_no_word(client, data_dir, tmp_path):
    """Two processes ingest interleaved halves of 300 SciFact documents, ten a call:
    the dictionary is exactly the union of every fragment's words, and neither
    deadlocks (a failed call fails the worker)."""
    name = _name()
    client.create_pipeline(name, embedder="none")
    go = tmp_path / "go"
    corpus = shared("beir_scifact", "corpus.jsonl.gz")
    _wait(_workers(data_dir, [["slice", data_dir, name, corpus, 300, i, 2, 10, go]
                              for i in range(2)], go), timeout=600)
    docs = scifact(str(corpus))[:300]
    expected = {w for d in docs for w in encryption.distinct_words(d["title"], d["text"]).split()}
    assert _fragment_words(client, name) == expected
    assert _dictionary(client, name) == expected


def test_the_migration_fills_words_by_the_same_rule(client):
    """Migration 028's SQL rule for existing fragments gives distinct_words' result."""
    function = re.search(r"CREATE FUNCTION pg_temp\.distinct_words.*?\n\$\$;", MIGRATION.read_text(),
                         re.S).group(0)
    texts = [d["title"] + " " + d["text"] for d in scifact(str(shared(
        "beir_scifact", "corpus.jsonl.gz")))[:200]]
    texts += ["  Coca-Cola Company (The)  ", "\"Quoted\", (bracketed); 3M & co. #tag |x| ~y~",
              "ÉCOLE Über straße", ""]
    with client.session() as conn:
        conn.execute(function)
        got = [" ".join(r[0]) for r in conn.execute(
            "SELECT pg_temp.distinct_words(t) FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n)"
            " ORDER BY n", (texts,))]
    assert got == [encryption.distinct_words(t) for t in texts]


def test_subsets_find_what_the_union_finds(client, monkeypatch):
    """The subset search (GIN intersections, stopping at a bound) is exact: its hits
    and scores are those of scoring every fragment holding any expanded word."""
    name = _name()
    client.create_pipeline(name, embedder="none")
    docs = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[:300]
    client.ingest(name, docs)
    queries = ["vitamin D deficency", "the effect of smoking", "breast cancr risk",
               "stem cells and regeneraton", "responsible for mucolipdiosis", "zzqx",
               # short words (scored from the candidates' own words at 0.5): one, two,
               # one of a single letter, one that is rare, one beside two typos
               "cells with the", "and the effects", "T cell responses", "raft proteome suing",
               "teh inflamatory respnse"]
    queries += [" ".join(d["title"].split()[:3]) for d in docs[:20:4]]

    def hits(query: str, threshold: float) -> list[tuple[str, float]]:
        response = _words(client, name, query, params={"threshold": threshold})
        return [(h.fragment_id, round(h.score, 6)) for h in response.hits]

    widened = []
    expand = fuzzy_words._Scores.expand

    def spy(self, groups):
        widened.append(len(self.short))
        return expand(self, groups)

    for threshold in (0.5, 0.3):
        monkeypatch.setattr(fuzzy_words._Scores, "expand", spy)
        subsets = [hits(q, threshold) for q in queries]
        monkeypatch.setattr(fuzzy_words, "MAX_GROUPS", 0)  # every query by the union
        assert [hits(q, threshold) for q in queries] == subsets
        monkeypatch.undo()
    assert widened  # some short word was expanded in full midway (fuzzy_subsets.Subsets.run)
    assert all(subsets[:5]) and not subsets[5] and all(subsets[6:9])


def test_trigram_similarity_in_python_is_the_servers(client):
    """Short query words are scored in Python (strategies/trigrams.py): the same float4,
    bit for bit, as pg_trgm's similarity, for ASCII words of any shape; None otherwise."""
    docs = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[:40]
    words = sorted({w for d in docs for w in encryption.distinct_words(d["text"]).split()})
    words += ["the-the", "il-6", "a", "x_y", "o'neil", "aaaa", "1,25(oh)2d3", "--"]
    queries = ["the", "of", "t", "and", "cell", "aaa", "il"]
    with client.session() as conn:
        rows = conn.execute("SELECT q, w, similarity(w, q)::float8 FROM unnest(%s::text[]) q,"
                            " unnest(%s::text[]) w", (queries, words)).fetchall()
    ascii_rows = [(q, w, s) for q, w, s in rows if w.isascii()]
    assert len(ascii_rows) > 5000 and any(s == 1.0 for q, w, s in ascii_rows if q != w)
    assert all(trigrams.similarity(trigrams.trigrams(q), trigrams.trigrams(w)) == s
               for q, w, s in ascii_rows)
    assert trigrams.trigrams("β-cell") is None and any(not w.isascii() for w in words)


def _tied(client) -> str:
    """A pipeline where 80 small fragments hold "and then" and 200 larger ones "and the"
    (each with filler words of its own, so the sizes differ): "and the zzqxv" ties every
    "and the" fragment at the bound, and the smallest fragments holding its expansions
    ("then" reaches 0.5) score below it."""
    name = _name()
    client.create_pipeline(name, embedder="none")
    docs = [{"id": f"then{i}", "text": " ".join(["and", "then"] + [f"q{i}x{j}" for j in range(i % 3)])}
            for i in range(80)]
    docs += [{"id": f"the{i}", "text": " ".join(["and", "the"] + [f"q{i}y{j}" for j in range(4 + i % 5)])}
             for i in range(200)]
    client.ingest(name, docs)
    return name


def test_tied_fragments_are_read_a_page_at_a_time(client, monkeypatch):
    """A stop word beside a word nothing matches ties every fragment holding the stop
    words at the bound: the search reads them in the tie order (fewer words, then the
    smaller id) and stops once no fragment left can enter, instead of scoring all of
    them; the hits are the union's (every candidate scored)."""
    name = _tied(client)
    read = []
    known = fuzzy_words._Scores.known
    monkeypatch.setattr(fuzzy_words._Scores, "known",
                        lambda self, rows: read.append(len(rows)) or known(self, rows))
    hits = _words(client, name, "and the zzqxv").hits
    assert len(hits) == 10 and all(h.score == pytest.approx(2 / 3) for h in hits)
    assert all(h.document_id.startswith("the") for h in hits)
    assert sum(read) < 200  # 64 "then" fragments, 64 of the best expansions', the 16 left
    monkeypatch.setattr(fuzzy_words, "MAX_GROUPS", 0)  # the union: every candidate scored
    union = _words(client, name, "and the zzqxv").hits
    assert [(h.fragment_id, h.score) for h in hits] == [(h.fragment_id, h.score) for h in union]


def test_the_subset_reads_are_planned_without_sequential_scans(client, monkeypatch):
    """The statements the word search sends for its subsets go out with sequential scans
    disabled (the planner costs `word_set && expansions` as one call a row: a parallel
    sequential scan of 100k fragments took 3 s where the word index took ms) and are
    planned on an index; the statements after the search may scan again."""
    name = _tied(client)
    plans, during = [], []
    init = fuzzy_subsets.Subsets.__init__

    class Explaining:
        def __init__(self, conn):
            self.conn = conn

        def __getattr__(self, attribute):
            return getattr(self.conn, attribute)

        def execute(self, statement, params=None):
            during.append(self.conn.execute("SELECT current_setting('enable_seqscan')").fetchone()[0])
            plans.append("\n".join(r[0] for r in self.conn.execute(
                sql.SQL("EXPLAIN ") + statement, params)))
            return self.conn.execute(statement, params)

    monkeypatch.setattr(fuzzy_subsets.Subsets, "__init__",
                        lambda self, conn, *rest: init(self, Explaining(conn), *rest))
    after = []
    search = fuzzy_words.search

    def searched(conn, *args):
        found = search(conn, *args)
        after.append(conn.execute("SELECT current_setting('enable_seqscan')").fetchone()[0])
        return found

    monkeypatch.setattr(fuzzy_words, "search", searched)
    assert _words(client, name, "and the zzqxv").hits
    assert len(plans) >= 3 and set(during) == {"off"}
    assert all("Index" in p and "Seq Scan" not in p for p in plans)
    assert after == ["on"]
