"""Reading documents and their versions by id, current or point-in-time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .errors import InvalidRequest, NotFound
from .pipelines import Pipeline

_VERSION = """
SELECT d.external_id AS document_id, v.version, v.title, v.body AS text, v.metadata,
       v.classifications, v.language, v.source, v.valid_from, v.valid_to,
       coalesce(v.version = d.current_version, false) AS current, d.quarantined,
       (SELECT count(*) FROM pgbraid.fragments f WHERE f.version_id = v.id) AS fragments
FROM pgbraid.documents d JOIN pgbraid.versions v ON v.document_id = d.id
WHERE d.pipeline_id = %(pipeline)s AND d.external_id = %(id)s
  AND v.classifications && %(classifications)s::text[]
"""


def read(conn: psycopg.Connection, pipeline: Pipeline, document_id: str, *,
         classifications: tuple[str, ...], version: int | None = None,
         as_of: datetime | None = None) -> dict[str, Any]:
    """One version of a document: the current one, a numbered one, or the one valid at as_of."""
    if version is not None and as_of is not None:
        raise InvalidRequest("give either version or as_of, not both")
    params: dict[str, Any] = {"pipeline": pipeline.id, "id": document_id,
                              "classifications": list(classifications)}
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
        raise NotFound(f"document {document_id!r} has no such version visible to this caller",
                       document_id=document_id)
    for key in ("valid_from", "valid_to"):
        row[key] = row[key].isoformat() if row[key] else None
    return row


def versions(conn: psycopg.Connection, pipeline: Pipeline, document_id: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT v.version, v.valid_from, v.valid_to, v.content_hash,"
            " coalesce(v.version = d.current_version, false) AS current"
            " FROM pgbraid.documents d JOIN pgbraid.versions v ON v.document_id = d.id"
            " WHERE d.pipeline_id = %s AND d.external_id = %s ORDER BY v.version",
            (pipeline.id, document_id)).fetchall()
    if not rows:
        raise NotFound(f"document {document_id!r} does not exist", document_id=document_id)
    for row in rows:
        for key in ("valid_from", "valid_to"):
            row[key] = row[key].isoformat() if row[key] else None
    return rows
