"""Write documents as versions and fragments, atomically, embedding as we go.

A document's new version, its fragments (with their vectors and postings) and
the expiry of the previous version happen in one savepoint inside a batch
transaction: a reader sees the old version or the new one, never a mix, and a
failing document rolls back alone. Both versions carry the transaction's one
version time (ingest/clock.py: per pipeline, in commit order), so the new
version's valid_from is the old one's valid_to. Unchanged content (same hash)
writes nothing, and a fragment whose embedded text is unchanged reuses its vector.
Every transaction that touches the BM25 index takes the pipeline's lock first
(bm25_index.lock), so concurrent writers of one pipeline write one batch at a
time and leave what one sequential writer would; embedding stays outside it.
Fragment ids are random (migration 011); a document whose fragment id collides
is written once more.

With an embedder, batch i is embedded in a worker thread while batch i-1 is
written (ONNX releases the GIL), so the database work hides behind the model.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Iterable, Iterator, Literal

import numpy as np
import psycopg

from .. import encryption
from ..embedders import Embedder
from ..errors import KeyUnavailable, NotFound, PgbraidError
from ..pipelines import Pipeline
from ..strategies.vector.store import check_vector
from . import bm25_index, clock
from .bm25_index import Pending
from .guard import held_of
from .prepare import Prepared, prepare
from .readers import ReadError, SourceDocument

Outcome = Literal["added", "updated", "unchanged"]
FRAGMENT_KEY = "fragments_pkey"  # ids are random (migration 011): a collision is retried once

_INSERT_FRAGMENT = """
INSERT INTO pgbraid.fragments
    (id, pipeline_id, document_id, version_id, ordinal, section, body, language, ts_config,
     tsv, metadata, classifications, bm25_ordinal, bm25_length, bm25_terms, bm25_tfs, title,
     content_hash, key_id, words, quarantined)
SELECT coalesce(%(id)s::bigint, pgbraid.random_fragment_id()), %(pipeline)s, %(document)s,
       %(version)s, %(ordinal)s, %(stored_section)s, %(stored_body)s,
       %(language)s, %(config)s::regconfig,
       CASE WHEN %(fulltext)s THEN
           setweight(to_tsvector(%(config)s::regconfig, coalesce(%(title)s, '')), 'A')
           || setweight(to_tsvector(%(config)s::regconfig, coalesce(%(section)s, '')), 'B')
           || setweight(to_tsvector(%(config)s::regconfig, %(body)s), 'C')
       END,
       %(stored_metadata)s, %(classifications)s, %(bm25_ordinal)s,
       coalesce(b.length, 0), coalesce(b.terms, '{}'), coalesce(b.tfs, '{}'), %(stored_title)s,
       %(content_hash)s, %(key_id)s, %(words)s, %(quarantined)s
FROM (SELECT sum(array_length(positions, 1)) AS length,
             array_agg(lexeme ORDER BY lexeme) AS terms,
             array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
      FROM unnest(to_tsvector(%(config)s::regconfig, %(bm25_text)s))) AS b
RETURNING id, bm25_ordinal, bm25_length, bm25_terms, bm25_tfs
"""

# The document, locked, with its current version, the highest version it ever had and
# whether it is quarantined.
_DOCUMENT = """
SELECT d.id, d.current_version,
       (SELECT coalesce(max(v.version), 0) FROM pgbraid.versions v WHERE v.document_id = d.id),
       d.quarantined
FROM pgbraid.documents d WHERE d.pipeline_id = %s AND d.external_id = %s FOR UPDATE
"""

_INSERT_EMBEDDINGS = """
INSERT INTO pgbraid.embeddings (fragment_id, pipeline_id, embedding, current)
SELECT unnest(%(ids)s::bigint[]), %(pipeline)s, unnest(%(vectors)s::vector[]), NOT %(quarantined)s
"""

# Current hashes of a batch's documents, and vectors of their current fragments.
_KNOWN = """
SELECT d.external_id, v.content_hash FROM pgbraid.documents d
JOIN pgbraid.versions v ON v.document_id = d.id AND v.version = d.current_version
WHERE d.pipeline_id = %(pipeline)s AND d.external_id = ANY(%(ids)s)
  AND (%(held)s::text[] IS NULL OR v.classifications <@ %(held)s::text[])
"""
_REUSABLE = """
SELECT f.content_hash, e.embedding FROM pgbraid.fragments f
JOIN pgbraid.embeddings e ON e.fragment_id = f.id
WHERE f.pipeline_id = %(pipeline)s AND f.current AND f.content_hash = ANY(%(hashes)s)
"""


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    fragments: int = 0
    embedded: int = 0
    failed: list[ReadError] = field(default_factory=list)
    stopped: bool = False
    lsn: str | None = None
    """The primary's WAL position after the last commit (``min_lsn`` for a search)."""

    @property
    def processed(self) -> int:
        return self.added + self.updated + self.unchanged + len(self.failed)

    def as_dict(self) -> dict:
        return {
            "added": self.added, "updated": self.updated, "unchanged": self.unchanged,
            "fragments": self.fragments, "embedded": self.embedded, "stopped": self.stopped,
            "failed": [{"source": f.source, "message": f.message} for f in self.failed],
            "lsn": self.lsn,
        }


