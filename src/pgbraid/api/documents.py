"""Documents: ingest one or a batch, list a page, read any version, delete, quarantine
and release; fragments.

Ingestion takes a JSON object (one document), a JSON array, or an
``application/x-ndjson`` body (one document a line, the JSONL format). A body
the API cannot read (not JSON, a line that is not an object, an unknown field,
a wrong type) is refused whole, naming the record and the field, before
anything is written; a record it can read but cannot store (NUL in its text, a
vector of the wrong size) fails alone in the report, as in every ingestion.

The write permission is checked before the body is parsed, the body is parsed in the
threadpool (never on the event loop: a large body does not stall other requests), and
a request holds at most ``MAX_RECORDS`` documents (413 beyond: send more requests).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from ..client import Client
from ..errors import InvalidRequest, PayloadTooLarge
from ..ingest.records import check_record
from .auth import caller
from .errors import documented
from .schemas import (DocumentExpired, DocumentIn, DocumentOut, DocumentPage, FragmentOut,
                      IngestReportOut, QuarantineBody, QuarantineOut, ReleaseBody, VersionOut,
                      check_path_id)

router = APIRouter(tags=["documents"])

NDJSON = ("application/x-ndjson", "application/jsonl", "application/json-lines")
REFERENCED = (DocumentIn,)
DOCUMENT_SCHEMA = {"$ref": "#/components/schemas/DocumentIn"}
INGEST_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"anyOf": [
        DOCUMENT_SCHEMA, {"type": "array", "items": DOCUMENT_SCHEMA, "minItems": 1}]}},
    "application/x-ndjson": {"schema": {
        "type": "string", "description": "One DocumentIn JSON object a line."}},
}}}
MAX_RECORDS = 10_000
"""Documents per ingestion request (413 beyond)."""
Classification = Query(None, description=(
    "Classifications held, comma-separated (narrows the key's)."))


def parse_records(raw: bytes, content_type: str | None) -> list[dict[str, Any]]:
    """The documents of an ingestion body, each checked against DocumentIn."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in NDJSON:
        lines = [(n, line) for n, line in enumerate(raw.splitlines(), start=1) if line.strip()]
        _check_count(len(lines))  # before any line is parsed
        items = [(f"line {n}", _json(line, f"line {n}")) for n, line in lines]
    elif media == "application/json" or media.endswith("+json"):
        data = _json(raw, "the body")
        listed = data if isinstance(data, list) else [data]
        _check_count(len(listed))
        items = [(f"record {n}", item) for n, item in enumerate(listed, start=1)]
    else:
        raise InvalidRequest("send documents as application/json (an object or an array) or "
                             "application/x-ndjson (one object a line)", field="content-type")
    if not items:
        raise InvalidRequest("the body holds no documents")
    return [_record(where, item) for where, item in items]


def _check_count(count: int) -> None:
    if count > MAX_RECORDS:
        raise PayloadTooLarge(f"the body holds {count} documents; a request takes at most "
                              f"{MAX_RECORDS} (send the rest in further requests)",
                              field="body", limit=MAX_RECORDS)


def _json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{where} is not valid JSON ({getattr(exc, 'msg', 'not UTF-8')})",
                             field="body") from None
    except RecursionError:
        raise InvalidRequest(f"{where} nests too deeply", field="body") from None


def _record(where: str, item: Any) -> dict[str, Any]:
    """One document of the body, checked as ``Client.ingest`` checks a record (records.py)."""
    return check_record(where, item).model_dump(exclude_none=True)


@router.post("/pipelines/{pipeline}/documents", response_model=IngestReportOut,
             responses=documented(413), openapi_extra=INGEST_BODY)
async def ingest(pipeline: str, request: Request, client: Client = Depends(caller)) -> dict:
    """Ingest documents (write): new content becomes a new version, unchanged content
    writes nothing; each batch of 64 commits or rolls back whole. At most 10,000
    documents a request (413)."""
    await run_in_threadpool(client.require, pipeline, "write", operation="ingest")
    raw = await request.body()
    report = await run_in_threadpool(_parse_and_ingest, client, pipeline, raw,
                                     request.headers.get("content-type"))
    return report.as_dict()


def _parse_and_ingest(client: Client, pipeline: str, raw: bytes,
                      content_type: str | None) -> Any:
    """In the threadpool: parsing a large body takes seconds, which the event loop
    (every other request of the worker) must not wait for."""
    return client.ingest(pipeline, parse_records(raw, content_type))


@router.get("/pipelines/{pipeline}/documents", response_model=DocumentPage,
            responses=documented())
def list_documents(pipeline: str, after: Optional[str] = Query(None, description=(
                       "The `next` of the previous page.")),
                   limit: int = Query(100, description="Documents per page, 1 to 1000."),
                   classification: Optional[str] = Classification,
                   client: Client = Depends(caller)) -> dict:
    """Current documents in id order, a page at a time (read)."""
    return client.documents(pipeline, after=after, limit=limit, classification=classification)


@router.get("/pipelines/{pipeline}/documents/{document_id:path}", response_model=DocumentOut,
            responses=documented())
def read_document(pipeline: str, document_id: str, version: Optional[int] = None,
                  as_of: Optional[str] = Query(None, description=(
                      "ISO-8601 time: the version valid then (no offset: UTC).")),
                  classification: Optional[str] = Classification,
                  client: Client = Depends(caller)) -> dict:
    """A document's current version, version N, or the one valid at ``as_of`` (read)."""
    check_path_id(document_id)
    return client.document(pipeline, document_id, version=version, as_of=as_of,
                           classification=classification)


@router.get("/pipelines/{pipeline}/versions/{document_id:path}", response_model=list[VersionOut],
            responses=documented())
def document_versions(pipeline: str, document_id: str,
                      classification: Optional[str] = Classification,
                      client: Client = Depends(caller)) -> list:
    """Every version of a document the key may see (read)."""
    check_path_id(document_id)
    return client.versions(pipeline, document_id, classification=classification)


@router.delete("/pipelines/{pipeline}/documents/{document_id:path}",
               response_model=DocumentExpired, responses=documented())
def delete_document(pipeline: str, document_id: str, client: Client = Depends(caller)) -> dict:
    """Expire the current version (write); earlier versions stay readable."""
    check_path_id(document_id)
    return client.delete_document(pipeline, document_id)


@router.post("/pipelines/{pipeline}/documents/{document_id:path}/quarantine",
             response_model=QuarantineOut, responses=documented(413))
def quarantine_document(pipeline: str, document_id: str, body: Optional[QuarantineBody] = None,
                        client: Client = Depends(caller)) -> dict:
    """Withhold a document from every search until released (write); idempotent."""
    check_path_id(document_id)
    return client.quarantine_document(pipeline, document_id,
                                      reason=body.reason if body else None)


@router.post("/pipelines/{pipeline}/documents/{document_id:path}/release",
             response_model=QuarantineOut, responses=documented(413))
def release_document(pipeline: str, document_id: str, body: Optional[ReleaseBody] = None,
                     client: Client = Depends(caller)) -> dict:
    """Lift a quarantine (write): the document searches exactly as before; idempotent."""
    check_path_id(document_id)
    return client.release_document(pipeline, document_id)


@router.get("/pipelines/{pipeline}/fragments/{fragment_id}", response_model=FragmentOut,
            responses=documented())
def read_fragment(pipeline: str, fragment_id: int,
                  classification: Optional[str] = Classification,
                  client: Client = Depends(caller)) -> dict:
    """One fragment by id (a hit's ``fragment_id``), of any version (read)."""
    return client.fragment(pipeline, fragment_id, classification=classification)
