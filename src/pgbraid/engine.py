"""Runs a strategy under a scope and builds the response with its trace."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import psycopg

from . import hybrid, pipelines, strategies
from .db.database import Database
from .errors import NotEnabled
from .models import Hit, SearchRequest, SearchResponse, Trace, TraceEntry, parse_search_request
from .scope import Scope, validate_filters
from .strategies.base import Context, Outcome, Row, Strategy

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
        """Validate everything that needs no database: shape, params, filters, opt-in gates."""
        if isinstance(body, SearchRequest):
            body = body.model_dump()
        request = parse_search_request(body, max_query_chars=self.max_query_chars, max_k=self.max_k)
        if request.type in hybrid.TYPES:
            hybrid.validate(request, self)
        else:
            strategies.get(request.type).validate(request, self.context)
        validate_filters(request.filters)
        return request

    def context_with_extensions(self) -> Context:
        self.db.open()
        return dataclasses.replace(self.context, extensions=self.db.extensions)

    def search(self, pipeline_name: str, body: dict[str, Any] | SearchRequest) -> SearchResponse:
        request = self.parse(body)
        if request.type in hybrid.TYPES:
            return hybrid.search(self, pipeline_name, request)
        strategy = strategies.get(request.type)
        if not strategy.touches_database:
            return self._respond(pipeline_name, request, strategy, strategy.run(
                None, None, request, None, request.k, self.context), [], 0.0, time.perf_counter())
        with self.db.session(self.tenant, read_only=True) as conn:  # one snapshot
            return self._search(conn, pipeline_name, request, strategy)

    def _search(self, conn: psycopg.Connection, pipeline_name: str, request: SearchRequest,
                strategy: Strategy) -> SearchResponse:
        started = time.perf_counter()
        context = self.context_with_extensions()
        pipeline, held = pipelines.get_resolving(conn, pipeline_name, request.classification)
        reason = strategy.unavailable(pipeline, context)
        if reason:
            raise NotEnabled(f"{strategy.name} is not enabled: {reason}", strategy=strategy.name)
        scope = Scope(pipeline.id, held, request.filters)
        ran = time.perf_counter()
        outcome, rows = self._run(conn, strategy, pipeline, request, scope, context)
        ms = (time.perf_counter() - ran) * 1000
        return self._respond(pipeline.name, request, strategy, outcome, rows, ms, started)

    def _respond(self, pipeline: str, request: SearchRequest, strategy: Strategy, outcome: Outcome,
                 rows: list[Row], ms: float, started: float) -> SearchResponse:
        entry = TraceEntry(retriever=strategy.name, status="ran", hits=len(rows),
                           ms=round(ms, 3), details=outcome.details)
        return SearchResponse(
            pipeline=pipeline, query=request.query, type=request.type,
            hits=tuple(_hit(row, rank) for rank, row in enumerate(rows, start=1)),
            trace=Trace(retrievers=(entry,), ms=round((time.perf_counter() - started) * 1000, 3)))

    def _run(self, conn, strategy, pipeline, request, scope, context) -> tuple[Outcome, list[Row]]:
        """Run the strategy; grouped by document, deepen until k documents or exhaustion."""
        k = request.k
        if k == 0:
            return Outcome([]), []
        if request.group_by != "document":
            outcome = strategy.run(conn, pipeline, request, scope, k, context)
            return outcome, outcome.rows[:k]
        depth = k * GROUP_OVERFETCH
        while True:
            outcome = strategy.run(conn, pipeline, request, scope, depth, context)
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
               language=row.language,
               matched_terms=tuple(row.matched_terms) if row.matched_terms is not None else None,
               mmr_score=row.mmr_score, evidence=row.evidence)
