"""hybrid and auto: fusion, the planner, identifiers first, skipped and failed legs."""

from __future__ import annotations

import gzip
import json
import threading
import uuid

import pytest

import pgbraid
from pgbraid import InvalidRequest
from pgbraid.embedders.server import make_server
from pgbraid.fusion import fuse, promote
from pgbraid.planner import identifiers, plan
from pgbraid.strategies.base import Row

from .conftest import shared


def kev_records(limit: int) -> list[dict]:
    with gzip.open(shared("cisa_kev", "known_exploited_vulnerabilities.json.gz"), "rt") as handle:
        vulnerabilities = json.load(handle)["vulnerabilities"]
    return [{"id": v["cveID"], "title": f"{v['cveID']} {v['vendorProject']} {v['product']}",
             "text": f"{v['vulnerabilityName']}. {v['shortDescription']}",
             "metadata": {"vendor": v["vendorProject"], "ransomware": v["knownRansomwareCampaignUse"]}}
            for v in vulnerabilities[:limit]]


@pytest.fixture(scope="module")
def kev(data_dir, server):
    with pgbraid.connect(data_dir=data_dir) as client:
        if "kev" not in {p.name for p in client.pipelines()}:
            client.create_pipeline("kev")
            report = client.ingest("kev", kev_records(150))
            assert report.added == 150 and report.embedded == 150
    return "kev"


def test_a_present_cve_id_is_first_for_auto_and_hybrid(client, kev):
    for record in kev_records(150)[::15]:
        for kind in ("auto", "hybrid"):
            response = client.search(kev, record["id"], type=kind, params={"k": 5})
            assert response.hits[0].document_id == record["id"], (kind, record["id"])
    response = client.search(kev, f"is {kev_records(3)[2]['id']} exploited by ransomware?", type="auto")
    assert response.hits[0].document_id == kev_records(3)[2]["id"]


def test_an_absent_cve_id_shows_the_lexical_leg_found_nothing(client, kev):
    alone = client.search(kev, "CVE-2099-99999", type="similarity", params={"k": 3})
    assert len(alone.hits) == 3  # semantic search always returns a near-miss
    auto = client.search(kev, "CVE-2099-99999", type="auto", params={"k": 3})
    entries = {e.retriever: e for e in auto.trace.retrievers}
    assert entries["fulltext"].status == "ran" and entries["fulltext"].hits == 0
    assert entries["similarity"].hits > 0
    assert auto.trace.fusion["plan"]["identifiers"] == ["CVE-2099-99999"]
    assert "cve" in auto.trace.fusion["plan"]["reasons"][0]


def test_fused_hits_list_their_strategies_ranks_and_scores(client, kev):
    response = client.search(kev, "remote code execution in a web server", type="hybrid",
                             params={"k": 10, "weights": {"bm25": 1.0, "similarity": 1.0}})
    assert response.trace.fusion["method"] == "rrf" and response.trace.fusion["rrf_k"] == 60
    both = [h for h in response.hits if len(h.found_by) == 2]
    assert both, "some hit should be found by both legs"
    for hit in response.hits:
        assert {f.strategy for f in hit.found_by} <= {"bm25", "similarity"}
        expected = sum(1 / (60 + f.rank) for f in hit.found_by)
        assert hit.score == pytest.approx(expected, rel=1e-6)
    ranks = response.trace.fusion["top_hits_final_rank"]
    assert set(ranks) == {"bm25", "similarity"} and all(len(v) == 5 for v in ranks.values())


def test_group_by_document_and_score_fusion(client, kev):
    grouped = client.search(kev, "Microsoft Windows privilege escalation", type="hybrid",
                            group_by="document", params={"k": 10, "fusion": "min-max"})
    ids = [h.document_id for h in grouped.hits]
    assert len(ids) == len(set(ids)) == 10
    assert grouped.trace.fusion["method"] == "min-max"
    assert all(0 <= h.score <= 2 for h in grouped.hits)


