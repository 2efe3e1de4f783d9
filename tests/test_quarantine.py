"""Quarantine as a guarantee: a quarantined document is excluded before ranking in every
search (k hits are k others), BM25's statistics and scores equal those of a pipeline
that never had it, and a release restores exactly what was there before."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import pgbraid
from pgbraid import strategies
from pgbraid.errors import InvalidRequest, NotFound
from pgbraid.scope import Principal

from .bm25_worker import scifact
from .conftest import shared

QUERY = "reactor maintenance schedule"
TARGET = {"id": "q1", "title": "Reactor maintenance schedule",
          "text": "The reactor maintenance schedule: reactor maintenance every week, on schedule."}
OTHERS = [{"id": f"p{i}", "title": f"Reactor note {i}",
           "text": f"Reactor maintenance schedule number {i}: " + "inspection " * i}
          for i in range(1, 7)] + [
    {"id": "x1", "title": "APT29 report", "text": "APT29 uses spearphishing and PowerShell."},
    {"id": "x2", "title": "Cozy Bear", "text": "Cozy Bear shares techniques with APT29."}]
VERTICES = [("group", "G1", "APT29", ["q1", "x1"]), ("group", "G2", "Cozy Bear", ["x2", "q1"]),
            ("technique", "T1", "Spearphishing", []), ("technique", "T2", "PowerShell", [])]
EDGES = [("group", "G1", "uses", "technique", "T1"), ("group", "G1", "uses", "technique", "T2"),
         ("group", "G2", "uses", "technique", "T1"), ("group", "G2", "uses", "technique", "T2")]
K = 3
FUTURE = "2100-01-01T00:00:00+00:00"
# Values that measure the process, not the content: timings, and the postings this
# process's cache did not hold (a segment rewritten is fetched again).
PROCESS = {"ms", "postings_fetched"}
# Fused with equal weights, two fragments ranked (a, b) and (b, a) by the legs tie, and
# ties fall by fragment id, random per pipeline: uneven weights cannot tie.
UNEVEN = {"bm25": 1.0, "similarity": 0.75}


def ties_by_fragment_id(request: dict[str, Any]) -> bool:
    """Fuzzy (whose scores here are all 1.0) and fused plans of equal weights order
    their ties by fragment id: across pipelines only their scores compare."""
    return request["type"] == "fuzzy" or (request["type"] in ("hybrid", "auto")
                                          and "weights" not in request["params"]
                                          and "fusion" not in request["params"])


def requests() -> list[dict[str, Any]]:
    """The registry's every strategy, graph modes, fused plans, as of a time, history,
    highlights and pages: each must answer k hits none of which is quarantined."""
    walked = [{"type": name, "query": QUERY, "params": {"k": K}}
              for name in strategies.REGISTRY if name != "graph"]
    walked += [{"type": "graph", "query": "APT29", "params": {"k": K, "mode": "similar"}},
               {"type": "graph", "query": "APT29", "params": {"k": K, "mode": "neighbours"}},
               {"type": "hybrid", "query": QUERY, "params": {"k": K}},
               {"type": "auto", "query": QUERY, "params": {"k": K}},
               {"type": "hybrid", "query": QUERY, "params": {"k": K, "weights": UNEVEN}},
               {"type": "auto", "query": QUERY, "params": {"k": K, "weights": UNEVEN}},
               {"type": "hybrid", "query": QUERY, "params": {"k": K, "fusion": "min-max"}}]
    walked += [{"type": name, "query": QUERY, "params": {"k": K}, "as_of": FUTURE}
               for name, s in strategies.REGISTRY.items() if s.versioned]
    walked += [{"type": "history", "query": QUERY, "params": {"k": K, **extra}, "as_of": FUTURE}
               for extra in ({}, {"strategy": "fulltext"}, {"strategy": "similarity"})]
    walked += [{"type": name, "query": QUERY, "params": {"k": K, "highlight": True}}
               for name in ("fulltext", "bm25", "hybrid")]
    walked += [{"type": name, "query": QUERY, "params": {"k": K, "offset": 1}}
               for name in ("bm25", "fulltext", "similarity", "hybrid")]
    walked += [{"type": "bm25", "query": QUERY, "params": {"k": K, "pruning": "maxscore"}},
               {"type": "bm25", "query": QUERY, "params": {"k": K}, "group_by": "document"}]
    return walked


def plain(value: Any, drop: frozenset[str] = frozenset()) -> Any:
    """A response without what differs between two runs or pipelines by design."""
    if isinstance(value, dict):
        return {k: plain(v, drop) for k, v in value.items()
                if k not in PROCESS and not k.endswith("_ms") and k not in drop}
    if isinstance(value, list):
        return [plain(v, drop) for v in value]
    return value


def observe(client: pgbraid.Client, pipeline: str,
            drop: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every response of the walk; with ``drop`` (comparing two pipelines), also without
    the order of fuzzy's ties (broken by fragment id, random per pipeline) and the time
    a cursor holds (each pipeline's last write)."""
    seen = {}
    for n, request in enumerate(requests()):
        response = client.search(pipeline, **request).model_dump(mode="json")
        seen[f"{n}:{request['type']}"] = plain(_untied(response, request, drop), drop)
        if response["next_cursor"]:
            following = {**request, "params": {**request["params"]}}
            following["params"].pop("offset")
            page = client.search(pipeline, cursor=response["next_cursor"], **following)
            seen[f"{n}:next"] = plain(_untied(page.model_dump(mode="json"), request, drop),
                                      drop | {"as_of"} if drop else drop)
    info = client.pipeline(pipeline).model_dump()
    seen["counts"] = {k: info[k] for k in ("documents", "versions", "fragments")}
    return seen


