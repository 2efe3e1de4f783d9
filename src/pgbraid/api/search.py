"""Search and retrieve: the engine's every type, as the key's principal.

``POST /pipelines/{p}/search`` answers the SearchResponse the CLI's ``--json``
prints. ``POST /pipelines/{p}/retrieve`` answers the same search as NDJSON:
one hit a line, best first, then one line with the pipeline, query, type and
trace (seed 002: a long chunk as the query, hits as they are read).
``GET /strategies`` lists every search type with its declared params
(``strategies.describe()``).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from .. import strategies
from ..client import Client
from ..models import SearchResponse
from .auth import caller
from .errors import documented
from .middleware import note
from .schemas import SearchBody, StrategiesOut

router = APIRouter(tags=["search"])

NDJSON = "application/x-ndjson"
RETRIEVE_RESPONSE = {200: {"description": "One Hit a line, then one line with the trace.",
                           "content": {NDJSON: {"schema": {"type": "string"}}}}}


def engine_body(body: SearchBody) -> dict[str, Any]:
    """The request as the engine takes it (as_of included: point-in-time search)."""
    return body.model_dump(exclude_unset=True)


def run(request: Request, client: Client, pipeline: str, body: SearchBody) -> SearchResponse:
    response = client.search(pipeline, **engine_body(body))
    note(request.scope, search_type=response.type,
         retrievers={entry.retriever: entry.ms for entry in response.trace.retrievers})
    return response


@router.post("/pipelines/{pipeline}/search", response_model=SearchResponse,
             responses=documented(413, 501))
def search(pipeline: str, body: SearchBody, request: Request,
           client: Client = Depends(caller)) -> SearchResponse:
    """Search a pipeline (read and execute): fulltext, bm25 (search), fuzzy, similarity,
    mmr, graph, hybrid, auto, relational."""
    return run(request, client, pipeline, body)


@router.post("/pipelines/{pipeline}/retrieve", response_class=StreamingResponse,
             responses={**RETRIEVE_RESPONSE, **documented(413, 501)})
def retrieve(pipeline: str, body: SearchBody, request: Request,
             client: Client = Depends(caller)) -> StreamingResponse:
    """The same search, streamed as NDJSON: one hit a line, then the trace."""
    response = run(request, client, pipeline, body)
    return StreamingResponse(_lines(response), media_type=NDJSON)


def _lines(response: SearchResponse) -> Iterator[bytes]:
    for hit in response.hits:
        yield hit.model_dump_json().encode() + b"\n"
    tail = response.model_dump(mode="json", exclude={"hits"})
    yield json.dumps(tail, ensure_ascii=False).encode() + b"\n"


@router.get("/strategies", response_model=StrategiesOut, responses=documented())
def describe_strategies(_: Client = Depends(caller)) -> dict:
    """Every search type: its description, whether it searches as of a time, and each
    param's name, kind, default (or default_rule), range or choices and description
    (any valid key)."""
    return strategies.describe()
