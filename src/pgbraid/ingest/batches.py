"""Ingest in batches: prepare the next batches in worker threads while one is written.

Preparing a batch (ingest/preparing.py) is everything that needs no lock: chunking,
language, hashes, which documents are unchanged, the text-search analysis of
its pieces on a connection of its own (fragments.analyse), adding their words
to fuzzy's dictionary (ingest/dictionary.py) and, with an embedder, their
vectors (ONNX releases the GIL). Two lexical batches are prepared at once (one
embedded batch): a preparer's Python and its backend's analysis take turns, and the
writer's backend runs beside them. Batches are written in the input's order, each
(``_write``) one
transaction under the pipeline's BM25 lock: the documents new to the pipeline
together (writer.write_new), the others one by one in savepoints, then the
batch's postings as one segment per partition. So the lock is held only for
inserting rows, and concurrent ingesting processes prepare side by side.
Fragment ids are random (migration 011); a document whose fragment id collides
is written once more.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal

import psycopg

from ..embedders import Embedder
from ..errors import KeyUnavailable, PgbraidError
from ..pipelines import Pipeline
from . import bm25_index
from .bm25_index import Pending
from .prepare import Prepared
from .preparing import Batch, fail, prepare_batch, refused, to_write
from .readers import ReadError, Skipped, SourceDocument
from .writer import FRAGMENT_KEY, Conflict, write_document, write_new

LEXICAL_BATCH = 2048  # documents a batch without an embedder (fewer segments, postings rows, merges)
EMBEDDED_BATCH = 64  # with one: the first batch's vectors are waited for
# Unless a batch size is given, lexical batches grow from an eighth of it, doubling: the
# first batch is prepared with nothing to overlap, so it is kept small. (Embedded ones
# do not: the model is the bottleneck either way, and runs best on full batches.)
RAMP = 8
# Lexical batches prepared at once while one is written: preparing is Python, then the
# analysis and the dictionary on a backend of its own, so two keep both cores busy.
LEXICAL_PREPARERS = 2
LAST_PART_MIN = 256  # documents: a smaller last part saves less than its segment costs
BATCH_CHARS = 8_000_000  # and a batch's texts (one analysis statement) stay under this

_EXISTING = """
SELECT external_id FROM pgbraid.documents
WHERE pipeline_id = %(pipeline)s AND external_id = ANY(%(ids)s)
"""
_WRITE_ERRORS = (PgbraidError, psycopg.DataError, psycopg.IntegrityError)


@dataclass
class IngestReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    fragments: int = 0
    embedded: int = 0
    failed: list[ReadError] = field(default_factory=list)
    stopped: bool = False
    skipped: list[Skipped] = field(default_factory=list)
    """Files of the folders ingested that were not read, and why."""
    lsn: str | None = None
    """The primary's WAL position after the last commit (``min_lsn`` for a search)."""
    warnings: list[dict[str, str]] = field(default_factory=list)
    """Housekeeping after the commits that failed, ``{"step", "message"}`` (housekeeping.py):
    what was written stays written."""

    @property
    def processed(self) -> int:
        return self.added + self.updated + self.unchanged + len(self.failed)

    def as_dict(self) -> dict:
        return {
            "added": self.added, "updated": self.updated, "unchanged": self.unchanged,
            "fragments": self.fragments, "embedded": self.embedded, "stopped": self.stopped,
            "failed": [{"source": f.source, "message": f.message} for f in self.failed],
            "skipped": [{"source": s.source, "reason": s.reason} for s in self.skipped],
            "lsn": self.lsn, "warnings": [dict(w) for w in self.warnings],
        }


@dataclass
class Call:
    """What one ingest call wrote to the BM25 index: merged into one segment per partition
    at its end."""

    first_segment: int
    partitions: set[int] = field(default_factory=set)