def _untied(response: dict[str, Any], request: dict[str, Any], drop: frozenset[str]) -> dict:
    if drop and ties_by_fragment_id(request):
        response["hits"] = sorted(h["score"] for h in response["hits"])
        if response["trace"]["fusion"]:
            response["trace"]["fusion"].pop("top_hits_final_rank")
    return response


@pytest.fixture(scope="module")
def world(data_dir, server):
    """A pipeline holding TARGET (ingested last, alone) and one that never had it."""
    names = f"qa-{uuid.uuid4().hex[:8]}", f"qb-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as admin:
        for name in names:
            admin.create_pipeline(name)  # the default embedder: similarity and mmr run
            admin.ingest(name, OTHERS)
            admin.load_graph_records(name, VERTICES, EDGES)
        admin.ingest(names[0], [TARGET])
    return names


def test_every_search_answers_k_hits_none_quarantined_then_release_restores(data_dir, world):
    pipeline, never = world
    with pgbraid.connect(data_dir=data_dir) as admin:
        before = {}
        for n, request in enumerate(requests()):
            before[n] = admin.search(pipeline, **request)
        found = [n for n, r in before.items() if "q1" in {h.document_id for h in r.hits}]
        assert len(found) >= len(requests()) - 6, "the target should lead most searches"
        seen_before = observe(admin, pipeline)

        state = admin.quarantine_document(pipeline, "q1", reason="suspected poisoning")
        assert state["quarantined"] and state["changed"] and state["reason"] == "suspected poisoning"
        for n, request in enumerate(requests()):
            response = admin.search(pipeline, **request)
            ids = [h.document_id for h in response.hits]
            assert "q1" not in ids, request
            if n in found and request["type"] != "graph":
                assert len(ids) == K, (request, ids)  # k others, not k minus the quarantined
            for entry in response.trace.retrievers:
                for entity in entry.details.get("entities", []):
                    assert "q1" not in entity["documents"], request
            assert "q1" not in json.dumps(response.model_dump(mode="json"))

        # Exactly what a pipeline that never had it answers: hits, scores, ranks, the
        # trace's statistics (N, avgdl, df, idf), counts; not fragment ids or cursors
        # (random per pipeline / the time of each pipeline's writes).
        drop = frozenset({"fragment_id", "next_cursor", "pipeline"})
        assert observe(admin, pipeline, drop) == observe(admin, never, drop)

        again = admin.quarantine_document(pipeline, "q1", reason="another reason")
        assert again == {**state, "changed": False, "lsn": again["lsn"]}  # the first reason stands

        released = admin.release_document(pipeline, "q1")
        assert released == {"document_id": "q1", "quarantined": False, "reason": None,
                            "quarantined_at": None, "changed": True, "lsn": released["lsn"]}
        assert "/" in released["lsn"]  # a WAL position, for a replica search's min_lsn
        assert observe(admin, pipeline) == seen_before
        assert admin.release_document(pipeline, "q1")["changed"] is False


