"""Live fetch in a search (seed 004): what it uses is retained first, then cited.

A search on a pipeline with a live source runs as usual; then, when the query
holds an identifier (planner.py's kinds the source names) that the corpus,
as this request may see it, does not hold, or when ``params.live`` is true,
pgbraid fetches (fetch.py: allow-listed hosts, one deadline, a size limit,
a rate limit), ingests every fetched document in one transaction (all or
none), commits, and runs the search again: its hits come from the store only,
so nothing fetched is returned without having been stored and every citation
is a stored ``document_id`` (``live:`` + the record's id) with its source URL
and fetch time. The trace gains a ``live`` retriever: ran (host, HTTP status,
the stored ids), skipped (why not), or failed (why; the answer is the
corpus's alone).

Whether the corpus "holds" an identifier is decided within the request's own
scope (a hit holds it verbatim, or an exact-phrase search finds it), so what
the caller may not see never changes what it is answered. Fetched documents
are stored as ``public``; a request that does not hold public does not fetch.
A search by a read + execute key may so write to the pipeline: its admin chose
that when declaring the live source.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

import psycopg

from .. import audit, planner
from ..errors import InvalidRequest, NotEnabled, NotFound
from ..ingest.readers import SourceDocument
from ..ingest.batches import ingest
from ..models import DEFAULT_CLASSIFICATION, SearchResponse, TraceEntry, parse_classifications
from ..pipelines import Pipeline
from .config import PREFIX, LiveFailure, LiveSource, from_settings

if TYPE_CHECKING:
    from ..client import Client

MAX_FETCHES = 3
RETRIEVER = "live"


class _Rate:
    """Fetches in the last minute per (tenant, pipeline), in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int], deque[float]] = {}

    def take(self, key: tuple[str, int], limit: int) -> bool:
        now = time.monotonic()
        with self._lock:
            times = self._seen.setdefault(key, deque())
            while times and now - times[0] > 60:
                times.popleft()
            if len(times) >= limit:
                return False
            times.append(now)
            return True


RATE = _Rate()


def search(client: "Client", name: str, body: dict[str, Any]) -> SearchResponse:
    body, wanted = _take_live(body)
    response, pipeline = client.engine.search_in(client.principal, name, body)
    source = from_settings(pipeline.settings) if pipeline is not None else None
    if source is None:
        if wanted:
            raise NotEnabled(f"pipeline {name!r} has no live source: declare one",
                             remedy="live_source", strategy=RETRIEVER)
        return response
    began = time.perf_counter()
    values = _wanted(client, pipeline, source, body, response, wanted)
    if isinstance(values, str):
        return _with(response, TraceEntry(retriever=RETRIEVER, status="skipped", reason=values,
                                          ms=_ms(began)))
    if not RATE.take((client.tenant, pipeline.id), source.rate_limit):
        return _with(response, TraceEntry(
            retriever=RETRIEVER, status="skipped", ms=_ms(began),
            reason=f"rate limit: {source.rate_limit} fetches a minute reached"))
    try:
        fetches, stored = _fetch_and_store(client, pipeline, source, values)
    except LiveFailure as exc:
        return _with(response, TraceEntry(
            retriever=RETRIEVER, status="failed", reason=exc.message, ms=_ms(began),
            details={"host": exc.host, "status": exc.status, "fetched": values, "stored": []}))
    # It cites the store only, read on the primary: a read replica may not have
    # replayed the fetch's commit yet.
    fresh = client.engine.search(client.principal, name, {
        **{k: v for k, v in body.items() if k != "min_lsn"}, "consistency": "primary"})
    first = fetches[0]
    return _with(fresh, TraceEntry(
        retriever=RETRIEVER, status="ran", hits=len(stored), ms=_ms(began),
        details={"host": first["host"], "status": first["status"], "fetched": values,
                 "stored": stored, "fetches": fetches}))


def _take_live(body: dict[str, Any]) -> tuple[dict[str, Any], bool | None]:
    """The body without ``params.live``, and its value (None when absent)."""
    params = body.get("params") if isinstance(body, dict) else None
    if not isinstance(params, dict) or "live" not in params:
        return body, None
    wanted = params["live"]
    if not isinstance(wanted, bool):
        raise InvalidRequest("params.live must be true or false", field="live")
    return {**body, "params": {k: v for k, v in params.items() if k != "live"}}, wanted


