"""Prepare a batch before it is written (ingest/batches.py), in a worker thread.

Everything that needs no lock: chunking, language, hashes, which documents are
unchanged, the text-search analysis of the new pieces on a connection of its own
(fragments.analyse), adding their words to fuzzy's dictionary (ingest/dictionary.py)
and, with an embedder, their vectors (reused by content hash where a current fragment
has one; ONNX releases the GIL). A document that cannot be prepared becomes a
ReadError in its place, so it fails alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import psycopg

from ..embedders import Embedder
from ..errors import PgbraidError
from ..pipelines import Pipeline
from ..strategies.vector.store import check_vector
from . import dictionary, fragments
from .guard import held_of
from .prepare import Prepared, detect_languages, prepare
from .readers import ReadError

# Current hashes of a batch's documents, and vectors of their current fragments.
_KNOWN = """
SELECT d.external_id, v.content_hash FROM pgbraid.documents d
JOIN pgbraid.versions v ON v.pipeline_id = d.pipeline_id AND v.document_id = d.id AND v.version = d.current_version
WHERE d.pipeline_id = %(pipeline)s AND d.external_id = ANY(%(ids)s)
  AND (%(held)s::text[] IS NULL OR v.classifications <@ %(held)s::text[])
"""
_REUSABLE = """
SELECT f.content_hash, e.embedding FROM pgbraid.fragments f
JOIN pgbraid.embeddings e ON e.pipeline_id = f.pipeline_id AND e.fragment_id = f.id
WHERE f.pipeline_id = %(pipeline)s AND f.current AND f.content_hash = ANY(%(hashes)s)
"""


@dataclass
class Batch:
    items: list[Prepared | ReadError]
    unchanged: set[str]
    embedded: int = 0
    embedding_failure: str | None = None


def prepare_batch(session: Callable, pipeline: Pipeline, chunk: list,
                  embedder: Embedder | None) -> Batch:
    """Prepare, analyse and embed what is new in a batch (in the worker thread); its
    words join fuzzy's dictionary in this transaction (ingest/dictionary.py)."""
    items: list[Prepared | ReadError] = []
    languages = iter(detect_languages([i for i in chunk if not isinstance(i, ReadError)], pipeline))
    for item in chunk:
        if isinstance(item, ReadError):
            items.append(item)
            continue
        try:
            ready = prepare(item, pipeline, next(languages))
            if pipeline.bound is not None:  # ingest/guard.py
                pipeline.bound.check_record(ready.doc.id, ready.classifications)
            items.append(ready)
        except PgbraidError as exc:
            items.append(ReadError(item.source or item.id, exc.message))
    with session() as conn:
        prepared = [p for p in items if isinstance(p, Prepared)]
        known = dict(conn.execute(_KNOWN, {"pipeline": pipeline.id, "held": held_of(pipeline.bound),
                                           "ids": [p.doc.id for p in prepared]}).fetchall())
        batch = Batch(items, {p.doc.id for p in prepared if known.get(p.doc.id) == p.digest})
        _analyse(conn, pipeline, batch)
        todo = to_write(batch)
        dictionary.add(conn, pipeline.id, {w for p in todo for piece in p.pieces
                                           for w in piece.words.split()})
        reusable = _reusable(conn, pipeline, batch, todo)
    if reusable is None:
        return batch
    for p in todo:
        try:
            _assign_vectors(p, pipeline, reusable)
        except PgbraidError as exc:  # a bad supplied vector fails its document only
            fail(batch, p, exc.message)
    todo = [p for p in to_write(batch) if p.needs_embedding]
    if embedder is not None and todo:
        try:
            batch.embedded = _embed(embedder, todo)
        except PgbraidError as exc:
            batch.embedding_failure = f"embedding failed: {exc.message}"
    return batch


def _reusable(conn: psycopg.Connection, pipeline: Pipeline, batch: Batch,
              todo: list[Prepared]) -> dict | None:
    """The vectors of current fragments with the hashes of the batch's new pieces (None:
    the pipeline has no embedder, or nothing is new)."""
    if not pipeline.embedder:
        for p in todo:
            if p.doc.embedding is not None:
                fail(batch, p, f"pipeline {pipeline.name!r} has no embedder:"
                                " remove the embedding field")
        return None
    if not todo:
        return None
    return dict(conn.execute(_REUSABLE, {
        "pipeline": pipeline.id,
        "hashes": [piece.content_hash for p in todo for piece in p.pieces]}).fetchall())


def to_write(batch: Batch) -> list[Prepared]:
    return [p for p in batch.items if isinstance(p, Prepared) and p.doc.id not in batch.unchanged]


def fail(batch: Batch, p: Prepared, message: str) -> None:
    at = next(i for i, item in enumerate(batch.items) if item is p)  # not ==: numpy fields
    batch.items[at] = ReadError(p.doc.source or p.doc.id, message)


def _analyse(conn: psycopg.Connection, pipeline: Pipeline, batch: Batch) -> None:
    """Text-search analysis of the batch's new content; a document PostgreSQL cannot
    analyse (a tsvector past 1 MB, ...) fails alone."""
    todo = to_write(batch)
    try:
        with conn.transaction():
            fragments.analyse(conn, pipeline, todo)
        return
    except psycopg.DataError:
        pass
    for p in todo:
        try:
            with conn.transaction():
                fragments.analyse(conn, pipeline, [p])
        except psycopg.DataError as exc:
            fail(batch, p, refused(exc))


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


def refused(exc: psycopg.Error, what: str | None = None) -> str:
    """What the report says of a document PostgreSQL refused: the kind and SQLSTATE, not
    PostgreSQL's message (it names constraints, columns and other rows' key values)."""
    return (f"PostgreSQL refused the document: {what or type(exc).__name__} "
            f"(SQLSTATE {exc.sqlstate or 'none'})")