def test_a_new_version_of_a_quarantined_document_stays_quarantined(data_dir, world):
    pipeline, never = world
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.quarantine_document(pipeline, "q1")
        changed = {**TARGET, "text": TARGET["text"] + " Revised: reactor maintenance schedule."}
        assert admin.ingest(pipeline, [changed]).updated == 1
        drop = frozenset({"fragment_id", "next_cursor", "pipeline"})
        assert observe(admin, pipeline, drop) == observe(admin, never, drop)
        admin.release_document(pipeline, "q1")
        bm25 = admin.search(pipeline, QUERY, type="bm25", params={"k": 1})
        assert bm25.hits[0].document_id == "q1" and bm25.hits[0].version == 2
        for name in ("fulltext", "similarity", "fuzzy"):
            hits = admin.search(pipeline, QUERY, type=name, params={"k": 10}).hits
            assert "q1" in {h.document_id for h in hits}, name
        # Release after a re-ingest equals a pipeline ingested with that version.
        fresh = f"qc-{uuid.uuid4().hex[:8]}"
        admin.create_pipeline(fresh, embedder="none")
        admin.ingest(fresh, OTHERS)
        admin.ingest(fresh, [changed])
        mine = admin.search(pipeline, QUERY, type="bm25", params={"k": 9})
        theirs = admin.search(fresh, QUERY, type="bm25", params={"k": 9})
        assert [(h.document_id, h.score) for h in mine.hits] == [
            (h.document_id, h.score) for h in theirs.hits]
        admin.delete_pipeline(fresh)


def test_reads_hide_a_quarantined_document_from_readers_who_cannot_release_it(data_dir, world):
    pipeline, _ = world
    reader = Principal("default", {"*": frozenset({"read", "execute"})}, ())
    writer = Principal("default", {"*": frozenset({"read", "write", "execute"})}, ())
    with pgbraid.connect(data_dir=data_dir) as admin, \
            pgbraid.connect(data_dir=data_dir, principal=reader) as r, \
            pgbraid.connect(data_dir=data_dir, principal=writer) as w:
        fragment = admin.search(pipeline, QUERY, type="bm25", params={"k": 1}).hits[0]
        assert fragment.document_id == "q1"
        listed = r.documents(pipeline)["documents"]
        admin.quarantine_document(pipeline, "q1", reason="review")
        for read in (lambda: r.document(pipeline, "q1"), lambda: r.versions(pipeline, "q1"),
                     lambda: r.fragment(pipeline, fragment.fragment_id)):
            with pytest.raises(NotFound):
                read()
        assert r.documents(pipeline)["documents"] == [d for d in listed if d["document_id"] != "q1"]
        shown = w.document(pipeline, "q1")
        assert shown["quarantined"] and shown["quarantine_reason"] == "review"
        assert w.fragment(pipeline, fragment.fragment_id)["quarantined"]
        assert "q1" in {d["document_id"] for d in w.documents(pipeline)["documents"]}
        for name in ("bm25", "fuzzy", "hybrid"):  # who may release it still searches without it
            assert "q1" not in {h.document_id for h in w.search(pipeline, QUERY, type=name).hits}
        with pytest.raises(pgbraid.Forbidden):
            r.quarantine_document(pipeline, "p1")
        admin.release_document(pipeline, "q1")
        assert r.document(pipeline, "q1")["quarantined"] is False