@dataclass
class Call:
    """What one ingest call wrote to the BM25 index: merged into one segment per partition
    at its end."""

    first_segment: int
    partitions: set[int] = field(default_factory=set)


@dataclass
class Batch:
    items: list[Prepared | ReadError]
    unchanged: set[str]
    embedding: Future | None = None


def write_document(conn: psycopg.Connection, pipeline: Pipeline, prepared: Prepared,
                   pending: Pending, partition: int) -> tuple[Outcome, int]:
    """Write one prepared document inside the caller's transaction, which holds
    bm25_index.lock.

    The new fragments (of BM25 partition ``partition``) have their postings added to
    ``pending``, which the batch flushes; those of a quarantined document are written
    quarantined, without postings or vectors in the current indexes (ingest/quarantine.py
    restores them on release).
    """
    doc = prepared.doc
    conn.execute("INSERT INTO pgbraid.documents (pipeline_id, external_id) VALUES (%s, %s)"
                 " ON CONFLICT (pipeline_id, external_id) DO NOTHING", (pipeline.id, doc.id))
    document_id, current, last, quarantined = conn.execute(
        _DOCUMENT, (pipeline.id, doc.id)).fetchone()
    previous = None
    if current is not None:
        previous = conn.execute(
            "SELECT id, content_hash, classifications FROM pgbraid.versions"
            " WHERE document_id = %s AND version = %s", (document_id, current)).fetchone()
        if previous and pipeline.bound is not None:  # before the hash: no content oracle
            pipeline.bound.check_current(doc.id, previous[2])
        if previous and previous[1] == prepared.digest:
            return "unchanged", 0

    number = last + 1  # a removed document's numbers go on
    sealing = encryption.sealing(conn, pipeline)
    title, body, metadata, key_id = encryption.seal_version(sealing, document_id, number,
                                                            doc.title, doc.text, doc.metadata)
    version_id = conn.execute(
        "INSERT INTO pgbraid.versions (document_id, version, title, body, content_hash, metadata,"
        " classifications, language, source, valid_from, key_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (document_id, number, title, body, prepared.digest,
         psycopg.types.json.Jsonb(metadata), list(prepared.classifications),
         prepared.pieces[0].config if prepared.pieces else pipeline.language, doc.source,
         clock.stamp(conn, pipeline.id), key_id)).fetchone()[0]
    fragment_ids = _insert_fragments(conn, pipeline, prepared, (document_id, version_id, partition),
                                     Pending() if quarantined else pending, (sealing, number),
                                     quarantined)
    if prepared.vectors is not None:
        conn.execute(_INSERT_EMBEDDINGS, {"ids": fragment_ids, "pipeline": pipeline.id,
                                          "vectors": list(prepared.vectors),
                                          "quarantined": quarantined})
    if previous is not None:
        _expire(conn, pipeline, previous[0])
    conn.execute("UPDATE pgbraid.documents SET current_version = %s WHERE id = %s",
                 (number, document_id))
    return ("updated" if previous is not None else "added"), len(fragment_ids)


def _insert_fragments(conn: psycopg.Connection, pipeline: Pipeline, prepared: Prepared,
                      owners: tuple[int, int, int], pending: Pending,
                      sealed: tuple[encryption.Sealing | None, int],
                      quarantined: bool = False) -> list[int]:
    """Insert the fragments of (document, version, BM25 partition), sealed by (sealing,
    version number) when the pipeline is encrypted; a quarantined document's quarantined."""
    doc = prepared.doc
    document_id, version_id, partition = owners
    base = bm25_index.reserve_ordinals(conn, pipeline.id, len(prepared.pieces))
    metadata = psycopg.types.json.Jsonb(doc.metadata)
    rows = [{
        "pipeline": pipeline.id, "document": document_id, "version": version_id,
        "ordinal": ordinal, "section": piece.section, "body": piece.text, "config": piece.config,
        "language": piece.config, "title": doc.title, "fulltext": pipeline.fulltext,
        "metadata": metadata, "classifications": list(prepared.classifications),
        "bm25_ordinal": base + ordinal, "bm25_text": piece.bm25_text,
        "content_hash": piece.content_hash, "quarantined": quarantined,
    } for ordinal, piece in enumerate(prepared.pieces)]
    encryption.seal_fragments(*sealed, rows)
    ids = []
    with conn.cursor() as cur:
        cur.executemany(_INSERT_FRAGMENT, rows, returning=True)
        while True:
            fragment_id, *postings = cur.fetchone()
            ids.append(fragment_id)
            pending.add(*postings, config=rows[len(ids) - 1]["config"], partition=partition)
            if not cur.nextset():
                break
    return ids