def test_a_leg_that_cannot_run_is_skipped_and_the_others_answer(client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "Apache Log4j remote code execution"}])
    response = client.search(pipeline, "log4j", type="hybrid")
    entries = {e.retriever: e for e in response.trace.retrievers}
    assert entries["similarity"].status == "skipped" and "no embedder" in entries["similarity"].reason
    assert entries["bm25"].status == "ran" and response.hits[0].document_id == "a"


def test_a_leg_that_fails_is_reported_and_the_others_answer(data_dir, server):
    model = pgbraid.embedders.get("minilm")
    http = make_server(model, "127.0.0.1", 0)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    name = f"h-{uuid.uuid4().hex[:8]}"
    url = f"http://127.0.0.1:{http.server_port}/v1"
    with pgbraid.connect(data_dir=data_dir, openai_url=url, openai_model="m") as client:
        client.create_pipeline(name, embedder="openai")
        client.ingest(name, [{"id": "a", "text": "Apache Log4j remote code execution"}])
    http.shutdown()
    http.server_close()
    pgbraid.embedders.get.cache_clear()
    try:
        with pgbraid.connect(data_dir=data_dir, openai_url=url, openai_model="m",
                             openai_timeout=1) as client:
            response = client.search(name, "log4j", type="hybrid")
            entries = {e.retriever: e for e in response.trace.retrievers}
            assert entries["similarity"].status == "failed" and entries["similarity"].reason
            assert response.hits[0].document_id == "a"
    finally:
        pgbraid.embedders.get.cache_clear()


