"""Runs a strategy under a scope and builds the response with its trace."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from . import pipelines, strategies
from .db.database import Database
from .errors import NotEnabled
from .models import Hit, SearchRequest, SearchResponse, Trace, TraceEntry, parse_search_request
from .scope import Scope, resolve_classifications, validate_filters
from .strategies.base import Context, Outcome, Row

GROUP_OVERFETCH = 4
MAX_GROUP_DEPTH = 20_000


class Engine:
    def __init__(self, db: Database, *, tenant: str, context: Context, max_query_chars: int,
                 max_k: int) -> None:
        self.db = db
        self.tenant = tenant
        self.context = context
        self.max_query_chars = max_query_chars
        self.max_k = max_k

    def parse(self, body: dict[str, Any] | SearchRequest) -> SearchRequest:
        if isinstance(body, SearchRequest):
            body = body.model_dump()
        request = parse_search_request(body, max_query_chars=self.max_query_chars, max_k=self.max_k)
        strategies.get(request.type).validate(request)
        validate_filters(request.filters)
        return request

    def search(self, pipeline_name: str, body: dict[str, Any] | SearchRequest, *,
               conn: psycopg.Connection | None = None) -> SearchResponse:
        """Validate everything before any statement, then run in one tenant session."""
        request = self.parse(body)
        if conn is not None:
            return self._search(conn, pipeline_name, request)
        with self.db.session(self.tenant) as session:
            return self._search(session, pipeline_name, request)

    def _search(self, conn: psycopg.Connection, pipeline_name: str,
                request: SearchRequest) -> SearchResponse:
        started = time.perf_counter()
        strategy = strategies.get(request.type)
        pipeline = pipelines.get(conn, pipeline_name)
        reason = strategy.unavailable(pipeline, self.context)
        if reason:
            raise NotEnabled(f"{strategy.name} is not enabled: {reason}", strategy=strategy.name)
        scope = Scope(pipeline.id, resolve_classifications(conn, request.classification),
                      request.filters)
        ran = time.perf_counter()
        outcome, rows = self._run(conn, strategy, pipeline, request, scope)
        ms = (time.perf_counter() - ran) * 1000
        entry = TraceEntry(retriever=strategy.name, status="ran", hits=len(outcome.rows),
                           ms=round(ms, 3), details=outcome.details)
        return SearchResponse(
            pipeline=pipeline.name, query=request.query, type=request.type,
            hits=tuple(_hit(row, rank) for rank, row in enumerate(rows, start=1)),
            trace=Trace(retrievers=(entry,),
                        ms=round((time.perf_counter() - started) * 1000, 3)))

    def _run(self, conn, strategy, pipeline, request, scope) -> tuple[Outcome, list[Row]]:
        """Run the strategy; grouped by document, deepen until k documents or exhaustion."""
        k = request.k
        if k == 0:
            return Outcome([]), []
        if request.group_by != "document":
            outcome = strategy.run(conn, pipeline, request, scope, k)
            return outcome, outcome.rows[:k]
        depth = k * GROUP_OVERFETCH
        while True:
            outcome = strategy.run(conn, pipeline, request, scope, depth)
            rows = _group(outcome.rows, k)
            if len(rows) >= k or len(outcome.rows) < depth or depth >= MAX_GROUP_DEPTH:
                return outcome, rows
            depth = min(depth * GROUP_OVERFETCH, MAX_GROUP_DEPTH)


def _group(rows: list[Row], k: int) -> list[Row]:
    """Keep each document's best fragment, in rank order."""
    seen: set[str] = set()
    kept: list[Row] = []
    for row in rows:
        if row.document_id not in seen:
            seen.add(row.document_id)
            kept.append(row)
    return kept[:k]


def _hit(row: Row, rank: int) -> Hit:
    return Hit(document_id=row.document_id, fragment_id=row.fragment_id, version=row.version,
               title=row.title, page_content=row.body, score=float(row.score), rank=rank,
               metadata=row.metadata, classifications=tuple(row.classifications),
               language=row.language)