def delete_document(conn: psycopg.Connection, pipeline: Pipeline, external_id: str) -> int:
    """Expire a document's current version (it stays readable point-in-time), leaving
    no current one; returns the version expired. Re-ingesting the id later makes the
    next version."""
    bm25_index.lock(conn, pipeline.id)
    row = conn.execute(_DOCUMENT, (pipeline.id, external_id)).fetchone()
    if row is None or row[1] is None:
        raise NotFound(f"document {external_id!r} does not exist", document_id=external_id)
    version_id, classifications = conn.execute(
        "SELECT id, classifications FROM pgbraid.versions WHERE document_id = %s"
        " AND version = %s", (row[0], row[1])).fetchone()
    if pipeline.bound is not None:
        pipeline.bound.check_current(external_id, classifications)
    _expire(conn, pipeline, version_id)
    conn.execute("UPDATE pgbraid.documents SET current_version = NULL WHERE id = %s", (row[0],))
    bm25_index.compact(conn, pipeline.id)
    return row[1]


def _expire(conn: psycopg.Connection, pipeline: Pipeline, version_id: int) -> None:
    conn.execute("UPDATE pgbraid.versions SET valid_to = %s WHERE id = %s",
                 (clock.stamp(conn, pipeline.id), version_id))
    conn.execute("UPDATE pgbraid.fragments SET current = false WHERE version_id = %s", (version_id,))
    if pipeline.embedder:
        conn.execute("UPDATE pgbraid.embeddings SET current = false WHERE fragment_id IN"
                     " (SELECT id FROM pgbraid.fragments WHERE version_id = %s)", (version_id,))
    bm25_index.retire(conn, pipeline.id, version_id)


# -- batches ------------------------------------------------------------------

def ingest(session: Callable, pipeline: Pipeline, items: Iterable[SourceDocument | ReadError], *,
           embedder: Embedder | None = None, on_error: Literal["continue", "stop"] = "continue",
           batch_size: int = 64, progress: Callable[[IngestReport], None] | None = None) -> IngestReport:
    """Ingest items in batches; ``session()`` opens one transaction per batch."""
    with session() as conn:
        bm25_index.lock(conn, pipeline.id)
        bm25_index.ensure_stats(conn, pipeline.id)
        call = Call(bm25_index.next_segment(conn, pipeline.id))
    report = IngestReport()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgbraid-embed") as pool:
            previous: Batch | None = None
            for chunk in _chunks(items, batch_size):
                batch = _start(session, pipeline, chunk, embedder, pool)
                if previous is not None:
                    _finish(session, pipeline, previous, report, call, on_error, progress)
                    if report.stopped:
                        if batch.embedding is not None:
                            batch.embedding.cancel()
                        return report
                previous = batch
            if previous is not None:
                _finish(session, pipeline, previous, report, call, on_error, progress)
        return report
    finally:
        if call.partitions:
            with session() as conn:
                bm25_index.merge_since(conn, pipeline.id, call.first_segment, call.partitions)


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _start(session: Callable, pipeline: Pipeline, chunk: list, embedder: Embedder | None,
           pool: ThreadPoolExecutor) -> Batch:
    """Prepare a batch and start embedding what is new in it (in the worker thread)."""
    items: list[Prepared | ReadError] = []
    for item in chunk:
        if isinstance(item, ReadError):
            items.append(item)
            continue
        try:
            ready = prepare(item, pipeline)
            if pipeline.bound is not None:
                pipeline.bound.check_record(ready.doc.id, ready.classifications)
            items.append(ready)
        except PgbraidError as exc:
            items.append(ReadError(item.source or item.id, exc.message))
    prepared = [p for p in items if isinstance(p, Prepared)]
    with session() as conn:
        known = dict(conn.execute(_KNOWN, {"pipeline": pipeline.id, "held": held_of(pipeline.bound),
                                           "ids": [p.doc.id for p in prepared]}).fetchall())
        unchanged = {p.doc.id for p in prepared if known.get(p.doc.id) == p.digest}
        todo = [p for p in prepared if p.doc.id not in unchanged]
        if not pipeline.embedder:
            for p in todo:
                if p.doc.embedding is not None:
                    items[items.index(p)] = ReadError(
                        p.doc.source or p.doc.id,
                        f"pipeline {pipeline.name!r} has no embedder: remove the embedding field")
            return Batch(items, unchanged)
        if not todo:
            return Batch(items, unchanged)
        reusable = dict(conn.execute(_REUSABLE, {
            "pipeline": pipeline.id,
            "hashes": [piece.content_hash for p in todo for piece in p.pieces]}).fetchall())
    for p in list(todo):
        try:
            _assign_vectors(p, pipeline, reusable)
        except PgbraidError as exc:  # a bad supplied vector fails its document only
            items[items.index(p)] = ReadError(p.doc.source or p.doc.id, exc.message)
            todo.remove(p)
    if embedder is None or not any(p.needs_embedding for p in todo):
        return Batch(items, unchanged)
    return Batch(items, unchanged, pool.submit(_embed, embedder, todo))


