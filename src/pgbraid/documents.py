"""Reading documents and their versions by id, current or point-in-time.

A quarantined document (ingest/quarantine.py) is shown only to a ``reviewer``
(a principal who may write the pipeline, and so release it), flagged, with the
reason; to everyone else it is "not found", like one that does not exist, and
listings leave it out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from . import encryption
from .errors import InvalidRequest, NotFound
from .models import parse_as_of, parse_version, shown, validate_document_id
from .pipelines import Pipeline

_VERSION = """
SELECT d.external_id AS document_id, v.version, v.title, v.body AS text, v.metadata,
       v.classifications, v.language, v.source, v.valid_from, v.valid_to,
       coalesce(v.version = d.current_version, false) AS current, d.quarantined,
       d.quarantine_reason, d.quarantined_at,
       (SELECT count(*) FROM pgbraid.fragments f WHERE f.pipeline_id = v.pipeline_id AND f.version_id = v.id) AS fragments,
       d.id AS document_row
FROM pgbraid.documents d JOIN pgbraid.versions v ON v.pipeline_id = d.pipeline_id AND v.document_id = d.id
WHERE d.pipeline_id = %(pipeline)s AND d.external_id = %(id)s
  AND v.classifications && %(classifications)s::text[]
  AND (%(reviewer)s OR NOT d.quarantined)
"""


def read(conn: psycopg.Connection, pipeline: Pipeline, document_id: str, *,
         classifications: tuple[str, ...], version: int | None = None,
         as_of: datetime | str | None = None, reviewer: bool = False) -> dict[str, Any]:
    """One version of a document: the current one, a numbered one, or the one valid at as_of."""
    validate_document_id(document_id)
    version, as_of = parse_version(version), parse_as_of(as_of)
    if version is not None and as_of is not None:
        raise InvalidRequest("give either version or as_of, not both")
    params: dict[str, Any] = {"pipeline": pipeline.id, "id": document_id,
                              "classifications": list(classifications), "reviewer": reviewer}
    if version is not None:
        condition, params["version"] = " AND v.version = %(version)s", version
    elif as_of is not None:
        condition, params["as_of"] = (" AND v.valid_from <= %(as_of)s"
                                      " AND (v.valid_to IS NULL OR v.valid_to > %(as_of)s)"), as_of
    else:
        condition = " AND v.version = d.current_version"
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_VERSION + condition, params).fetchone()
    if row is None:
        raise NotFound(f"document {shown(document_id)} has no version visible to this caller",
                       document_id=document_id)
    for key in ("valid_from", "valid_to", "quarantined_at"):
        row[key] = row[key].isoformat() if row[key] else None
    document_row = row.pop("document_row")
    opened = encryption.open_version(pipeline, document_row, row["version"], {
        "title": row["title"], "body": row["text"], "metadata": row["metadata"]})
    row.update(title=opened["title"], text=opened["body"], metadata=opened["metadata"])
    return row


def versions(conn: psycopg.Connection, pipeline: Pipeline, document_id: str, *,
             classifications: tuple[str, ...], reviewer: bool = False) -> list[dict[str, Any]]:
    """The versions the classifications may see; a document with none is "not found",
    exactly like one that does not exist."""
    validate_document_id(document_id)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT v.version, v.valid_from, v.valid_to, v.content_hash,"
            " coalesce(v.version = d.current_version, false) AS current"
            " FROM pgbraid.documents d JOIN pgbraid.versions v ON v.pipeline_id = d.pipeline_id AND v.document_id = d.id"
            " WHERE d.pipeline_id = %s AND d.external_id = %s AND v.classifications && %s::text[]"
            " AND (%s OR NOT d.quarantined) ORDER BY v.version",
            (pipeline.id, document_id, list(classifications), reviewer)).fetchall()
    if not rows:
        raise NotFound(f"document {shown(document_id)} has no version visible to this caller",
                       document_id=document_id)
    for row in rows:
        for key in ("valid_from", "valid_to"):
            row[key] = row[key].isoformat() if row[key] else None
    return rows


MAX_PAGE = 1000

# Current documents whose current version the classifications may see, by id, after a cursor.
_LISTING = """
SELECT d.external_id AS document_id, v.version, v.title, v.classifications, v.language,
       v.valid_from, d.quarantined, d.id AS document_row
FROM pgbraid.documents d JOIN pgbraid.versions v
  ON v.pipeline_id = d.pipeline_id AND v.document_id = d.id AND v.version = d.current_version
WHERE d.pipeline_id = %(pipeline)s AND v.classifications && %(classifications)s::text[]
  AND (%(after)s::text IS NULL OR d.external_id > %(after)s::text)
  AND (%(reviewer)s OR NOT d.quarantined)
ORDER BY d.external_id LIMIT %(limit)s
"""


def listing(conn: psycopg.Connection, pipeline: Pipeline, *, classifications: tuple[str, ...],
            after: str | None = None, limit: int = 100, reviewer: bool = False) -> dict[str, Any]:
    """A page of current documents in id order; ``next`` is the cursor of the next page
    (the last id of this one), None after the last."""
    if after is not None:
        validate_document_id(after, "after")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}, got {shown(limit)}",
                             field="limit")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_LISTING, {"pipeline": pipeline.id, "after": after, "limit": limit + 1,
                                      "classifications": list(classifications),
                                      "reviewer": reviewer}).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    for row in rows:
        row["valid_from"] = row["valid_from"].isoformat()
        row.update(encryption.open_version(pipeline, row.pop("document_row"), row["version"],
                                           {"title": row["title"]}))
    return {"documents": rows, "next": rows[-1]["document_id"] if more else None}


_FRAGMENT = """
SELECT f.id AS fragment_id, d.external_id AS document_id, v.version, f.ordinal, f.section,
       f.title, f.body AS page_content, f.metadata, f.classifications, f.language, f.current,
       f.quarantined
FROM pgbraid.fragments f JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
WHERE f.pipeline_id = %(pipeline)s AND f.id = %(id)s
  AND f.classifications && %(classifications)s::text[]
  AND (%(reviewer)s OR NOT d.quarantined)
"""


def fragment(conn: psycopg.Connection, pipeline: Pipeline, fragment_id: int, *,
             classifications: tuple[str, ...], reviewer: bool = False) -> dict[str, Any]:
    """One fragment by id, of any version; one the classifications may not see is
    "not found", like one that does not exist."""
    if isinstance(fragment_id, bool) or not isinstance(fragment_id, int) \
            or not 1 <= fragment_id < 2**63:
        raise InvalidRequest(f"a fragment id is a positive integer, got {shown(fragment_id)}",
                             field="fragment_id")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FRAGMENT, {"pipeline": pipeline.id, "id": fragment_id,
                                      "classifications": list(classifications),
                                      "reviewer": reviewer}).fetchone()
    if row is None:
        raise NotFound(f"fragment {fragment_id} has no version visible to this caller",
                       fragment_id=fragment_id)
    opened = encryption.open_fragment(pipeline, fragment_id, row["version"], {
        "title": row["title"], "section": row["section"], "body": row["page_content"],
        "metadata": row["metadata"]})
    row.update(title=opened["title"], section=opened["section"], page_content=opened["body"],
               metadata=opened["metadata"])
    return row
