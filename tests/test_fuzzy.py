"""fuzzy: misspelled names find the right company; thresholds and scores."""

from __future__ import annotations

import csv

import pytest
from psycopg import sql

import pgbraid
from pgbraid import InvalidRequest, pipelines
from pgbraid.scope import Scope
from pgbraid.strategies import fuzzy, fuzzy_words

from .conftest import shared


@pytest.fixture(scope="module")
def companies(data_dir, server):
    with pgbraid.connect(data_dir=data_dir) as client:
        if "companies" not in {p.name for p in client.pipelines()}:
            client.create_pipeline("companies", embedder="none")
            with shared("company_names", "companies.csv").open() as handle:
                rows = list(csv.DictReader(handle))
            report = client.ingest("companies", [
                {"id": r["symbols"].split()[0], "title": r["name"], "text": r["name"]} for r in rows])
            assert report.added == len(rows) == 5608
    return "companies"


@pytest.mark.parametrize("typed, expected", [
    ("Aple Inc", "Apple Inc."),                                          # one deletion
    ("Intrnational Busines Machines", "International Business Machines Corporation"),
    ("Berkshire Hathway", "Berkshire Hathaway Inc."),                   # missing word, deletion
    ("Jonhson & Jonhson", "Johnson & Johnson"),                         # transpositions
    ("Kroger", "Kroger Company (The)"),                                 # missing words
    ("Coca Cola Company", "Coca-Cola Company (The)"),
])
def test_misspelled_names_find_the_company_first(client, companies, typed, expected):
    response = client.search(companies, typed, type="fuzzy", params={"k": 3})
    assert response.hits[0].page_content == expected
    assert 0 < response.hits[0].score <= 1
    scores = [h.score for h in response.hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("typed, expected", [
    ("Pulbic Stoarge", "Public Storage"),                    # a typo in each of two words
    ("Hanfia Lmiited", "Hafnia Limited"),
    ("Plexups Coop.", "Plexus Corp."),
])
def test_two_typo_names_widen_the_default_threshold(client, companies, typed, expected):
    response = client.search(companies, typed, type="fuzzy", params={"k": 3})
    assert response.hits[0].page_content == expected
    details = response.trace.retrievers[0].details
    assert details["threshold"] == 0.3 and "fewer than 3" in details["widened"]
    # A threshold given in the request is used as given: nothing reaches 0.5.
    strict = client.search(companies, typed, type="fuzzy", params={"k": 3, "threshold": 0.5})
    assert strict.hits == () and "widened" not in strict.trace.retrievers[0].details


def test_a_full_list_at_the_default_is_not_widened(client, companies):
    response = client.search(companies, "Apple", type="fuzzy", params={"k": 1})
    assert response.hits[0].page_content == "Apple Inc."
    assert response.trace.retrievers[0].details["threshold"] == 0.5
    assert "widened" not in response.trace.retrievers[0].details


def test_threshold_narrows_and_explains(client, companies):
    strict = client.search(companies, "Aple Inc", type="fuzzy", params={"k": 10, "threshold": 0.7})
    assert [h.page_content for h in strict.hits] == ["Apple Inc."]
    none = client.search(companies, "zzzzqqq", type="fuzzy", params={"threshold": 0.9})
    assert none.hits == ()
    assert "threshold" in none.trace.retrievers[0].details["explanation"]


@pytest.mark.parametrize("threshold", [-0.1, 1.5, "high", True])
def test_threshold_outside_0_1_is_rejected(client, companies, threshold):
    with pytest.raises(InvalidRequest, match="threshold"):
        client.search(companies, "Apple", type="fuzzy", params={"threshold": threshold})


def test_fuzzy_is_not_fulltext(client, companies):
    """A misspelling defeats stemming but not trigrams (seed 000)."""
    assert client.search(companies, "Berkshire Hathway", type="fulltext").hits == ()
    assert client.search(companies, "Berkshire Hathway", type="fuzzy").hits


_FILLER = ("The quarterly notes list suppliers, warehouses and freight routes in no "
           "particular order, with the usual remarks about schedules and delays. ")


def _reference(conn, pipeline_id: int, query: str, threshold: float) -> list[tuple[str, float]]:
    """The text method's definition, no index in mind: text ``%>`` or title ``%``."""
    fuzzy_words.set_thresholds(conn, threshold)
    return sorted(conn.execute(
        "SELECT f.id, round(greatest(word_similarity(%(q)s, f.body),"
        " similarity(f.title, %(q)s))::numeric, 6)::float8 FROM pgbraid.fragments f"
        " WHERE f.pipeline_id = %(p)s AND f.current AND NOT f.quarantined"
        " AND (f.body %%> %(q)s OR f.title %% %(q)s)",
        {"q": query, "p": pipeline_id}).fetchall())


def test_the_text_method_finds_long_fragments_as_short_ones(client, pipeline):
    """Long text is not in the body trigram index (migration 053); the text method
    still finds it, with the same hits and scores as its definition over every text."""
    long = _FILLER * 3 + "Our largest account remains Berkshire Hathaway Inc. " + _FILLER
    assert len(long.encode()) > fuzzy.SHORT_BODY_BYTES
    client.ingest(pipeline, [
        {"id": "long", "title": "Supplier notes", "text": long},
        {"id": "short", "title": "Berkshire Hathaway Inc.", "text": "Berkshire Hathaway Inc."},
        {"id": "other", "title": "Notes", "text": _FILLER * 4},
        {"id": "title", "title": "Berkshire Hathway", "text": _FILLER * 2}])
    for threshold in (0.5, 0.3):
        hits = client.search(pipeline, "Berkshire Hathway", type="fuzzy",
                             params={"k": 10, "method": "text", "threshold": threshold}).hits
        with client.session() as conn:
            pipeline_id = pipelines.get(conn, pipeline).id
            expected = _reference(conn, pipeline_id, "Berkshire Hathway", threshold)
        assert sorted((h.fragment_id, round(h.score, 6)) for h in hits) == expected
        assert {"long", "short", "title"} <= {h.document_id for h in hits}


def test_the_text_method_plans_on_its_indexes(client, companies, monkeypatch):
    """On names, the statement the text method sends reads the body and title trigram
    indexes, never the whole table, and has no arm for long text (there is none: with
    it, the planner had no length statistics and planned a parallel scan)."""
    sent = []
    statement = fuzzy.statement
    monkeypatch.setattr(fuzzy, "statement",
                        lambda *a, **kw: sent.append(statement(*a, **kw)) or sent[-1])
    assert client.search(companies, "Aple Inc", type="fuzzy",
                         params={"method": "text"}).hits
    with client.session() as conn:
        fuzzy_words.set_thresholds(conn, 0.5)
        plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + sent[0][0],
                                                    sent[0][1]))
    assert "fragments_body_trgm" in plan and "fragments_title_trgm" in plan, plan
    assert "Seq Scan on fragments" not in plan and "fragments_body_long" not in plan, plan


def test_asking_for_long_text_reads_the_long_fragments_index(client, companies, pipeline):
    """Whether the scope holds long text (the text method's first round trip) is read
    from fragments_body_long, never by scanning fragments: asked as a plain EXISTS on a
    pipeline of names beside long text, the planner guessed a third of the names long and
    seq-scanned the table to find none (15-30 ms a query on the bench server). Which
    plan wins depends on the table's size and its statistics; a dear random read (as on
    the bench server, where a few pipelines fill the table) makes that EXISTS a seq scan
    here too, and must leave this question on the index."""
    client.ingest(pipeline, [{"id": f"long-{i}", "text": _FILLER * 4} for i in range(40)])
    with client._db.admin() as conn:
        conn.execute("ANALYZE pgbraid.fragments")
    with client.session() as conn:
        conn.execute("SELECT set_config('random_page_cost', '40', true)")
        for name, holds_long in ((companies, False), (pipeline, True)):
            scope = Scope(pipelines.get(conn, name).id, ("public",))
            statement, params = fuzzy.shape_statement("text", scope)
            plan = "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + statement, params))
            assert "fragments_body_long" in plan and "Seq Scan on fragments" not in plan, plan
            assert conn.execute(statement, params).fetchone()[1] is holds_long
