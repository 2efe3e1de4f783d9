"""The bench's bulk path (bench/bulk.py) leaves what ingestion leaves.

The million-fragment bench corpus is written by the bulk path; its figures
stand for pgbraid only if the rows, postings and statistics are those
``Client.ingest`` writes. Checked here on a sample of the same corpus (several
sources, perturbed copies, two classification sets), compared row by row.
"""

from __future__ import annotations

import itertools
import uuid

import numpy as np

from bench import bulk, corpus
from pgbraid import pipelines

_FRAGMENTS = """
SELECT d.external_id, f.ordinal, f.section, f.body, f.language, f.ts_config::text, f.tsv::text,
       f.metadata, f.classifications, f.current, f.quarantined, f.bm25_ordinal, f.bm25_length,
       f.bm25_terms, f.bm25_tfs, f.title, f.content_hash, f.key_id, f.words,
       f.word_set
FROM pgbraid.fragments f JOIN pgbraid.documents d ON d.id = f.document_id
WHERE f.pipeline_id = %s ORDER BY d.external_id, f.ordinal
"""
_VERSIONS = """
SELECT d.external_id, d.current_version, d.quarantined, v.version, v.title, v.body,
       v.content_hash, v.metadata, v.classifications, v.language, v.source, v.valid_to,
       v.key_id
FROM pgbraid.versions v JOIN pgbraid.documents d ON d.id = v.document_id
WHERE d.pipeline_id = %s ORDER BY d.external_id
"""
_POSTINGS = """
SELECT p.classifications, pp.term, pp.segment, pp.postings, pp.ordinals, pp.tfs, pp.lengths
FROM pgbraid.bm25_postings pp JOIN pgbraid.bm25_partitions p ON p.id = pp.partition_id
WHERE pp.pipeline_id = %s ORDER BY 1, 2, 3
"""
_STATS = """
SELECT p.classifications, s.config, s.fragments, s.total_length,
       (SELECT count(*) FROM pgbraid.bm25_segments g WHERE g.partition_id = p.id),
       (SELECT sum(g.fragments) FROM pgbraid.bm25_segments g WHERE g.partition_id = p.id),
       (SELECT next_ordinal FROM pgbraid.bm25_stats b WHERE b.pipeline_id = p.pipeline_id)
FROM pgbraid.bm25_partitions p JOIN pgbraid.bm25_partition_stats s ON s.partition_id = p.id
WHERE p.pipeline_id = %s ORDER BY 1, 2
"""


def _sample() -> list[dict]:
    docs = list(corpus.documents(2))
    half = len(docs) // 2  # copy 0 (originals), then copy 1 (perturbed)
    # SciFact, Cranfield and CISI, Godot pages, KEV records; then perturbed copies
    picked = docs[:60] + docs[5_300:5_330] + docs[9_400:9_420] + docs[half - 20:half] \
        + docs[half:half + 60] + docs[half + 9_400:half + 9_410]
    return [{**d, "language": "en", "classification": ["c1" if i % 3 else "c2"]}
            for i, d in enumerate(picked)]


def _postings(conn, pipeline_id: int) -> dict:
    """Each partition's postings per term, over its segments (sorted by ordinal)."""
    merged: dict = {}
    for classes, term, _, count, ordinals, tfs, lengths in conn.execute(_POSTINGS, (pipeline_id,)):
        arrays = merged.setdefault((tuple(classes), term), [[], [], []])
        for into, raw, dtype in zip(arrays, (ordinals, tfs, lengths), ("<i4", "<u2", "<u2")):
            into.append(np.frombuffer(raw, dtype))
        assert count == len(arrays[0][-1])
    out = {}
    for key, (ordinals, tfs, lengths) in merged.items():
        o = np.concatenate(ordinals)
        order = np.argsort(o, kind="stable")
        out[key] = (o[order].tolist(), np.concatenate(tfs)[order].tolist(),
                    np.concatenate(lengths)[order].tolist())
    return out


def _snapshot(client, name: str) -> dict:
    with client.session() as conn:
        pid = pipelines.get(conn, name).id
        return {"fragments": conn.execute(_FRAGMENTS, (pid,)).fetchall(),
                "dictionary": conn.execute("SELECT word FROM pgbraid.fuzzy_words WHERE"
                                           " pipeline_id = %s ORDER BY word", (pid,)).fetchall(),
                "versions": conn.execute(_VERSIONS, (pid,)).fetchall(),
                "postings": _postings(conn, pid),
                "stats": conn.execute(_STATS, (pid,)).fetchall()}


def test_bulk_path_writes_what_ingestion_writes(client):
    records = _sample()
    ingested, bulked = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(2))
    for name in (ingested, bulked):
        client.create_pipeline(name, embedder="none")
    report = client.ingest(ingested, records)
    assert report.added == len(records) and not report.failed
    with client.session() as conn:
        target = pipelines.get(conn, bulked)
    prepared = bulk.prepared(target, records)
    batches = [prepared[i:i + 70] for i in range(0, len(prepared), 70)]  # several segments
    written = bulk.load(client._session, target, batches)
    assert written == report.fragments

    want, got = _snapshot(client, ingested), _snapshot(client, bulked)
    assert len(want["fragments"]) == report.fragments > len(records)  # Godot pages split
    assert got["fragments"] == want["fragments"]
    assert got["versions"] == want["versions"]
    assert got["dictionary"] == want["dictionary"] and len(want["dictionary"]) > 1000
    assert got["stats"] == want["stats"]
    assert {k[0] for k in want["postings"]} == {("c1",), ("c2",)}
    assert got["postings"] == want["postings"]
    for query in (records[0]["title"], records[70]["title"], records[-1]["title"]):
        hits = [[(h.document_id, h.score) for h in client.search(
            name, query, type="bm25", classification=["c1", "c2"],
            params={"k": 10}).hits] for name in (ingested, bulked)]
        assert hits[0] == hits[1] and hits[0]


def test_corpus_copies_have_their_own_vocabulary():
    """Perturbed copies are not copies of the term statistics: each brings new words."""
    first, second = (set(itertools.chain.from_iterable(
        corpus._WORD.findall(d["text"].lower()) for d in docs))
        for docs in (list(corpus.documents(1)), list(corpus.documents(2))[9_852:]))
    assert len(second - first) > 0.05 * len(first)
    assert len(first & second) > 0.5 * len(first)
