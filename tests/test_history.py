"""Point-in-time search: as_of with any lexical or vector type, and type history."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import pgbraid
from pgbraid import InvalidRequest
from pgbraid.scope import Principal

TAG = uuid.uuid4().hex[:6]
SECRET, INTERNAL = f"secret-{TAG}", f"internal-{TAG}"
OLD, NEW = "The aurora reactor burns cobalt rods.", "The aurora reactor burns thorium pellets."
OTHERS = [{"id": "o1", "text": "Visitor parking behind the turbine hall."},
          {"id": "o2", "text": "Canteen menu for the week: soup and bread."}]


def now() -> datetime:
    time.sleep(0.01)  # clearly after what was just committed, and before what comes next
    return datetime.now(timezone.utc)


@pytest.fixture(scope="module")
def timeline(data_dir, server):
    """A pipeline with the default embedder: v1, a noted time, v2, a noted time, deletion."""
    name = f"h-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.create_pipeline(name)
        before = now()
        admin.ingest(name, [{"id": "d", "text": OLD}, *OTHERS])
        first = now()
        admin.ingest(name, [{"id": "d", "text": NEW}])
        second = now()
        admin.delete_document(name, "d")
    return {"name": name, "before": before, "first": first, "second": second}


def found(client, timeline, query, **request):
    hits = client.search(timeline["name"], query, params={"k": 10, **request.pop("params", {})},
                         **request).hits
    return {(h.document_id, h.version, h.page_content) for h in hits}


@pytest.mark.parametrize("type_", ["bm25", "fulltext", "fuzzy", "similarity", "mmr"])
def test_as_of_finds_the_version_valid_then(client, timeline, type_):
    old, new = ("d", 1, OLD), ("d", 2, NEW)
    at_first = found(client, timeline, "aurora reactor cobalt rods", type=type_,
                     as_of=timeline["first"])
    assert old in at_first and new not in at_first
    at_second = found(client, timeline, "aurora reactor thorium pellets", type=type_,
                      as_of=timeline["second"].isoformat())
    assert new in at_second and old not in at_second  # deleted since: still found then
    current = found(client, timeline, "aurora reactor thorium pellets", type=type_)
    assert not {h for h in current if h[0] == "d"}  # deleted now
    assert not found(client, timeline, "aurora reactor", type=type_, as_of=timeline["before"])


@pytest.mark.parametrize("strategy", [None, "bm25", "fulltext", "similarity"])
def test_history_type_runs_its_strategy_as_of(client, timeline, strategy):
    params = {"strategy": strategy} if strategy else {}
    response = client.search(timeline["name"], "cobalt rods", type="history",
                             as_of=timeline["first"], params={"k": 3, **params})
    assert response.type == "history"
    assert response.trace.retrievers[0].retriever == (strategy or "bm25")
    assert response.as_of == timeline["first"]
    assert ("d", 1) in {(h.document_id, h.version) for h in response.hits}
    assert ("d", 2) not in {(h.document_id, h.version) for h in response.hits}


def test_history_needs_as_of_and_a_versioned_strategy(client, timeline):
    with pytest.raises(InvalidRequest, match="as_of"):
        client.search(timeline["name"], "cobalt", type="history")
    with pytest.raises(InvalidRequest, match="strategy must be one of"):
        client.search(timeline["name"], "cobalt", type="history", as_of=timeline["first"],
                      params={"strategy": "graph"})
    with pytest.raises(InvalidRequest, match="as_of: must be a datetime"):
        client.search(timeline["name"], "cobalt", type="bm25", as_of="yesterday")


def test_a_version_is_valid_up_to_its_successor_never_both_never_neither(client, timeline):
    versions = client.versions(timeline["name"], "d")
    assert versions[0]["valid_to"] == versions[1]["valid_from"]  # one time, one transaction
    boundary = datetime.fromisoformat(versions[1]["valid_from"])
    for at, expected in [(boundary - timedelta(microseconds=1), 1), (boundary, 2)]:
        for type_ in ("bm25", "fulltext", "similarity"):
            seen = {h.version for h in client.search(
                timeline["name"], "aurora reactor", type=type_, as_of=at,
                params={"k": 10}).hits if h.document_id == "d"}
            assert seen == {expected}, (type_, at)


def test_history_bm25_scores_as_the_current_search_did(client, pipeline):
    client.ingest(pipeline, [{"id": f"n{i}", "text": f"needle {'hay ' * i} needle thread"}
                             for i in range(12)])
    current = client.search(pipeline, "needle thread", type="bm25", params={"k": 8})
    client.ingest(pipeline, [{"id": f"n{i}", "text": f"changed {i}"} for i in range(6)])
    then = client.search(pipeline, "needle thread", type="bm25",
                         as_of=current_time_of(client, pipeline), params={"k": 8})
    assert [(h.fragment_id, h.rank, h.score) for h in then.hits] == [
        (h.fragment_id, h.rank, h.score) for h in current.hits]
    trace_now, trace_then = current.trace.retrievers[0].details, then.trace.retrievers[0].details
    assert (trace_then["documents"], trace_then["avgdl"], trace_then["terms"]) == (
        trace_now["documents"], trace_now["avgdl"], trace_now["terms"])


def current_time_of(client, pipeline) -> datetime:
    """Just before the last ingest: the first version of n0 was valid then."""
    return datetime.fromisoformat(client.versions(pipeline, "n0")[0]["valid_to"]) - timedelta(
        microseconds=1)


def test_graph_refuses_as_of_and_auto_leaves_it_out(client, pipeline):
    client.ingest(pipeline, [{"id": "apt", "text": "APT29 uses spearphishing."}])
    client.load_graph_records(pipeline, [("group", "G1", "APT29", ["apt"]),
                                         ("technique", "T1", "Spearphishing", [])],
                              [("group", "G1", "uses", "technique", "T1")])
    later = datetime.now(timezone.utc) + timedelta(days=1)
    with pytest.raises(InvalidRequest, match="graph is not versioned"):
        client.search(pipeline, "APT29", type="graph", as_of=later)
    with pytest.raises(InvalidRequest, match="graph is not versioned"):
        client.search(pipeline, "APT29", type="hybrid", as_of=later,
                      params={"strategies": ["bm25", "graph"]})
    response = client.search(pipeline, "APT29", type="auto", as_of=later)
    assert "graph" not in {e.retriever for e in response.trace.retrievers}
    assert any("not versioned" in r for r in response.trace.fusion["plan"]["reasons"])
    assert "graph" in {e.retriever for e in client.search(pipeline, "APT29", type="auto")
                       .trace.retrievers}


def test_hybrid_as_of_fuses_the_legs_of_that_time(client, timeline):
    hits = client.search(timeline["name"], "aurora reactor cobalt", type="hybrid",
                         as_of=timeline["first"], params={"k": 5}).hits
    assert {(h.document_id, h.version) for h in hits if h.document_id == "d"} == {("d", 1)}
    assert {f.strategy for f in hits[0].found_by} == {"bm25", "similarity"}


def test_a_reader_as_of_sees_only_versions_it_may_hold(data_dir, client):
    name = f"hc-{uuid.uuid4().hex[:8]}"
    client.define_classification(SECRET, implies=[INTERNAL])
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "x", "text": "quartz plan draft", "classification": [INTERNAL]},
                         {"id": "y", "text": "quartz plan budget", "classification": [SECRET]}])
    first = now()
    client.ingest(name, [{"id": "x", "text": "quartz plan final", "classification": [SECRET]}])
    second = now()
    holder = Principal("default", {"*": frozenset({"read", "execute"})}, (INTERNAL,))
    with pgbraid.connect(data_dir=data_dir, principal=holder) as reader:
        for type_ in ("bm25", "fulltext", "history"):
            at_first = reader.search(name, "quartz plan", type=type_, as_of=first).hits
            assert [(h.document_id, h.version) for h in at_first] == [("x", 1)]
            # x's current version is secret, and v1 expired: nothing, never v1 again
            assert not reader.search(name, "quartz plan", type=type_, as_of=second).hits
        stats = reader.search(name, "quartz plan", type="bm25", as_of=first)
        assert stats.trace.retrievers[0].details["documents"] == 1  # y is not counted
        with pytest.raises(pgbraid.Forbidden):
            reader.search(name, "quartz", type="bm25", as_of=first, classification=SECRET)
    secret_then = client.search(name, "quartz plan", type="bm25", as_of=second,
                                classification=SECRET).hits
    assert {(h.document_id, h.version) for h in secret_then} == {("x", 2), ("y", 1)}
