"""The engine: every read acts as a principal, and every search sees one snapshot."""

from __future__ import annotations

import uuid

import pytest

import pgbraid
from pgbraid import Forbidden, NotFound, strategies
from pgbraid.scope import Principal


# Classifications are tenant-wide: names of this module's own, so that hierarchies
# other tests declare do not apply here.
TAG = uuid.uuid4().hex[:6]
SECRET, INTERNAL = f"secret-{TAG}", f"internal-{TAG}"


@pytest.fixture()
def classified(client, pipeline):
    client.define_classification(SECRET, implies=[INTERNAL])
    client.ingest(pipeline, [
        {"id": "s", "text": "reactor launch codes", "classification": [SECRET]},
        {"id": "i", "text": "reactor maintenance", "classification": [INTERNAL]},
        {"id": "p", "text": "reactor visitors"}])
    return pipeline


def reader(data_dir, permissions, classifications=None):
    return pgbraid.connect(data_dir=data_dir, principal=Principal(
        "default", {p: frozenset(v) for p, v in permissions.items()}, classifications))


def test_search_needs_read_and_execute_on_the_pipeline(data_dir, classified):
    with reader(data_dir, {classified: {"read"}}) as only_read:
        with pytest.raises(Forbidden, match="execute"):
            only_read.search(classified, "reactor")
        assert only_read.document(classified, "p")["document_id"] == "p"
    with reader(data_dir, {"another": {"read", "execute"}}) as elsewhere:
        with pytest.raises(Forbidden):
            elsewhere.search(classified, "reactor")
        assert classified not in {p.name for p in elsewhere.pipelines()}
    with reader(data_dir, {classified: {"read", "execute"}}) as allowed:
        assert {h.document_id for h in allowed.search(classified, "reactor").hits} == {"p"}


def test_a_request_can_only_narrow_what_the_principal_holds(data_dir, classified):
    with reader(data_dir, {"*": {"read", "execute"}}, (INTERNAL,)) as internal:
        # no classification named: the principal's own, and public
        assert {h.document_id for h in internal.search(classified, "reactor").hits} == {"i", "p"}
        assert {h.document_id for h in internal.search(
            classified, "reactor", classification="public").hits} == {"p"}
        with pytest.raises(Forbidden, match=SECRET):
            internal.search(classified, "reactor", classification=SECRET)
        with pytest.raises(Forbidden):
            internal.document(classified, "s", classification=SECRET)
        with pytest.raises(NotFound):  # exactly as if it did not exist
            internal.versions(classified, "s")
        assert internal.pipeline(classified).documents == 2
    with reader(data_dir, {"*": {"read", "execute"}}, (SECRET,)) as secret:
        # holding secret implies internal: asking for the implied one is narrowing,
        # and a request holds exactly what it names (here internal implies nothing)
        hits = secret.search(classified, "reactor", classification=INTERNAL).hits
        assert {h.document_id for h in hits} == {"i"}


def test_writes_and_raw_sessions_need_their_permissions(data_dir, classified):
    with reader(data_dir, {"*": {"read", "execute"}}) as read_only:
        with pytest.raises(Forbidden, match="write"):
            read_only.ingest(classified, [{"id": "x", "text": "injected"}])
        with pytest.raises(Forbidden):
            read_only.delete_document(classified, "p")
        with pytest.raises(Forbidden):
            read_only.create_pipeline("nope", embedder="none")
        with pytest.raises(Forbidden):
            read_only.define_classification(INTERNAL, implies=[SECRET])
        with pytest.raises(Forbidden):
            read_only.session()
        assert not hasattr(read_only, "db")  # no superuser handle on a client
    with reader(data_dir, {classified: {"write"}}) as writer:
        writer.ingest(classified, [{"id": "w", "text": "reactor written"}])
    with pgbraid.connect(data_dir=data_dir) as admin:
        assert admin.document(classified, "w")["text"] == "reactor written"
        with pytest.raises(NotFound):
            admin.document(classified, "x")  # the refused ingest wrote nothing


def test_every_leg_of_a_search_sees_one_read_only_snapshot(client, classified, monkeypatch):
    seen = []

    def spy(strategy):
        original = strategy.run

        def run(conn, *args, **kwargs):
            seen.append((strategy.name, *conn.execute(
                "SELECT current_setting('transaction_isolation'),"
                " current_setting('transaction_read_only'), pg_current_snapshot()::text"
            ).fetchone()))
            return original(conn, *args, **kwargs)
        monkeypatch.setattr(strategy, "run", run)

    for name in ("bm25", "fulltext", "fuzzy"):
        spy(strategies.REGISTRY[name])
    client.search(classified, "reactor", type="bm25")
    assert seen[0][1:3] == ("repeatable read", "on")
    seen.clear()
    response = client.search(classified, "reactor", type="hybrid",
                             params={"strategies": ["bm25", "fulltext", "fuzzy"]})
    assert {e.retriever: e.status for e in response.trace.retrievers} == {
        "bm25": "ran", "fulltext": "ran", "fuzzy": "ran"}
    assert {s[0] for s in seen} == {"bm25", "fulltext", "fuzzy"}
    assert {s[1:] for s in seen} == {seen[0][1:]}  # one isolation, one snapshot for all legs
    assert seen[0][1] == "repeatable read"


def test_a_failing_leg_leaves_the_others_their_snapshot(client, classified, monkeypatch):
    def broken(conn, *args, **kwargs):
        conn.execute("SELECT 1 / 0")

    monkeypatch.setattr(strategies.REGISTRY["fulltext"], "run", broken)
    response = client.search(classified, "reactor", type="hybrid",
                             params={"strategies": ["fulltext", "bm25", "fuzzy"]})
    status = {e.retriever: e.status for e in response.trace.retrievers}
    assert status == {"fulltext": "failed", "bm25": "ran", "fuzzy": "ran"}
    assert {h.document_id for h in response.hits} == {"p"}
