"""GIN pending lists during ingestion: each batch's entries wait in them while its write
holds the pipeline's lock, and are merged after its commit (batches.ingest's ``merge``)."""

from __future__ import annotations

import dataclasses

from pgbraid import pipelines
from pgbraid.ingest import batches, fragments
from pgbraid.ingest.readers import FieldMap, items

_PENDING = """
SELECT c.relname, gin_clean_pending_list(i.indexrelid) FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE a.amname = 'gin' AND i.indrelid = 'pgbraid.fragments'::regclass
"""
_LIMIT = "SELECT setting::int FROM pg_settings WHERE name = 'gin_pending_list_limit'"  # kB


def _left(client) -> dict[str, int]:
    with client._db.admin() as conn:
        return dict(conn.execute(_PENDING).fetchall())


def test_a_small_ingest_leaves_no_pending_gin_entries(client, pipeline):
    """Below writes.ANALYZE_AFTER (no merge at the end of the call) the batch's own merge
    empties the lists: searches never read a pending list an ingest left."""
    _left(client)  # whatever earlier tests left
    client.ingest(pipeline, [{"id": f"small-{i}", "title": f"Small {i}",
                              "text": f"pending entries of word{i} and entry{i * 7}"}
                             for i in range(30)])
    left = _left(client)
    assert {"fragments_tsv", "fragments_body_trgm", "fragments_word_set"} <= set(left)
    assert all(pages == 0 for pages in left.values()), left
    assert [h.document_id for h in client.search(pipeline, "word7", type="bm25").hits] == ["small-7"]


def test_each_batch_is_merged_after_its_commit_with_a_limit_sized_to_it(client, pipeline,
                                                                          monkeypatch):
    """The write transaction raises gin_pending_list_limit to hold its batch, and merge()
    runs once a batch, after the batch is committed (its fragments visible elsewhere)."""
    limits: list[int] = []
    insert = fragments.insert

    def recording(conn, sealing, rows):
        limits.append(conn.execute(_LIMIT).fetchone()[0])
        return insert(conn, sealing, rows)

    monkeypatch.setattr(fragments, "insert", recording)
    monkeypatch.setattr(fragments, "PENDING_BYTES_PER_CHAR", 10_000)  # small texts, a large limit
    with client._session() as conn:
        target = dataclasses.replace(pipelines.get(conn, pipeline), keyring=client.keyring)
    seen: list[int] = []

    def merge() -> None:
        with client._db.admin() as conn:
            seen.append(conn.execute("SELECT count(DISTINCT document_id) FROM pgbraid.fragments"
                                     " WHERE pipeline_id = %s",
                                     (target.id,)).fetchone()[0])
            conn.execute(_PENDING)

    docs = items([{"id": f"batch-{i}", "text": f"batch text {i} " * 50} for i in range(9)],
                 FieldMap())
    report = batches.ingest(client._session, target, docs, batch_size=3, merge=merge)
    assert report.added == 9
    assert seen == [3, 6, 9]
    assert len(limits) == 3 and all(limit > fragments.DEFAULT_PENDING_KB for limit in limits)
    # Outside a write (and without merge) the server's own limit applies.
    with client._session() as conn:
        assert conn.execute(_LIMIT).fetchone()[0] == fragments.DEFAULT_PENDING_KB
    assert all(pages == 0 for pages in _left(client).values())


def test_the_limit_grows_with_the_batch():
    small = fragments.pending_limit_kb(1_000)
    large = fragments.pending_limit_kb(3_000_000)
    assert small == fragments.DEFAULT_PENDING_KB
    assert large >= 10.5 * 3_000_000 / 1024  # SciFact's body trigrams take 10.5 B a character
    assert fragments.pending_limit_kb(10**12) == fragments.MAX_PENDING_KB
