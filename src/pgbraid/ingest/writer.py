"""Write documents as versions and fragments, atomically.

A document's new version, its fragments (with their vectors and postings) and
the expiry of the previous version happen inside a batch transaction that holds
the pipeline's BM25 lock (bm25_index.lock): a reader sees the old version or the
new one, never a mix. Both versions carry the transaction's one version time
(ingest/clock.py: per pipeline, in commit order), so the new version's
valid_from is the old one's valid_to. Unchanged content (same hash) writes
nothing. Documents new to the pipeline are written together (``write_new``: a
few statements per batch); the others one by one (``write_document``), each in
its own savepoint so a failing one rolls back alone (batches.py). A new version of
a quarantined document is written quarantined (ingest/quarantine.py); a document
new to the pipeline never is one, and a quarantined one (even with no current
version) exists, so it never takes ``write_new``.
"""

from __future__ import annotations

from typing import Callable, Literal

import psycopg

from .. import encryption
from ..errors import NotFound
from ..pipelines import Pipeline
from . import bm25_index, clock, fragments
from .bm25_index import Pending
from .fragments import stored_version
from .prepare import Prepared

Outcome = Literal["added", "updated", "unchanged"]
FRAGMENT_KEY = "fragments_pkey"  # ids are random (migration 011): a collision is retried once

# The document, locked, with its current version, the highest version it ever had and
# whether it is quarantined.
_DOCUMENT = """
SELECT d.id, d.current_version,
       (SELECT coalesce(max(v.version), 0) FROM pgbraid.versions v
         WHERE v.pipeline_id = %(p)s AND v.document_id = d.id),
       d.quarantined
FROM pgbraid.documents d WHERE d.pipeline_id = %(p)s AND d.external_id = %(id)s FOR UPDATE
"""

_INSERT_EMBEDDINGS = """
INSERT INTO pgbraid.embeddings (fragment_id, pipeline_id, embedding, current)
SELECT x.id, anchor.pipeline_id, x.v, NOT %(quarantined)s FROM pgbraid.bm25_stats anchor
CROSS JOIN LATERAL unnest(%(ids)s::bigint[], %(vectors)s::vector[]) AS x(id, v)
WHERE anchor.pipeline_id = %(pipeline)s
"""

_INSERT_VERSION = """
INSERT INTO pgbraid.versions (pipeline_id, document_id, version, title, body, content_hash,
                              metadata, classifications, language, source, valid_from, key_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id
"""

# New documents of a batch, at version 1, all at once.
_NEW_DOCUMENTS = """
INSERT INTO pgbraid.documents (pipeline_id, external_id, current_version)
SELECT anchor.pipeline_id, x, 1 FROM pgbraid.bm25_stats anchor
CROSS JOIN LATERAL unnest(%(ids)s::text[]) AS x WHERE anchor.pipeline_id = %(pipeline)s
ON CONFLICT (pipeline_id, external_id) DO NOTHING
RETURNING external_id, id
"""
_NEW_VERSIONS = """
INSERT INTO pgbraid.versions (pipeline_id, document_id, version, title, body, content_hash,
                              metadata, classifications, language, source, valid_from, key_id)
SELECT anchor.pipeline_id, d, 1, t, b, h, m, ARRAY(SELECT jsonb_array_elements_text(c)), l, s,
       %(stamp)s, k
FROM pgbraid.bm25_stats anchor CROSS JOIN LATERAL unnest(
    %(documents)s::bigint[], %(titles)s::text[], %(bodies)s::text[], %(hashes)s::text[],
    %(metadata)s::jsonb[], %(classifications)s::jsonb[], %(languages)s::text[],
    %(sources)s::text[], %(keys)s::text[]) AS x(d, t, b, h, m, c, l, s, k)
WHERE anchor.pipeline_id = %(pipeline)s
RETURNING document_id, id
"""


class Conflict(Exception):
    """A document of a batch of new ones exists after all: the batch is written one by one."""