def ingest(session: Callable, pipeline: Pipeline,
           items: Iterable[SourceDocument | ReadError | Skipped], *,
           embedder: Embedder | None = None, on_error: Literal["continue", "stop"] = "continue",
           batch_size: int | None = None, ahead: bool = True,
           progress: Callable[[IngestReport], None] | None = None,
           after: Callable[[IngestReport], list] | None = None) -> IngestReport:
    """Ingest items in batches; ``session()`` opens one transaction. With ``ahead`` the
    next batches are prepared in worker threads (on sessions of their own) while one is
    written; a caller whose ``session()`` hands out one shared connection (savepoints
    of its own transaction) passes ``ahead=False``. ``after(report)``, the caller's
    housekeeping once every batch is committed (its warnings join the report's), runs
    beside the merge of the call's BM25 segments."""
    with session() as conn:
        bm25_index.lock(conn, pipeline.id)
        bm25_index.ensure_stats(conn, pipeline.id)
        call = Call(bm25_index.next_segment(conn, pipeline.id))
    size = batch_size or (EMBEDDED_BATCH if embedder else LEXICAL_BATCH)
    first = size if batch_size or embedder else max(1, size // RAMP)
    report = IngestReport()
    preparers = LEXICAL_PREPARERS if ahead and not embedder else 1
    try:
        with ThreadPoolExecutor(max_workers=preparers, thread_name_prefix="pgbraid-prepare") as pool:
            waiting: deque[Future] = deque()
            # Without a batch size the last batch is split among the preparers: its
            # write is the call's tail, with nothing left to overlap.
            for chunk in _chunks(_divert(items, report), first, size,
                                 1 if batch_size else preparers):
                waiting.append(_submit(pool if ahead else None, session, pipeline, chunk, embedder))
                if len(waiting) > preparers:
                    _finish_next(session, pipeline, waiting, report, call, on_error, progress)
                if report.stopped:
                    break
            while waiting and not report.stopped:
                _finish_next(session, pipeline, waiting, report, call, on_error, progress)
    except BaseException:
        if call.partitions:  # what was committed is merged all the same
            _merge(session, pipeline, call)
        raise
    _end(session, pipeline, call, report, after)
    return report


def _merge(session: Callable, pipeline: Pipeline, call: Call) -> None:
    with session() as conn:
        bm25_index.merge_since(conn, pipeline.id, call.first_segment, call.partitions)


def _end(session: Callable, pipeline: Pipeline, call: Call, report: IngestReport,
         after: Callable[[IngestReport], list] | None) -> None:
    """The call's segments merged and, on a connection of its own beside it, ``after``."""
    if after is None or not report.fragments:
        if call.partitions:
            _merge(session, pipeline, call)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgbraid-after") as pool:
        beside = pool.submit(after, report)
        try:
            if call.partitions:
                _merge(session, pipeline, call)
        finally:
            report.warnings += beside.result()


def _finish_next(session: Callable, pipeline: Pipeline, waiting: deque[Future],
                 report: IngestReport, call: Call, on_error: str,
                 progress: Callable[[IngestReport], None] | None) -> None:
    """Write the oldest prepared batch; once the call stops, the others are cancelled."""
    _finish(session, pipeline, waiting.popleft().result(), report, call, on_error, progress)
    if report.stopped:
        for batch in waiting:
            batch.cancel()


def _submit(pool: ThreadPoolExecutor | None, *args) -> Future:
    if pool is not None:
        return pool.submit(prepare_batch, *args)
    done: Future = Future()
    try:
        done.set_result(prepare_batch(*args))
    except BaseException as exc:  # raised where the result is read, as from the pool
        done.set_exception(exc)
    return done


def _divert(items: Iterable, report: IngestReport) -> Iterator[SourceDocument | ReadError]:
    for item in items:
        if isinstance(item, Skipped):
            report.skipped.append(item)
        else:
            yield item


def _chunks(items: Iterable, first: int, size: int, last_parts: int = 1) -> Iterator[list]:
    """Batches of ``first`` items, then each twice the last, up to ``size``; a batch
    also ends once its documents hold BATCH_CHARS characters. The items left at the end
    come in ``last_parts`` batches (of LAST_PART_MIN items or more)."""
    batch: list = []
    chars = 0
    for item in items:
        batch.append(item)
        chars += len(getattr(item, "text", "") or "")
        if len(batch) >= first or chars >= BATCH_CHARS:
            yield batch
            batch, chars, first = [], 0, min(size, 2 * first)
    parts = max(1, min(last_parts, len(batch) // LAST_PART_MIN))
    step = max(1, -(-len(batch) // parts))
    for start in range(0, len(batch), step):
        yield batch[start:start + step]


def _finish(session: Callable, pipeline: Pipeline, batch: Batch, report: IngestReport, call: Call,
            on_error: str, progress: Callable[[IngestReport], None] | None) -> None:
    report.embedded += batch.embedded
    if batch.embedding_failure:
        for p in to_write(batch):
            if p.needs_embedding:
                fail(batch, p, batch.embedding_failure)
    _write(session, pipeline, batch, report, call, on_error)
    if progress:
        progress(report)


def _write(session: Callable, pipeline: Pipeline, batch: Batch, report: IngestReport,
           call: Call, on_error: str) -> None:
    """One transaction under the pipeline's BM25 lock: the batch's new documents together,
    the others each in its own savepoint, in order; then the batch's segments."""
    with session() as conn:
        bm25_index.lock(conn, pipeline.id)
        todo = to_write(batch)
        partitions = bm25_index.partitions(
            conn, pipeline.id, {bm25_index.partition_key(p.classifications) for p in todo})

        def partition(p: Prepared) -> int:
            return partitions[bm25_index.partition_key(p.classifications)]

        written = Pending()
        fresh = _fresh(conn, pipeline, batch, on_error)
        outcome = _write_fresh(conn, pipeline, fresh, written, report, partition) if fresh else ""
        done = {id(p) for p in fresh} if outcome == "written" else set()
        retried = {id(p) for p in fresh} if outcome == "collided" else set()
        for item in batch.items:
            if id(item) in done:
                continue
            if isinstance(item, Prepared) and item.doc.id in batch.unchanged:
                report.unchanged += 1
                continue
            if isinstance(item, Prepared):
                item = _write_one(conn, pipeline, item, written, report, partition(item),
                                  retry=id(item) not in retried)
            if isinstance(item, ReadError):
                report.failed.append(item)
                if on_error == "stop":
                    report.stopped = True
                    break
        call.partitions |= bm25_index.flush(conn, pipeline.id, written, call.first_segment)


def _fresh(conn: psycopg.Connection, pipeline: Pipeline, batch: Batch,
           on_error: str) -> list[Prepared]:
    """The batch's documents new to the pipeline, each id's first (with ``stop``, only
    those before the batch's first other item, so nothing after a failure is written)."""
    todo = to_write(batch)
    existing = {r[0] for r in conn.execute(_EXISTING, {
        "pipeline": pipeline.id, "ids": [p.doc.id for p in todo]})}
    fresh, seen = [], set()
    for item in batch.items:
        new = (isinstance(item, Prepared) and item.doc.id not in batch.unchanged
               and item.doc.id not in existing and item.doc.id not in seen)
        if not new:
            if on_error == "stop":
                break
            continue
        seen.add(item.doc.id)
        fresh.append(item)
    return fresh


def _write_fresh(conn: psycopg.Connection, pipeline: Pipeline, fresh: list[Prepared],
                 written: Pending, report: IngestReport, partition: Callable) -> str:
    """Write the new documents together in a savepoint: "written", or "collided" (a random
    fragment id) or "failed", when they are written one by one instead, so a failing one
    is reported alone (after a collision, that is each one's retry)."""
    pending = Pending()
    try:
        with conn.transaction():
            counts = write_new(conn, pipeline, fresh, pending, partition)
    except KeyUnavailable:
        raise  # no document can be sealed: the whole call fails, its batch rolled back
    except psycopg.errors.UniqueViolation as exc:
        return "collided" if exc.diag.constraint_name == FRAGMENT_KEY else "failed"
    except (Conflict, *_WRITE_ERRORS):
        return "failed"
    written.extend(pending)
    report.added += len(counts)
    report.fragments += sum(counts)
    return "written"


def _write_one(conn: psycopg.Connection, pipeline: Pipeline, item: Prepared, written: Pending,
               report: IngestReport, partition: int, *, retry: bool = True) -> ReadError | None:
    """Write a document in a savepoint, once more (``retry``) if a random fragment id
    collided."""
    for attempt in ((1, 2) if retry else (2,)):
        pending = Pending()
        try:
            with conn.transaction():
                outcome, fragments_written = write_document(conn, pipeline, item, pending,
                                                            partition)
        except KeyUnavailable:
            raise  # no document can be sealed: the whole call fails, its batch rolled back
        except psycopg.errors.UniqueViolation as exc:
            if attempt == 1 and exc.diag.constraint_name == FRAGMENT_KEY:
                continue
            return ReadError(item.doc.source or item.doc.id, refused(exc, "duplicate key"))
        except _WRITE_ERRORS as exc:
            message = exc.message if isinstance(exc, PgbraidError) else refused(exc)
            return ReadError(item.doc.source or item.doc.id, message)
        written.extend(pending)
        setattr(report, outcome, getattr(report, outcome) + 1)
        report.fragments += fragments_written
        return None
    raise AssertionError("unreachable")
