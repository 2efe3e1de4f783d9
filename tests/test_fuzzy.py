"""fuzzy: misspelled names find the right company; thresholds and scores."""

from __future__ import annotations

import csv

import pytest

import pgbraid
from pgbraid import InvalidRequest

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
