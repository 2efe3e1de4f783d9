"""A search's first round trip (opening.py) and its last (db.database.run_last).

bm25's first statement goes ahead with the statement resolving the pipeline,
built from what the same request resolved to before: these tests change what
it resolves to between two searches (the pipeline recreated under its name, a
classification's hierarchy) and check the second search answers from the new
state alone. The last statement ends the snapshot with its COMMIT; when the
scope rejects a candidate anyway, the search runs again in one snapshot.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

import pgbraid
from pgbraid.scope import Principal



def _words(i: int, word: str) -> dict:
    return {"id": f"d{i}", "title": f"note {i}",
            "text": f"{word} appears here {'again ' * i}in document {i}"}


def _ids(response) -> list[str]:
    return [h.document_id for h in response.hits]


def _rounds(response) -> int:
    return response.trace.retrievers[0].details["verify_rounds"]


def test_a_recreated_pipeline_is_searched_as_it_is_now(client):
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [_words(i, "zephyrine") for i in range(3)])
    first = client.search(name, "zephyrine", type="bm25")
    assert sorted(_ids(first)) == ["d0", "d1", "d2"]
    client.search(name, "zephyrine", type="bm25")  # the guess is now known
    client.delete_pipeline(name)
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "fresh", "text": "zephyrine only once, in the new pipeline"}])
    again = client.search(name, "zephyrine", type="bm25")
    assert _ids(again) == ["fresh"]
    assert again.trace.retrievers[0].details["documents"] == 1


def test_a_changed_hierarchy_is_searched_as_it_is_now(client):
    top, low = f"o{uuid.uuid4().hex[:8]}", f"l{uuid.uuid4().hex[:8]}"
    client.define_classification(low)
    client.define_classification(top, implies=[low])
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{**_words(1, "quillometer"), "classification": [top]},
                         {**_words(2, "quillometer"), "classification": [low]}])
    for _ in range(2):
        before = client.search(name, "quillometer", type="bm25", classification=[top])
        assert sorted(_ids(before)) == ["d1", "d2"]
    client.define_classification(top, implies=[])  # top no longer holds low
    after = client.search(name, "quillometer", type="bm25", classification=[top])
    assert _ids(after) == ["d1"]
    details = after.trace.retrievers[0].details
    assert details["documents"] == 1 and details["terms"][0]["df"] == 1


def test_a_bounded_principal_never_gets_a_guess_of_another(client, data_dir):
    """Two principals of one tenant asking the same: each answer is its own scope's."""
    low = f"l{uuid.uuid4().hex[:8]}"
    client.define_classification(low)
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{**_words(1, "tessellarch"), "classification": [low]},
                         {**_words(2, "tessellarch"), "classification": ["public"]}])
    wide = client.search(name, "tessellarch", type="bm25", classification=[low, "public"])
    assert sorted(_ids(wide)) == ["d1", "d2"]
    narrow = client.acting_as(Principal(client.tenant, {name: frozenset({"read", "execute"})},
                                        classifications=("public",)))
    for _ in range(2):
        seen = narrow.search(name, "tessellarch", type="bm25")
        assert _ids(seen) == ["d2"]
        assert seen.trace.retrievers[0].details["documents"] == 1
    with pytest.raises(pgbraid.Forbidden):
        narrow.search(name, "tessellarch", type="bm25", classification=[low])


def test_the_last_statement_ends_the_snapshot(client, pipeline):
    client.ingest(pipeline, [_words(i, "marrowfin") for i in range(4)])
    for _ in range(2):
        response = client.search(pipeline, "marrowfin", type="bm25", params={"k": 2})
        assert len(response.hits) == 2 and _rounds(response) == 1
    paged = client.search(pipeline, "marrowfin", type="bm25", params={"k": 2, "offset": 0})
    assert paged.next_cursor is not None  # paging runs a statement after: not ended early
    rest = client.search(pipeline, "marrowfin", type="bm25",
                         params={"k": 2}, cursor=paged.next_cursor)
    assert set(_ids(paged)).isdisjoint(_ids(rest)) and len(rest.hits) == 2


def test_a_rejected_candidate_has_the_search_run_again(client, pipeline, superuser):
    """A fragment the postings still hold but the scope rejects (here: marked
    quarantined behind pgbraid's back, its postings left in place) is not returned,
    and the search still finds k in scope: its snapshot had ended, so it ran again."""
    client.ingest(pipeline, [_words(i, "brindlewort") for i in range(8)])
    ask = {"k": 3, "pruning": "blockmax"}  # its first round checks k candidates only
    best = client.search(pipeline, "brindlewort", type="bm25", params=ask)
    top = best.hits[0].document_id
    superuser.execute("UPDATE pgbraid.fragments f SET quarantined = true FROM pgbraid.documents d"
                      " WHERE d.id = f.document_id AND d.external_id = %s"
                      " AND d.pipeline_id = f.pipeline_id AND f.pipeline_id ="
                      " (SELECT id FROM pgbraid.pipelines WHERE name = %s)", (top, pipeline))
    after = client.search(pipeline, "brindlewort", type="bm25", params=ask)
    assert top not in _ids(after) and len(after.hits) == 3
    assert _ids(after)[:2] == _ids(best)[1:3]
    assert _rounds(after) == 2  # the second run widened in its own single snapshot


def test_a_failing_first_statement_fails_the_search_cleanly(client, pipeline):
    """An error in the pipelined opening leaves the pooled connection usable."""
    client.ingest(pipeline, [_words(1, "gallowglass")])
    client.search(pipeline, "gallowglass", type="bm25")
    with pytest.raises(pgbraid.NotFound):
        client.search(f"missing-{uuid.uuid4().hex[:6]}", "gallowglass", type="bm25")
    assert _ids(client.search(pipeline, "gallowglass", type="bm25")) == ["d1"]
    with client.session() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_a_known_bm25_search_is_two_round_trips(client, monkeypatch):
    """BEGIN, the tenant's settings, the resolving statement and the terms go in one
    round trip (the settings once opened a pipeline of their own inside it, which
    psycopg syncs on entering and on leaving: two more), the scope check with COMMIT
    in the second. Counted as the Sync messages psycopg sends."""
    from psycopg import _pipeline_base

    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [_words(i, "ombrellino") for i in range(3)])
    client.search(name, "ombrellino", type="bm25")  # the request is now known
    syncs = []
    sync = _pipeline_base.BasePipeline._enqueue_sync
    monkeypatch.setattr(_pipeline_base.BasePipeline, "_enqueue_sync",
                        lambda self: (syncs.append(1), sync(self))[1])
    response = client.search(name, "ombrellino", type="bm25")
    assert sorted(_ids(response)) == ["d0", "d1", "d2"]
    assert len(syncs) == 2