def _wanted(client: "Client", pipeline: Pipeline, source: LiveSource, body: dict[str, Any],
            response: SearchResponse, wanted: bool | None) -> list[str] | str:
    """What to fetch (identifiers, or the query), or why nothing is fetched."""
    if wanted is False:
        return "params.live is false"
    if body.get("as_of") is not None or body.get("type") == planner.HISTORY:
        return "a point-in-time search does not fetch"
    if body.get("cursor") or (body.get("params") or {}).get("offset"):
        return "a later page does not fetch"
    asked = body.get("classification")
    if asked is not None and DEFAULT_CLASSIFICATION not in parse_classifications(asked):
        return "fetched documents are stored as public, which this request does not hold"
    found = list(dict.fromkeys(text for kind, text in planner.identifiers(response.query)
                               if kind in source.identifier_kinds))[:MAX_FETCHES]
    if wanted:
        if source.placeholder == "query":
            return [response.query]
        return found or "params.live: the query holds no identifier to fetch"
    if not found:
        return f"no identifier ({', '.join(source.identifier_kinds)}) in the query"
    missing = [text for text in found if not _held(client, pipeline, body, response, text)]
    if not missing:
        return f"the corpus holds {', '.join(found)}"
    return missing if source.placeholder == "identifier" else [response.query]


def _held(client: "Client", pipeline: Pipeline, body: dict[str, Any], response: SearchResponse,
          identifier: str) -> bool:
    """Does a document this request may see hold the identifier verbatim, or bear it as
    its id (its own, or a fetched one's)?"""
    wanted = identifier.lower()
    for hit in response.hits:
        if any(wanted in (text or "").lower()
               for text in (hit.page_content, hit.title, hit.document_id)):
            return True
    for document_id in (identifier, PREFIX + identifier):
        try:
            client.engine.document(client.principal, pipeline.name, document_id,
                                   classification=body.get("classification"))
            return True
        except NotFound:
            pass
    probe = {"query": f'"{identifier}"', "type": "fulltext" if pipeline.fulltext else "bm25",
             "params": {"k": 1}}
    if body.get("classification") is not None:
        probe["classification"] = body["classification"]
    return bool(client.engine.search(client.principal, pipeline.name, probe).hits)


def _fetch_and_store(client: "Client", pipeline: Pipeline, source: LiveSource,
                     values: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    from . import fetch as fetching  # httpx only where a search fetches (~0.17 s of an import)

    fetches, docs = [], []
    for value in values:
        began = time.perf_counter()
        fetched = fetching.fetch(source, fetching.render(source, value),
                                 private=client.settings.live_private_hosts)
        found = fetching.documents(source, fetched)
        docs.extend(found)
        fetches.append({"host": fetched.host, "status": fetched.status, "ms": _ms(began),
                        "documents": [doc.id for doc in found]})
    unique = list({doc.id: doc for doc in docs}.values())
    _store(client, pipeline, unique)
    return fetches, [doc.id for doc in unique]


def _store(client: "Client", pipeline: Pipeline, docs: list[SourceDocument]) -> None:
    """Every fetched document in one transaction, committed before anything is cited."""
    embedder = client.embedder(pipeline.embedder) if pipeline.embedder else None
    try:
        with client._session() as conn:
            report = ingest(lambda: _nested(conn), pipeline, docs, embedder=embedder,
                            on_error="stop", ahead=False)  # one connection: no worker
            if report.failed:
                raise LiveFailure(f"a fetched document could not be stored: "
                                  f"{report.failed[0].message}")
            audit.record(conn, client.principal, "document.ingest", pipeline.name, {
                "live": True, "added": report.added, "updated": report.updated,
                "unchanged": report.unchanged, "failed": 0})
    except psycopg.Error as exc:
        raise LiveFailure(f"storing the fetched documents failed: PostgreSQL error "
                          f"{exc.sqlstate or 'unknown'}") from None


@contextmanager
def _nested(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    with conn.transaction():  # a savepoint in the one transaction of the fetch
        yield conn


def _with(response: SearchResponse, entry: TraceEntry) -> SearchResponse:
    trace = response.trace.model_copy(update={
        "retrievers": (*response.trace.retrievers, entry)})
    return response.model_copy(update={"trace": trace})


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
