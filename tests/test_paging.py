"""Pages: params.offset and cursors, stable while documents are re-ingested."""

from __future__ import annotations

import threading
from datetime import datetime
import uuid

import pytest

import pgbraid
from pgbraid import InvalidRequest
from pgbraid.ingest import writer

PAGE, PAGES = 5, 4
QUERY = "glacier survey report"
TYPES = ["bm25", "fulltext", "fuzzy", "similarity", "mmr", "hybrid", "auto", "history"]


def corpus(version: int) -> list[dict]:
    """Thirty documents that all match, at different strengths."""
    return [{"id": f"g{i}", "title": f"Glacier {i}",
             "text": f"glacier survey report {'glacier ' * (i % 7)}station {i} "
                     f"{'survey ' * (i % 3)}edition {version} {'report ' * (i % 5)}"}
            for i in range(30)]


@pytest.fixture(scope="module")
def glacier(data_dir, server):
    name = f"pg-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.create_pipeline(name)
        admin.ingest(name, corpus(1))
    return name


def request_for(type_: str, timeline_params: dict | None = None) -> dict:
    params = {"mmr": {"fetch_k": PAGE * PAGES}, "fuzzy": {"threshold": 0.1},
              "history": {"strategy": "bm25"}}.get(type_, {})
    body = {"type": type_, "params": {**params, **(timeline_params or {})}}
    if type_ == "history":
        body["as_of"] = "2999-01-01T00:00:00+00:00"
    return body


def ranked(hits) -> list[tuple]:
    return [(h.fragment_id, h.version, h.rank, h.score) for h in hits]


def pages(client, pipeline, body, between=lambda page: None) -> list[tuple]:
    """Every page, following next_cursor; ``between`` runs before each later page."""
    params = {**body["params"], "k": PAGE}
    response = client.search(pipeline, QUERY, **{**body, "params": {**params, "offset": 0}})
    seen = ranked(response.hits)
    for page in range(1, PAGES):
        between(page)
        assert response.next_cursor, f"page {page} full but no cursor"
        response = client.search(pipeline, QUERY, **{**body, "params": params},
                                 cursor=response.next_cursor)
        seen += ranked(response.hits)
    return seen


@pytest.mark.parametrize("type_", TYPES)
def test_pages_concatenated_equal_one_search(client, glacier, type_):
    body = request_for(type_)
    whole = client.search(glacier, QUERY, **{**body, "params": {**body["params"],
                                                                "k": PAGE * PAGES}})
    assert len(whole.hits) == PAGE * PAGES
    assert pages(client, glacier, body) == ranked(whole.hits)


@pytest.mark.parametrize("type_", TYPES)
def test_pages_stay_put_while_a_writer_reingests(data_dir, client, type_):
    name = f"pw-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name)
    client.ingest(name, corpus(1))
    body = request_for(type_)
    whole = client.search(name, QUERY, **{**body, "params": {**body["params"], "k": PAGE * PAGES}})

    def rewrite(page: int) -> None:  # the hits' own documents change, and new ones match
        client.ingest(name, corpus(page + 1)[page::2] + [
            {"id": f"new{page}-{i}", "text": f"glacier survey report glacier glacier {i}"}
            for i in range(3)])
        client.delete_document(name, f"g{page}")

    assert pages(client, name, body, rewrite) == ranked(whole.hits)
    changed = client.search(name, QUERY, **{**body, "params": {**body["params"],
                                                               "k": PAGE * PAGES}})
    assert ranked(changed.hits) != ranked(whole.hits)  # the writer did change the ranking


def test_a_writer_in_flight_during_the_first_page_stays_out_of_later_ones(client, pipeline,
                                                                         monkeypatch):
    """A writer stamps its versions before the first page's snapshot and commits after it:
    a cursor holding the snapshot's own clock would let its versions into page 2."""
    client.ingest(pipeline, corpus(1))
    whole = client.search(pipeline, QUERY, type="bm25", params={"k": 2 * PAGE})
    stamped, release = threading.Event(), threading.Event()
    flush = writer.bm25_index.flush

    def held_open(*args, **kwargs):  # the batch's versions are written, not yet committed
        done = flush(*args, **kwargs)
        stamped.set()
        release.wait(10)
        return done

    monkeypatch.setattr(writer.bm25_index, "flush", held_open)
    thread = threading.Thread(target=client.ingest, args=(pipeline, corpus(9)[:2 * PAGE]))
    thread.start()
    assert stamped.wait(10)
    first = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE, "offset": 0})
    release.set()
    thread.join()
    second = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE},
                           cursor=first.next_cursor)
    assert ranked(first.hits) + ranked(second.hits) == ranked(whole.hits)
    assert {h.version for h in second.hits} == {1}
    now = client.search(pipeline, QUERY, type="bm25", params={"k": 2 * PAGE}).hits
    assert 2 in {h.version for h in now}  # the writer did commit its versions


def test_offset_without_a_cursor_is_a_slice_of_the_ranking(client, glacier):
    whole = client.search(glacier, QUERY, type="bm25", params={"k": 12})
    page = client.search(glacier, QUERY, type="bm25", params={"k": 4, "offset": 8})
    assert ranked(page.hits) == ranked(whole.hits)[8:12]
    assert [h.rank for h in page.hits] == [9, 10, 11, 12]
    grouped = client.search(glacier, QUERY, type="fulltext", group_by="document",
                            params={"k": 3, "offset": 3})
    assert ranked(grouped.hits) == ranked(client.search(
        glacier, QUERY, type="fulltext", group_by="document", params={"k": 6}).hits)[3:]