@pytest.mark.parametrize("params, fragment", [
    ({"strategies": ["bm25", "telepathy"]}, "unknown search type"),
    ({"strategies": ["bm25", "hybrid"]}, "cannot be a leg"),
    ({"weights": {"bm25": -1}}, "weights"),
    ({"weights": {"bm25": "heavy"}}, "weights"),
    ({"rrf_k": 0}, "rrf_k"),
    ({"fusion": "borda"}, "fusion"),
    ({"depth": 0}, "depth"),
])
def test_bad_hybrid_params(client, pipeline, params, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        client.search(pipeline, "log4j", type="hybrid", params=params)


def _row(fragment: int, doc: str, score: float) -> Row:
    return Row(fragment_id=fragment, document_id=doc, version=1, title=None, body=doc, metadata={},
               classifications=["public"], language="english", score=score)


def test_rrf_collapses_duplicates_keeping_every_rank():
    legs = {"bm25": [_row(1, "a", 9.0), _row(2, "b", 5.0)],
            "similarity": [_row(2, "b", 0.1), _row(3, "c", 0.2), _row(1, "a", 0.3)]}
    fused = fuse(legs, rrf_k=60)
    assert [f.row.fragment_id for f in fused] == [2, 1, 3]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert sorted(fused[0].found_by) == [("bm25", 2, 5.0), ("similarity", 1, 0.1)]
    weighted = fuse(legs, rrf_k=60, weights={"bm25": 3.0, "similarity": 1.0})
    assert weighted[0].row.fragment_id == 1
    by_doc = fuse({"x": [_row(1, "a", 2.0), _row(2, "a", 1.0), _row(3, "b", 0.5)]}, by_document=True)
    assert [(f.row.fragment_id, f.found_by[0][1]) for f in by_doc] == [(1, 1), (3, 2)]


def test_promotion_puts_verbatim_identifiers_first():
    fused = fuse({"similarity": [_row(1, "near miss", 0.1), _row(2, "has CVE-2021-44228", 0.2)]})
    assert [f.row.fragment_id for f in promote(fused, ["cve-2021-44228"])] == [2, 1]


@pytest.mark.parametrize("query, kinds", [
    ("CVE-2021-44228", {"cve"}),
    ("d41d8cd98f00b204e9800998ecf8427e", {"hash"}),
    ("beacon to 185.220.101.4 and evil[.]com", {"ip", "domain"}),
    ("what does is_action_pressed return", {"code"}),
    ('error "connection refused" on start', {"quoted"}),
    ("/usr/bin/python3 segfault", {"path"}),
    ("T1059.001 PowerShell", {"attack"}),
])
def test_planner_finds_identifiers(query, kinds):
    assert {kind for kind, _ in identifiers(query)} == kinds
    assert plan(query).legs[0].strategy == "fulltext"


def test_mixed_case_names_are_found_but_plan_like_words():
    assert identifiers("AnimatedSprite2D play") == [("mixed-case", "AnimatedSprite2D")]
    claim = plan("ADAR1 binds to Dicer to cleave pre-miRNA.")
    assert [l.strategy for l in claim.legs] == ["bm25", "similarity"] and claim.identifiers == []
    mixed = plan("miRNA in CVE-2021-44228 reports")  # with a real identifier: both count
    assert mixed.legs[0].strategy == "fulltext" and mixed.identifiers == ["CVE-2021-44228"]


def test_planner_weighs_questions_and_names():
    question = plan("how do I restore a dropped table from backups?")
    assert {l.strategy: l.weight for l in question.legs} == {"bm25": 1.0, "similarity": 1.5}
    name = plan("Berkshire Hathaway")
    assert "fuzzy" in [l.strategy for l in name.legs]


def test_only_names_get_a_fuzzy_leg():
    assert "fuzzy" in [l.strategy for l in plan("Mircosoft Sharepoint").legs]
    assert "fuzzy" not in [l.strategy for l in plan("mircosoft sharepoint").legs]


def test_fuzzy_leads_only_when_a_word_is_missing_and_no_weights_are_given():
    from pgbraid.models import SearchRequest
    from pgbraid.planner import leader

    request = SearchRequest(query="Mircosoft Sharepoint", type="auto")
    assert leader(request, plan(request.query), []) is None          # every word is known
    chosen = plan(request.query)
    assert leader(request, chosen, ["mircosoft"]) == "fuzzy"
    assert "mircosoft" in chosen.reasons[-1]
    weighted = SearchRequest(query="Mircosoft Sharepoint", type="auto",
                             params={"weights": {"bm25": 2}})
    assert leader(weighted, plan(weighted.query), ["mircosoft"]) is None
    hybrid = SearchRequest(query="Mircosoft Sharepoint", type="hybrid")
    assert leader(hybrid, plan(hybrid.query), ["mircosoft"]) is None


def test_lead_orders_the_leaders_hits_first():
    from pgbraid.fusion import lead

    rows = {name: [Row(fragment_id=i, document_id=str(i), version=1, title="", body="",
                       metadata={}, classifications=[], language=None, score=1.0) for i in ids]
            for name, ids in {"bm25": [1, 2], "similarity": [1, 2], "fuzzy": [3, 2]}.items()}
    fused = fuse(rows)
    assert [f.row.fragment_id for f in fused][0] == 2
    assert [f.row.fragment_id for f in lead(fused, "fuzzy")] == [3, 2, 1]
    assert lead(fused, None) == fused


@pytest.mark.parametrize("typed", ["Mircosoft Sharepoint", "mircosoft sharepiont"])
def test_auto_finds_a_product_with_a_typo_in_each_word(client, kev, typed):
    response = client.search(kev, typed, type="auto", params={"k": 3})
    assert "SharePoint" in response.hits[0].title
    assert "likely misspelled" in response.trace.fusion["plan"]["reasons"][-1]
    fuzzy = next(e for e in response.trace.retrievers if e.retriever == "fuzzy")
    assert fuzzy.status == "ran" and fuzzy.hits > 0
    followed = "a fuzzy leg ran after the others" in " ".join(
        response.trace.fusion["plan"]["reasons"])
    assert followed == typed.islower()  # capitalised: planned; lowercase: after bm25 showed it


def test_a_known_lowercase_query_runs_no_fuzzy_leg(client, kev):
    response = client.search(kev, "remote code execution", type="auto", params={"k": 3})
    assert "fuzzy" not in [e.retriever for e in response.trace.retrievers]
