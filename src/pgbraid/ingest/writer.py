"""Write documents as versions and fragments, atomically.

A document's new version, its fragments and the expiry of the previous version
happen in one savepoint inside a batch transaction: a reader sees the old
version or the new one, never a mix, and a failing document rolls back alone.
Unchanged content (same hash) writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal

import psycopg

from ..errors import InvalidRequest, PgbraidError
from ..models import DEFAULT_CLASSIFICATION
from ..pipelines import Pipeline
from . import bm25_index
from .bm25_index import Pending
from .chunking import chunk
from .language import config_for, detect
from .tokens import expand_code
from .readers import ReadError, SourceDocument

Outcome = Literal["added", "updated", "unchanged"]

_INSERT_FRAGMENT = """
INSERT INTO pgbraid.fragments
    (pipeline_id, document_id, version_id, ordinal, section, body, language, ts_config,
     tsv, metadata, classifications, bm25_ordinal, bm25_length, bm25_terms, bm25_tfs, title)
SELECT %(pipeline)s, %(document)s, %(version)s, %(ordinal)s, %(section)s, %(body)s,
       %(language)s, %(config)s::regconfig,
       CASE WHEN %(fulltext)s THEN
           setweight(to_tsvector(%(config)s::regconfig, coalesce(%(title)s, '')), 'A')
           || setweight(to_tsvector(%(config)s::regconfig, coalesce(%(section)s, '')), 'B')
           || setweight(to_tsvector(%(config)s::regconfig, %(body)s), 'C')
       END,
       %(metadata)s, %(classifications)s, %(bm25_ordinal)s,
       coalesce(b.length, 0), coalesce(b.terms, '{}'), coalesce(b.tfs, '{}'), %(title)s
FROM (SELECT sum(array_length(positions, 1)) AS length,
             array_agg(lexeme ORDER BY lexeme) AS terms,
             array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
      FROM unnest(to_tsvector(%(config)s::regconfig, %(bm25_text)s))) AS b
