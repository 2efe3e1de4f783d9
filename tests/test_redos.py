"""The planner's identifier patterns stay linear on crafted queries (ReDoS), the
permission is checked before a query is planned, and a request's identifiers are
computed once (hybrid and auto asked for them three times)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from pgbraid import planner

from .serving import served, tenant_client  # noqa: F401  (fixture)

N = 10_000
BUDGET_S = 2.0
"""Per crafted query; each takes about 1 to 60 ms here (docs/benchmarks.md), the old
domain pattern took about 20 s on "a-." * 3333."""


def fill(unit: str) -> str:
    return (unit * (N // len(unit) + 1))[:N]


CRAFTED = {
    "cve": [fill("CVE-2024-"), fill("CVE-1234-12345678"), "CVE-" + "1" * (N - 4)],
    "cwe": [fill("CWE-"), "CWE-" + "1" * (N - 4)],
    "advisory": [fill("GHSA-2345-"), fill("ABCDESA-1234:"), "ABSA-1234:" + "1" * (N - 11) + "x"],
    "attack": [fill("T1234."), fill("T1234.12 ")],
    "hash": ["a" * N, fill("a" * 63 + " "), fill("a" * 65 + "-")],
    "ip": [fill("1."), fill("255.255.255."), fill("1.1.1.1.")],
    "domain": [fill("a-."), fill("a."), fill("a[.]"), fill("a-[.]"), "a" * (N - 5) + ".comx",
               fill("x.com.")],
    "path": [fill(" /a"), fill("/a/"), fill(" a:\\ "), fill("a:\\"), " /" + "a" * (N - 2)],
    "code": [fill("a_"), fill("a."), fill("a.a("), "a" * (N - 1) + "(", fill("a_a_") + "\u00e9"],
    "mixed-case": [fill("aA"), fill("AaA1"), fill("Aa") + "_", "a" * (N - 2) + "A_"],
    "quoted": ['"' * N, fill('"a'), '"' + "a" * (N - 1)],
}


def test_every_pattern_is_covered():
    assert set(CRAFTED) == set(planner.IDENTIFIERS)


@pytest.mark.parametrize("kind,query", [(k, q) for k, qs in CRAFTED.items() for q in qs])
def test_crafted_queries_are_planned_within_a_time_budget(kind, query):
    planner._identifiers.cache_clear()
    started = time.perf_counter()
    planner.plan(query)
    assert time.perf_counter() - started < BUDGET_S, kind


def test_domains_are_still_found():
    found = planner.identifiers("evil.example.com, login.microsoftonline[.]com and "
                                "foo.example.co.uk.evil but not example.community or a.b")
    assert found == [("domain", "evil.example.com"), ("domain", "login.microsoftonline.com"),
                     ("domain", "foo.example.co.uk")]


def test_a_request_computes_its_identifiers_once(client, pipeline, monkeypatch):
    client.ingest(pipeline, [{"id": "a", "text": "CVE-2021-44228 in log4j"}])
    runs: list[str] = []
    matches = planner._matches

    def counted(kind, pattern, query):
        runs.append(kind)
        return matches(kind, pattern, query)

    monkeypatch.setattr(planner, "_matches", counted)
    for kind in ("hybrid", "auto"):
        runs.clear()
        query = f"CVE-2021-44228 {uuid.uuid4().hex}"  # a query of its own: no earlier cache
        client.search(pipeline, query, type=kind)
        assert sorted(runs) == sorted(planner.IDENTIFIERS), kind


def test_the_permission_comes_before_the_plan_and_a_crafted_query_is_fast(data_dir, served):
    with tenant_client(data_dir) as tenant:
        tenant.create_pipeline("redos", embedder="none")
        tenant.ingest("redos", [{"id": "a", "text": "a plain document"}])
        writer = tenant.create_key(pipeline="redos", permissions="write")
        reader = tenant.create_key(pipeline="redos", permissions="read,execute")
    bad = {"query": "x", "type": "hybrid", "params": {"strategies": ["nope"]}}
    with served.client(writer["key"]) as http:
        # A request the planner would refuse (400) is refused for the permission first.
        refused = http.post("/pipelines/redos/search", json=bad)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
    with served.client(reader["key"]) as http:
        assert http.post("/pipelines/redos/search", json=bad).status_code == 400
        for kind in ("auto", "hybrid", "bm25"):
            started = time.perf_counter()
            answer = http.post("/pipelines/redos/search",
                               json={"query": fill("a-."), "type": kind})
            assert answer.status_code == 200, answer.text
            assert time.perf_counter() - started < 10 * BUDGET_S, kind
        assert httpx.get(served.url + "/healthz", timeout=BUDGET_S).status_code == 200