def test_cursors_only_when_paging_and_the_page_is_full(client, glacier):
    assert client.search(glacier, QUERY, type="bm25", params={"k": 5}).next_cursor is None
    assert client.search(glacier, QUERY, type="bm25", params={"k": 5, "offset": 0}).next_cursor
    last = client.search(glacier, QUERY, type="bm25", params={"k": 5, "offset": 28})
    assert len(last.hits) == 2 and last.next_cursor is None


def test_a_cursor_continues_only_its_own_search(client, glacier):
    cursor = client.search(glacier, QUERY, type="bm25", params={"k": 5, "offset": 0}).next_cursor
    for other in [{"query": "glacier"}, {"type": "fulltext"}, {"params": {"k": 5, "k1": 1.2}},
                  {"filters": {"a": 1}}, {"as_of": "2030-01-01T00:00:00Z"}]:
        body = {"query": QUERY, "type": "bm25", "params": {"k": 5}, **other}
        with pytest.raises(InvalidRequest, match="another search"):
            client.search(glacier, cursor=cursor, **body)
    for forged in ["x", "e30", cursor[:-3], "A" * 2000, "eyJvIjotMSwidCI6bnVsbCwiaCI6IjAwIn0"]:
        with pytest.raises(InvalidRequest, match="cursor"):
            client.search(glacier, QUERY, type="bm25", params={"k": 5}, cursor=forged)
    with pytest.raises(InvalidRequest, match="offset or cursor"):
        client.search(glacier, QUERY, type="bm25", params={"k": 5, "offset": 5}, cursor=cursor)


def test_offset_plus_k_is_capped(client, glacier):
    for params in ({"k": 1001}, {"k": 10, "offset": 991}, {"k": 1, "offset": -1},
                   {"k": 1, "offset": 1.5}, {"k": 1, "offset": True}):
        with pytest.raises(InvalidRequest):
            client.search(glacier, QUERY, type="bm25", params=params)
    assert client.search(glacier, QUERY, type="bm25", params={"k": 10, "offset": 990}).hits == ()


def test_graph_pages_carry_no_time(client, pipeline):
    client.ingest(pipeline, [{"id": f"d{i}", "text": f"group {i}"} for i in range(4)])
    client.load_graph_records(
        pipeline, [("group", f"G{i}", f"Group {i}", [f"d{i}"]) for i in range(4)]
        + [("technique", "T1", "Phishing", [])],
        [("group", f"G{i}", "uses", "technique", "T1") for i in range(4)])
    body = {"type": "graph", "params": {"seed": "G0", "k": 1}}
    first = client.search(pipeline, "x", **{**body, "params": {**body["params"], "offset": 0}})
    second = client.search(pipeline, "x", cursor=first.next_cursor, **body)
    assert second.as_of is None and second.hits[0].rank == 2
    assert first.hits[0].document_id != second.hits[0].document_id


def test_versions_are_stamped_in_commit_order(client, pipeline, monkeypatch):
    """Writer B's batch transaction begins, A takes the pipeline's lock first, writes and
    commits, then B writes: B's versions must be stamped after A's, or a cursor cut at A's
    time (the latest the reader saw) would let B's into page 2."""
    client.ingest(pipeline, corpus(1))
    begun, release = threading.Event(), threading.Event()
    lock, calls = writer.bm25_index.lock, []

    def late(conn, *args, **kwargs):  # B's second lock: its batch, after its transaction began
        if threading.current_thread().name == "B":
            calls.append(1)
            if len(calls) == 2:
                begun.set()
                release.wait(10)
        return lock(conn, *args, **kwargs)

    monkeypatch.setattr(writer.bm25_index, "lock", late)
    b = threading.Thread(target=client.ingest, args=(pipeline, corpus(7)[:PAGE]), name="B")
    b.start()
    assert begun.wait(10)  # B's transaction has begun, nothing written
    client.ingest(pipeline, corpus(8)[PAGE:2 * PAGE])  # A
    whole = client.search(pipeline, QUERY, type="bm25", params={"k": 2 * PAGE})
    first = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE, "offset": 0})
    release.set()
    b.join()
    second = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE},
                           cursor=first.next_cursor)
    assert ranked(first.hits) + ranked(second.hits) == ranked(whole.hits)
    b_from = client.versions(pipeline, "g0")[-1]["valid_from"]
    a_from = client.versions(pipeline, f"g{PAGE}")[-1]["valid_from"]
    assert b_from > a_from


def test_a_later_page_uses_the_current_indexes_until_the_reader_sees_a_write(client, pipeline):
    client.ingest(pipeline, corpus(1))
    first = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE, "offset": 0})
    quiet = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE},
                          cursor=first.next_cursor)
    assert "index" not in quiet.trace.retrievers[0].details  # the postings answered
    client.ingest(pipeline, corpus(2)[:3])
    after = client.search(pipeline, QUERY, type="bm25", params={"k": PAGE},
                          cursor=first.next_cursor)
    assert after.trace.retrievers[0].details["index"] == "forward index, as of"
    assert ranked(after.hits) == ranked(quiet.hits)
    assert after.as_of == quiet.as_of == datetime.fromisoformat(
        client.versions(pipeline, "g29")[0]["valid_from"])