RETURNING bm25_ordinal, bm25_length, bm25_terms, bm25_tfs
"""


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    fragments: int = 0
    failed: list[ReadError] = field(default_factory=list)
    stopped: bool = False

    @property
    def processed(self) -> int:
        return self.added + self.updated + self.unchanged + len(self.failed)

    def as_dict(self) -> dict:
        return {
            "added": self.added, "updated": self.updated, "unchanged": self.unchanged,
            "fragments": self.fragments, "stopped": self.stopped,
            "failed": [{"source": f.source, "message": f.message} for f in self.failed],
        }


def content_hash(doc: SourceDocument, classifications: tuple[str, ...]) -> str:
    canonical = json.dumps([doc.title, doc.text, doc.metadata, list(classifications), doc.language],
                           sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_document(conn: psycopg.Connection, pipeline: Pipeline, doc: SourceDocument,
                   pending: Pending) -> tuple[Outcome, int]:
    """Write one document inside the caller's transaction; returns (outcome, fragments).

    The new fragments' postings are added to ``pending``, which the batch flushes.
    """
    classifications = doc.classifications or (DEFAULT_CLASSIFICATION,)
    digest = content_hash(doc, classifications)
    conn.execute("INSERT INTO pgbraid.documents (pipeline_id, external_id) VALUES (%s, %s)"
                 " ON CONFLICT (pipeline_id, external_id) DO NOTHING", (pipeline.id, doc.id))
    document_id, current = conn.execute(
        "SELECT id, current_version FROM pgbraid.documents"
        " WHERE pipeline_id = %s AND external_id = %s FOR UPDATE", (pipeline.id, doc.id)).fetchone()
    previous = None
    if current is not None:
        previous = conn.execute(
            "SELECT id, content_hash FROM pgbraid.versions WHERE document_id = %s AND version = %s",
            (document_id, current)).fetchone()
        if previous and previous[1] == digest:
            return "unchanged", 0

    doc_config = _document_config(doc, pipeline)
    number = (current or 0) + 1
    version_id = conn.execute(
        "INSERT INTO pgbraid.versions (document_id, version, title, body, content_hash, metadata,"
        " classifications, language, source) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " RETURNING id",
        (document_id, number, doc.title, doc.text, digest, psycopg.types.json.Jsonb(doc.metadata),
         list(classifications), doc_config, doc.source)).fetchone()[0]
    pieces = chunk(doc.text, target=pipeline.chunk_size)
    base = bm25_index.reserve_ordinals(conn, pipeline.id, len(pieces))
    rows = [
        {
            "pipeline": pipeline.id, "document": document_id, "version": version_id,
            "ordinal": ordinal, "section": piece.section, "body": piece.text,
            "config": config, "language": config, "title": doc.title,
            "fulltext": pipeline.fulltext, "metadata": psycopg.types.json.Jsonb(doc.metadata),
            "classifications": list(classifications), "bm25_ordinal": base + ordinal,
            "bm25_text": expand_code(f"{doc.title or ''}\n{piece.text}"),
        }
        for ordinal, piece in enumerate(pieces)
        for config in [doc_config if doc.language else detect(piece.text, default=doc_config)]
    ]
    with conn.cursor() as cur:
        cur.executemany(_INSERT_FRAGMENT, rows, returning=True)
        while True:
            pending.add(*cur.fetchone())
            if not cur.nextset():
                break
    if previous is not None:
        conn.execute("UPDATE pgbraid.versions SET valid_to = now() WHERE id = %s", (previous[0],))
        conn.execute("UPDATE pgbraid.fragments SET current = false WHERE version_id = %s",
                     (previous[0],))
        bm25_index.expire_version(conn, pipeline.id, previous[0])
    conn.execute("UPDATE pgbraid.documents SET current_version = %s WHERE id = %s",
                 (number, document_id))
    return ("updated" if previous is not None else "added"), len(rows)


def _document_config(doc: SourceDocument, pipeline: Pipeline) -> str:
    if doc.language:
        config = config_for(doc.language)
        if config is None:
            raise InvalidRequest(f"unknown language {doc.language!r}", field="language")
        return config
    return detect(doc.text, default=pipeline.language, min_confidence=0.5)


def ingest(session: Callable, pipeline: Pipeline, items: Iterable[SourceDocument | ReadError], *,
           on_error: Literal["continue", "stop"] = "continue", batch_size: int = 64,
           progress: Callable[[IngestReport], None] | None = None) -> IngestReport:
    """Ingest items in batches; ``session()`` opens one transaction per batch."""
    with session() as conn:
        bm25_index.ensure_stats(conn, pipeline.id)
        first_segment = bm25_index.next_segment(conn, pipeline.id)
    try:
        return _ingest(session, pipeline, items, on_error, batch_size, progress)
    finally:
        with session() as conn:
            bm25_index.merge_since(conn, pipeline.id, first_segment)


def _ingest(session: Callable, pipeline: Pipeline, items: Iterable[SourceDocument | ReadError],
            on_error: str, batch_size: int,
            progress: Callable[[IngestReport], None] | None) -> IngestReport:
    report = IngestReport()
    batch: list[SourceDocument | ReadError] = []
    for item in items:
        batch.append(item)
        if len(batch) >= batch_size:
            _write_batch(session, pipeline, batch, report, on_error)
            batch = []
            if progress:
                progress(report)
            if report.stopped:
                return report
    if batch:
        _write_batch(session, pipeline, batch, report, on_error)
        if progress:
            progress(report)
    return report


def _write_batch(session: Callable, pipeline: Pipeline, batch: list, report: IngestReport,
                 on_error: str) -> None:
    """One transaction: each document in its own savepoint, then the batch's segment."""
    with session() as conn:
        written = Pending()
        for item in batch:
            if isinstance(item, ReadError):
                report.failed.append(item)
            else:
                pending = Pending()
                try:
                    with conn.transaction():
                        outcome, fragments = write_document(conn, pipeline, item, pending)
                except (PgbraidError, psycopg.DataError, psycopg.IntegrityError) as exc:
                    message = exc.message if isinstance(exc, PgbraidError) else str(exc).split("\n")[0]
                    report.failed.append(ReadError(item.source or item.id, message))
                else:
                    written.extend(pending)
                    setattr(report, outcome, getattr(report, outcome) + 1)
                    report.fragments += fragments
                    continue
            if on_error == "stop":
                report.stopped = True
                break
        bm25_index.flush(conn, pipeline.id, written)