def write_document(conn: psycopg.Connection, pipeline: Pipeline, prepared: Prepared,
                   pending: Pending, partition: int) -> tuple[Outcome, int]:
    """Write one prepared (and analysed) document inside the caller's transaction, which
    holds bm25_index.lock.

    The new fragments (of BM25 partition ``partition``) have their postings added to
    ``pending``, which the batch flushes; those of a quarantined document are written
    quarantined, without postings or vectors in the current indexes (ingest/quarantine.py
    restores them on release).
    """
    doc = prepared.doc
    conn.execute("INSERT INTO pgbraid.documents (pipeline_id, external_id) VALUES (%s, %s)"
                 " ON CONFLICT (pipeline_id, external_id) DO NOTHING", (pipeline.id, doc.id))
    document_id, current, last, quarantined = conn.execute(
        _DOCUMENT, {"p": pipeline.id, "id": doc.id}).fetchone()
    previous = None
    if current is not None:
        previous = conn.execute(
            "SELECT id, content_hash, classifications FROM pgbraid.versions"
            " WHERE pipeline_id = %s AND document_id = %s AND version = %s",
            (pipeline.id, document_id, current)).fetchone()
        if previous and pipeline.bound is not None:  # before the hash: no content oracle
            pipeline.bound.check_current(doc.id, previous[2])
        if previous and previous[1] == prepared.digest:
            return "unchanged", 0

    number = last + 1  # a removed document's numbers go on
    sealing = encryption.sealing(conn, pipeline)
    title, body, metadata, key_id = stored_version(sealing, document_id, number, doc.title,
                                                   doc.text, doc.metadata)
    version_id = conn.execute(_INSERT_VERSION, (
        pipeline.id, document_id, number, title, body, prepared.digest, metadata,
        list(prepared.classifications), _language(pipeline, prepared), doc.source,
        clock.stamp(conn, pipeline.id), key_id)).fetchone()[0]
    ids = _insert_fragments(conn, pipeline, sealing, [(prepared, (document_id, version_id,
                                                                  number))],
                            pending, partition=lambda p: partition, quarantined=quarantined)
    if previous is not None:
        _expire(conn, pipeline, previous[0])
    conn.execute("UPDATE pgbraid.documents SET current_version = %s"
                 " WHERE pipeline_id = %s AND id = %s", (number, pipeline.id, document_id))
    return ("updated" if previous is not None else "added"), len(ids)


def write_new(conn: psycopg.Connection, pipeline: Pipeline, batch: list[Prepared],
              pending: Pending, partition: Callable[[Prepared], int]) -> list[int]:
    """Write documents that do not exist yet (distinct ids) as their version 1, with a
    few statements for the whole batch; the number of fragments of each. Raises
    Conflict when one exists after all (the caller writes them one by one)."""
    ids = [p.doc.id for p in batch]
    documents = dict(conn.execute(_NEW_DOCUMENTS, {"pipeline": pipeline.id, "ids": ids}).fetchall())
    if len(documents) != len(batch):
        raise Conflict()
    sealing = encryption.sealing(conn, pipeline)
    stored = [stored_version(sealing, documents[p.doc.id], 1, p.doc.title, p.doc.text,
                             p.doc.metadata) for p in batch]
    versions = dict(conn.execute(_NEW_VERSIONS, {
        "pipeline": pipeline.id,
        "stamp": clock.stamp(conn, pipeline.id),
        "documents": [documents[i] for i in ids],
        "titles": [s[0] for s in stored],
        "bodies": [s[1] for s in stored],
        "hashes": [p.digest for p in batch],
        "metadata": [s[2] for s in stored],
        "keys": [s[3] for s in stored],
        "classifications": [psycopg.types.json.Jsonb(list(p.classifications)) for p in batch],
        "languages": [_language(pipeline, p) for p in batch],
        "sources": [p.doc.source for p in batch]}).fetchall())
    owners = [(p, (documents[p.doc.id], versions[documents[p.doc.id]], 1)) for p in batch]
    _insert_fragments(conn, pipeline, sealing, owners, pending, partition)
    return [len(p.pieces) for p in batch]


