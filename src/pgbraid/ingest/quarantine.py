"""Quarantine: withhold a document from every search, and release it.

``change`` makes every quarantine change, in both directions, in the caller's
transaction and under the pipeline's index lock (bm25_index.lock), like every
transaction that changes the index:

- ``documents.quarantined`` (with the reason and the time) and
  ``fragments.quarantined`` on the fragments of every version: every scope
  (scope.py) excludes them before ranking, as of any time too;
- the current version's fragments leave the BM25 statistics as an expiry does,
  and their postings at once (``bm25_index.evict`` rewrites the segments holding
  them), and on release come back under their own ordinals
  (``bm25_index.restore``): N, avgdl, df, scores, ties and the trace's posting
  counts are those of a pipeline that never had the document, then those it
  had before;
- their vectors leave the HNSW indexes (``embeddings.current``, the indexes'
  predicate) and come back.

A version ingested while its document is quarantined is written quarantined
(ingest/writer.py). Quarantining a quarantined document, or releasing one that
is not, changes nothing and says so (``changed: false``): a retried request is
safe, and the first reason and time stand. A document none of whose versions
the caller's classifications may see is "not found", like one that does not
exist; one whose current version holds a classification beyond them is
Forbidden, as its overwrite or delete is (ingest/guard.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from ..errors import InvalidRequest, NotFound
from ..models import DEFAULT_CLASSIFICATION, check_text, shown, validate_document_id
from ..pipelines import Pipeline
from ..scope import resolve_classifications
from . import bm25_index
from .guard import WriteBound

MAX_REASON_CHARS = 1000

# The document, locked, if the classifications may see one of its versions (None: all).
_DOCUMENT = """
SELECT d.id, d.quarantined, d.quarantine_reason, d.quarantined_at,
       (SELECT v.id FROM pgbraid.versions v
         WHERE v.pipeline_id = %(pipeline)s AND v.document_id = d.id
           AND v.version = d.current_version) AS current_version
FROM pgbraid.documents d
WHERE d.pipeline_id = %(pipeline)s AND d.external_id = %(id)s
  AND (%(all)s OR EXISTS (SELECT 1 FROM pgbraid.versions v WHERE v.pipeline_id = %(pipeline)s
                          AND v.document_id = d.id
                          AND v.classifications && %(visible)s::text[]))
FOR UPDATE OF d
"""

_FLAG_DOCUMENT = """
UPDATE pgbraid.documents SET quarantined = %(on)s, quarantine_reason = %(reason)s,
       quarantined_at = %(at)s
WHERE pipeline_id = %(pipeline)s AND id = %(document)s RETURNING quarantine_reason, quarantined_at
"""
_FLAG_FRAGMENTS = ("UPDATE pgbraid.fragments SET quarantined = %(on)s"
                   " WHERE pipeline_id = %(pipeline)s AND document_id = %(document)s")
_FLAG_VECTORS = """
UPDATE pgbraid.embeddings e SET current = NOT %(on)s
FROM pgbraid.fragments f
WHERE e.pipeline_id = %(pipeline)s AND f.pipeline_id = %(pipeline)s AND f.version_id = %(version)s
  AND e.fragment_id = f.id
"""


def check(document_id: Any, quarantined: bool, reason: Any) -> str | None:
    """The request's id and reason, before any statement: the reason, checked."""
    validate_document_id(document_id)
    if reason is None:
        return None
    if not quarantined:
        raise InvalidRequest("a release takes no reason", field="reason")
    if not isinstance(reason, str):
        raise InvalidRequest("reason must be a string", field="reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest(f"reason is at most {MAX_REASON_CHARS} characters", field="reason")
    return check_text(reason, "reason", "reason")


def change(conn: psycopg.Connection, pipeline: Pipeline, document_id: str, *,
           quarantined: bool, reason: str | None = None,
           bound: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Quarantine (``quarantined``) or release a document, for a caller who may hold
    ``bound`` classifications (None: any) and so name the documents they show."""
    reason = check(document_id, quarantined, reason)
    bm25_index.lock(conn, pipeline.id)
    visible = None if bound is None else resolve_classifications(
        conn, (*bound, DEFAULT_CLASSIFICATION))
    row = conn.execute(_DOCUMENT, {"pipeline": pipeline.id, "id": document_id,
                                   "all": visible is None, "visible": list(visible or ())}
                       ).fetchone()
    if row is None:
        raise NotFound(f"document {shown(document_id)} does not exist", document_id=document_id)
    document, was, old_reason, since, version = row
    if visible is not None and version is not None:  # a current version beyond: refused
        current = conn.execute("SELECT classifications FROM pgbraid.versions"
                               " WHERE pipeline_id = %s AND id = %s",
                               (pipeline.id, version)).fetchone()[0]
        WriteBound(frozenset(visible)).check_current(document_id, current)
    if was == quarantined:
        return _state(document_id, was, old_reason, since, changed=False)
    if quarantined and version is not None:
        bm25_index.evict(conn, pipeline.id, version)  # before the flag: retire skips quarantined
    # the time is taken apart: Citus refuses a non-immutable function inside CASE
    at = conn.execute("SELECT statement_timestamp()").fetchone()[0] if quarantined else None
    params = {"pipeline": pipeline.id, "on": quarantined, "at": at, "document": document, "version": version, "reason": reason}
    conn.execute(_FLAG_FRAGMENTS, params)
    stored_reason, stored_at = conn.execute(_FLAG_DOCUMENT, params).fetchone()
    if version is not None:
        if pipeline.embedder:
            conn.execute(_FLAG_VECTORS, params)
        if not quarantined:
            bm25_index.restore(conn, pipeline.id, version)
    return _state(document_id, quarantined, stored_reason, stored_at, changed=True)


def _state(document_id: str, quarantined: bool, reason: str | None, since: datetime | None, *,
           changed: bool) -> dict[str, Any]:
    return {"document_id": document_id, "quarantined": quarantined, "reason": reason,
            "quarantined_at": since.isoformat() if since else None, "changed": changed}
