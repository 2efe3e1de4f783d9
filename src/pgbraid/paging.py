"""Pages of a ranking that neither skip nor repeat a hit while documents change.

A page is ``params.offset`` hits into the ranking, ``k`` long: hits offset+1 ..
offset+k, with those ranks (offset + k is at most PGBRAID_MAX_K: each page
ranks its offset + k best). A request that pages (gives ``params.offset``, even
0, or ``cursor``) gets ``next_cursor`` when its page is full; the next request
repeats the first one with ``cursor`` set, and gets the next page.

Offset rather than ``search_after``: every strategy and every fusion method
ranks a list from which a page drops its first offset entries, while a
search_after key (score, fragment id) would need each strategy to resume
below a score, which an HNSW scan, a fused rank (a sum of 1 / (60 + rank))
or MMR's greedy selection cannot do. What offset lacks, stability under
writes, the cursor's time gives.

The cursor holds the next offset, a digest of the request (a cursor continues
only the search that issued it: same query, type, params but offset,
classification, filters, distance and grouping, as_of) and a time, as of
which every later page searches: the latest version time (a ``valid_from``
or ``valid_to``) that the reader's classifications can see in the first
page's snapshot. Every writer of a pipeline stamps its versions later than
every version committed before it (ingest/clock.py), so the versions valid at
that time are exactly those current in that snapshot; a writer in flight then,
or later, stamps later, so it cannot add a version or expire one on a later
page. The snapshot's own clock would not do: a writer may take its time before
it and commit after it. The time depends only on versions the reader may see
(non-interference). A request with its own as_of keeps the earlier of the two,
which holds the same versions. Graph is not versioned: its cursor holds no
time. The cursor is base64 JSON, not a secret: it grants nothing the request
could not ask.

A later page whose time is still the latest version time the reader can see
(no version it may see was written since) searches the current versions:
they are exactly those valid at that time, and the current indexes answer in
milliseconds where a search as of a time scans (``still_current``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .errors import InvalidRequest
from .models import SearchRequest, parse_as_of
from .scope import Scope

# The latest version time the reader's classifications can see (greatest skips NULL),
# down the versions_changed index to the first version in scope (migration 014);
# a quarantined document's versions are in no scope.
_LAST_WRITE = """
SELECT greatest(v.valid_from, v.valid_to)
FROM pgbraid.versions v JOIN pgbraid.documents d ON d.pipeline_id = v.pipeline_id AND d.id = v.document_id
WHERE d.pipeline_id = %(scope_pipeline)s::bigint AND NOT d.quarantined
  AND v.classifications && %(scope_classifications)s::text[]
ORDER BY greatest(v.valid_from, v.valid_to) DESC
LIMIT 1
"""
_DIGEST = re.compile(r"[0-9a-f]{16}")
NOT_OURS = "cursor is not a cursor pgbraid issued"


@dataclass(frozen=True)
class Page:
    offset: int
    as_of: datetime | None
    """The time the search's scope holds: the request's, or the cursor's."""
    paging: bool
    """The caller pages: a full page gets next_cursor."""
    pinned: bool = False
    """as_of came from a cursor."""


def open_page(request: SearchRequest, max_k: int) -> Page:
    """The page a request asks for: from its cursor, or from params.offset."""
    if request.cursor is None:
        return Page(request.offset, request.as_of, "offset" in request.params)
    if "offset" in request.params:
        raise InvalidRequest("give params.offset or cursor, not both", field="cursor")
    offset, at, digest = _decode(request.cursor)
    if digest != digest_of(request):
        raise InvalidRequest("this cursor continues another search: send it with the request "
                             "of its first page (only params.offset may differ)", field="cursor")
    if offset + request.k > max_k:
        raise InvalidRequest(f"the cursor's offset + params.k must be at most {max_k} "
                             "(PGBRAID_MAX_K)", field="cursor")
    return Page(offset, at if at is not None else request.as_of, True, pinned=at is not None)


def still_current(conn: psycopg.Connection, page: Page, scope: Scope) -> bool:
    """A cursor's page whose time no version in the reader's classifications has passed:
    the versions valid at that time are the current ones."""
    return page.pinned and page.as_of == _last_write(conn, scope)


def _last_write(conn: psycopg.Connection, scope: Scope) -> datetime | None:
    row = conn.execute(_LAST_WRITE, scope.where("f")[1]).fetchone()
    return row[0] if row else None


def next_cursor(conn: psycopg.Connection, request: SearchRequest, page: Page, scope: Scope,
                hits: int, versioned: bool) -> str | None:
    """The cursor of the page after this one, when the caller pages and this one is full."""
    if not page.paging or request.k == 0 or hits < request.k:
        return None
    at = page.as_of
    if versioned and not page.pinned:
        last = _last_write(conn, scope)
        at = last if at is None or (last is not None and last < at) else at
    body = {"o": page.offset + request.k, "t": at.isoformat() if at else None,
            "h": digest_of(request)}
    text = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).rstrip(b"=").decode("ascii")


def digest_of(request: SearchRequest) -> str:
    """What a cursor continues: the request but its offset and cursor."""
    shape = {"query": request.query, "type": request.type,
             "classification": request.classification,
             "params": {n: v for n, v in request.params.items() if n != "offset"},
             "filters": request.filters, "distance_strategy": request.distance_strategy,
             "group_by": request.group_by,
             "as_of": request.as_of.isoformat() if request.as_of else None}
    text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _decode(cursor: str) -> tuple[int, datetime | None, str]:
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidRequest(NOT_OURS, field="cursor") from None
    if not isinstance(body, dict) or set(body) != {"o", "t", "h"}:
        raise InvalidRequest(NOT_OURS, field="cursor")
    offset, at, digest = body["o"], body["t"], body["h"]
    if (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0
            or not isinstance(digest, str) or not _DIGEST.fullmatch(digest)
            or not (at is None or isinstance(at, str))):
        raise InvalidRequest(NOT_OURS, field="cursor")
    try:
        return offset, parse_as_of(at), digest
    except InvalidRequest:
        raise InvalidRequest(NOT_OURS, field="cursor") from None