def _assign_vectors(p: Prepared, pipeline: Pipeline, reusable: dict) -> None:
    dimension = pipeline.dimension or 0
    p.vectors = np.zeros((len(p.pieces), dimension), dtype=np.float32)
    if p.doc.embedding is not None:
        p.vectors[0] = check_vector(p.doc.embedding, dimension, "embedding")
        return
    for i, piece in enumerate(p.pieces):
        if piece.content_hash in reusable:
            known = reusable[piece.content_hash]
            p.vectors[i] = np.asarray(known.to_numpy() if hasattr(known, "to_numpy") else known,
                                      dtype=np.float32)
        else:
            p.needs_embedding.append(i)


def _embed(embedder: Embedder, todo: list[Prepared]) -> int:
    texts = [text for p in todo for text in p.embedding_inputs()]
    vectors = embedder.embed_documents(texts)
    at = 0
    for p in todo:
        for i in p.needs_embedding:
            p.vectors[i] = vectors[at]
            at += 1
    return len(texts)


def _finish(session: Callable, pipeline: Pipeline, batch: Batch, report: IngestReport, call: Call,
            on_error: str, progress: Callable[[IngestReport], None] | None) -> None:
    failure = None
    if batch.embedding is not None:
        try:
            report.embedded += batch.embedding.result()
        except PgbraidError as exc:
            failure = f"embedding failed: {exc.message}"
    _write_batch(session, pipeline, batch, report, call, on_error, failure)
    if progress:
        progress(report)


def _write_batch(session: Callable, pipeline: Pipeline, batch: Batch, report: IngestReport,
                 call: Call, on_error: str, embedding_failure: str | None) -> None:
    """One transaction under the pipeline's BM25 lock: each document in its own
    savepoint, then the batch's segments."""
    with session() as conn:
        bm25_index.lock(conn, pipeline.id)
        todo = [item for item in batch.items
                if isinstance(item, Prepared) and item.doc.id not in batch.unchanged]
        partitions = bm25_index.partitions(
            conn, pipeline.id, {bm25_index.partition_key(p.classifications) for p in todo})
        written = Pending()
        for item in batch.items:
            if isinstance(item, Prepared) and item.doc.id in batch.unchanged:
                report.unchanged += 1
                continue
            if isinstance(item, Prepared) and embedding_failure and item.needs_embedding:
                item = ReadError(item.doc.source or item.doc.id, embedding_failure)
            if isinstance(item, Prepared):
                item = _write_one(conn, pipeline, item, written, report,
                                  partitions[bm25_index.partition_key(item.classifications)])
            if isinstance(item, ReadError):
                report.failed.append(item)
                if on_error == "stop":
                    report.stopped = True
                    break
        call.partitions |= bm25_index.flush(conn, pipeline.id, written, call.first_segment)


def refused(exc: psycopg.Error, what: str | None = None) -> str:
    """What the report says of a document PostgreSQL refused: the kind and SQLSTATE, not
    PostgreSQL's message (it names constraints, columns and other rows' key values)."""
    return (f"PostgreSQL refused the document: {what or type(exc).__name__} "
            f"(SQLSTATE {exc.sqlstate or 'none'})")


def _write_one(conn: psycopg.Connection, pipeline: Pipeline, item: Prepared, written: Pending,
               report: IngestReport, partition: int) -> ReadError | None:
    """Write a document in a savepoint, once more if a random fragment id collided."""
    for attempt in (1, 2):
        pending = Pending()
        try:
            with conn.transaction():
                outcome, fragments = write_document(conn, pipeline, item, pending, partition)
        except KeyUnavailable:
            raise  # no document can be sealed: the whole call fails, its batch rolled back
        except psycopg.errors.UniqueViolation as exc:
            if attempt == 1 and exc.diag.constraint_name == FRAGMENT_KEY:
                continue
            return ReadError(item.doc.source or item.doc.id, refused(exc, "duplicate key"))
        except (PgbraidError, psycopg.DataError, psycopg.IntegrityError) as exc:
            message = exc.message if isinstance(exc, PgbraidError) else refused(exc)
            return ReadError(item.doc.source or item.doc.id, message)
        written.extend(pending)
        setattr(report, outcome, getattr(report, outcome) + 1)
        report.fragments += fragments
        return None
    raise AssertionError("unreachable")