def _language(pipeline: Pipeline, prepared: Prepared) -> str:
    return prepared.pieces[0].config if prepared.pieces else pipeline.language


def _insert_fragments(conn: psycopg.Connection, pipeline: Pipeline,
                      sealing: encryption.Sealing | None,
                      owners: list[tuple[Prepared, tuple[int, int, int]]], pending: Pending,
                      partition: Callable[[Prepared], int], *,
                      quarantined: bool = False) -> list[int]:
    """Insert the fragments (and vectors) of each (document, (document row, version row,
    version number)), with fresh BM25 ordinals, adding their postings to ``pending``;
    ``quarantined`` ones (a quarantined document's) are written quarantined, their
    postings left out and their vectors not current (ingest/quarantine.py restores both
    on release)."""
    base = bm25_index.reserve_ordinals(conn, pipeline.id, sum(len(p.pieces) for p, _ in owners))
    rows, vectors = [], {}
    for prepared, ids in owners:
        part = partition(prepared)
        for ordinal, piece in enumerate(prepared.pieces):
            if prepared.vectors is not None:
                vectors[len(rows)] = prepared.vectors[ordinal]
            rows.append(fragments.row(pipeline, prepared, ids, ordinal, base + len(rows),
                                      quarantined=quarantined))
            if not quarantined:
                pending.add(base + len(rows) - 1, *piece.bm25, config=piece.config,
                            partition=part)
    fragment_ids = fragments.insert(conn, sealing, rows)
    if vectors:
        conn.execute(_INSERT_EMBEDDINGS, {"ids": [fragment_ids[i] for i in vectors],
                                          "pipeline": pipeline.id,
                                          "vectors": list(vectors.values()),
                                          "quarantined": quarantined})
    return fragment_ids


def delete_document(conn: psycopg.Connection, pipeline: Pipeline, external_id: str) -> int:
    """Expire a document's current version (it stays readable point-in-time), leaving
    no current one; returns the version expired. Re-ingesting the id later makes the
    next version."""
    bm25_index.lock(conn, pipeline.id)
    row = conn.execute(_DOCUMENT, {"p": pipeline.id, "id": external_id}).fetchone()
    if row is None or row[1] is None:
        raise NotFound(f"document {external_id!r} does not exist", document_id=external_id)
    version_id, classifications = conn.execute(
        "SELECT id, classifications FROM pgbraid.versions WHERE pipeline_id = %s"
        " AND document_id = %s AND version = %s", (pipeline.id, row[0], row[1])).fetchone()
    if pipeline.bound is not None:
        pipeline.bound.check_current(external_id, classifications)
    _expire(conn, pipeline, version_id)
    conn.execute("UPDATE pgbraid.documents SET current_version = NULL"
                 " WHERE pipeline_id = %s AND id = %s", (pipeline.id, row[0]))
    bm25_index.compact(conn, pipeline.id)
    return row[1]


def _expire(conn: psycopg.Connection, pipeline: Pipeline, version_id: int) -> None:
    at, ids = clock.stamp(conn, pipeline.id), (pipeline.id, version_id)
    conn.execute("UPDATE pgbraid.versions SET valid_to = %s WHERE pipeline_id = %s AND id = %s",
                 (at, *ids))
    conn.execute("UPDATE pgbraid.fragments SET current = false"
                 " WHERE pipeline_id = %s AND version_id = %s", ids)
    if pipeline.embedder:
        conn.execute("UPDATE pgbraid.embeddings e SET current = false FROM pgbraid.fragments f"
                     " WHERE e.pipeline_id = %s AND f.pipeline_id = e.pipeline_id"
                     " AND f.version_id = %s AND e.fragment_id = f.id", ids)
    bm25_index.retire(conn, pipeline.id, version_id)
