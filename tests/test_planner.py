"""The planner's shape rules: identifiers are not names, questions are questions, and a
query without words plans (and answers) nothing, saying why."""

from __future__ import annotations

import time
import uuid

import pytest

from pgbraid import planner
from pgbraid.models import SearchRequest
from pgbraid.planner import for_request, plan


def _strategies(query: str, kind: str) -> list[str]:
    chosen = for_request(SearchRequest(query=query, type=kind))
    return [leg.strategy for leg in chosen.legs]


@pytest.mark.parametrize("query", [
    "CVE-2021-44228", "T1059.001", "D41D8CD98F00B204E9800998ECF8427E", "GHSA-jfh8-c2jp-5v3q",
    "Vector2.normalized", "Input.is_action_pressed", "Node.js", "Amazon.com"])
@pytest.mark.parametrize("kind", ["hybrid", "auto"])
def test_an_identifier_gets_no_fuzzy_leg(query, kind):
    assert "fuzzy" not in _strategies(query, kind)


@pytest.mark.parametrize("query", ["Berkshire Hathaway", "J.P. Morgan Chase",
                                   "Dr.Reddy's Laboratories", "Mircosoft Sharepoint"])
@pytest.mark.parametrize("kind", ["hybrid", "auto"])
def test_a_name_still_gets_a_fuzzy_leg(query, kind):
    assert "fuzzy" in _strategies(query, kind)


def test_a_long_keyword_query_is_not_called_a_question():
    chosen = plan("Microsoft Exchange Server remote code execution")
    assert {leg.strategy: leg.weight for leg in chosen.legs} == {"bm25": 1.0, "similarity": 1.5}
    assert chosen.reasons == ["a long query (6 words or more): semantic leg weighs most"]
    question = plan("how do I restore a dropped table from backups?")
    assert question.reasons == ["natural-language question: semantic leg weighs most"]


@pytest.mark.parametrize("query", ["!!! ???", "?", "-- ... //", "\u2014 \u00bf?"])
def test_a_query_without_words_is_no_question(query):
    chosen = plan(query)
    assert chosen.reasons == ["the query has no words (letters or digits) to search: every leg "
                              "finds nothing"]
    hybrid = for_request(SearchRequest(query=query, type="hybrid"))
    assert hybrid.reasons[-1] == chosen.reasons[0]


def test_the_dotted_code_rule_is_linear():
    for query in ("Aa." * 3333, "A" + "a" * 9999, "Aa" * 5000 + ".", "A" + "a." * 4999):
        started = time.perf_counter()
        planner.looks_like_name(query)
        assert time.perf_counter() - started < 0.5, query[:20]


@pytest.mark.parametrize("kind", ["fuzzy", "fulltext", "bm25", "similarity", "mmr", "hybrid",
                                  "auto"])
def test_every_strategy_answers_a_query_without_words_with_nothing_and_says_why(client, kind):
    name = f"w-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name)  # with the default embedder: similarity and mmr run
    client.ingest(name, [{"id": "a", "title": "Apache Log4j2",
                          "text": "Remote code execution through JNDI lookups."}])
    response = client.search(name, "!!! ???", type=kind)
    assert not response.hits
    for entry in response.trace.retrievers:
        assert entry.status == "ran" and entry.hits == 0, entry
        assert "no searchable words" in entry.details["explanation"] or \
            "no words (letters or digits)" in entry.details["explanation"], entry