def test_bad_requests_change_nothing(client, pipeline, data_dir):
    client.ingest(pipeline, [{"id": "a", "text": "alpha beta"}])
    with pytest.raises(NotFound):
        client.quarantine_document(pipeline, "missing")
    with pytest.raises(NotFound):
        client.release_document(pipeline, "missing")
    for bad in ({"document_id": "a\x00"}, {"reason": "x" * 1001}, {"reason": "\ud800"},
                {"reason": 7}):
        with pytest.raises(InvalidRequest):
            client.quarantine_document(pipeline, bad.get("document_id", "a"),
                                       reason=bad.get("reason"))
    assert client.document(pipeline, "a")["quarantined"] is False
    secret = Principal("default", {"*": frozenset({"read", "write"})}, ("internal",))
    client.ingest(pipeline, [{"id": "s", "text": "top secret", "classification": ["secret"]}])
    with pgbraid.connect(principal=secret, data_dir=data_dir) as bounded:
        with pytest.raises(NotFound):  # none of its versions is visible to this key
            bounded.quarantine_document(pipeline, "s")
    with pytest.raises(NotFound):
        client.quarantine_document(f"nope-{uuid.uuid4().hex[:6]}", "a")


SAMPLE = 300
WITHHELD = range(7, SAMPLE, 10)  # 30 documents spread over the ingest order


def _answers(client: pgbraid.Client, pipeline: str, queries: list[str]) -> list[Any]:
    out = []
    for text in queries:
        for params in ({"k": 10}, {"k": 10, "pruning": "maxscore"}):
            response = client.search(pipeline, text, type="bm25", params=params)
            details = response.trace.retrievers[0].details
            out.append(([(h.document_id, h.rank, h.score, h.matched_terms) for h in response.hits],
                        {k: details[k] for k in ("documents", "avgdl", "terms", "postings")}))
        hits = client.search(pipeline, text, type="fulltext", params={"k": 10}).hits
        out.append([(h.document_id, h.score) for h in hits])
    return out


def test_bm25_with_quarantined_documents_equals_a_pipeline_that_never_had_them(client):
    """On SciFact: N, avgdl, df, idf, posting counts and every score exactly equal;
    then release gives back exactly the scores before."""
    docs = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[:SAMPLE]
    queries = [json.loads(line)["text"]
               for line in shared("beir_scifact", "queries.jsonl").open()][:40]
    withheld = {docs[i]["id"] for i in WITHHELD}
    full, never = f"sf-{uuid.uuid4().hex[:8]}", f"sn-{uuid.uuid4().hex[:8]}"
    for name, subset in ((full, docs), (never, [d for d in docs if d["id"] not in withheld])):
        client.create_pipeline(name, embedder="none", chunk_size=20_000)
        client.ingest(name, subset)
    before = _answers(client, full, queries)
    for doc_id in sorted(withheld):
        client.quarantine_document(full, doc_id)
    assert _answers(client, full, queries) == _answers(client, never, queries)
    for doc_id in sorted(withheld):
        client.release_document(full, doc_id)
    assert _answers(client, full, queries) == before
    # Restored postings merge with later writes like any others, and leave again.
    more = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[SAMPLE:SAMPLE + 40]
    for name in (full, never):
        for start in range(0, len(more), 5):
            client.ingest(name, more[start:start + 5])
    for doc_id in sorted(withheld):
        client.quarantine_document(full, doc_id)
    assert _answers(client, full, queries) == _answers(client, never, queries)
    for name in (full, never):
        client.delete_pipeline(name)


def test_an_encrypted_pipeline_quarantines_and_releases_alike(client):
    name = f"qe-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", encrypt=True)
    client.ingest(name, OTHERS + [TARGET])
    walk = [{"type": t, "query": QUERY, "params": {"k": 5}} for t in ("bm25", "fulltext", "fuzzy")]
    before = [client.search(name, **r).model_dump(mode="json") for r in walk]
    assert all("q1" in {h["document_id"] for h in b["hits"]} for b in before[:2])
    client.quarantine_document(name, "q1", reason="review")
    for request in walk:
        hits = client.search(name, **request).hits
        assert "q1" not in {h.document_id for h in hits} and len(hits) == 5, request
    shown = client.document(name, "q1")  # the reviewer reads it, opened
    assert shown["quarantined"] and shown["text"] == TARGET["text"]
    client.release_document(name, "q1")
    assert [plain(client.search(name, **r).model_dump(mode="json")) for r in walk] == [
        plain(b) for b in before]
    client.delete_pipeline(name)
