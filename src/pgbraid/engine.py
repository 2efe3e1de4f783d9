"""The engine: runs every read a principal asks for, under one scope and one snapshot.

A search is a plan (planner.py): one strategy, ``history`` (one strategy as of
a time), or the legs of ``hybrid`` / ``auto``; a page of it (paging.py) as of
the request's time or its cursor's. The engine checks the principal (read +
execute on the pipeline, classifications it may hold), opens one read-only
REPEATABLE READ snapshot, looks up the pipeline and resolves the
classifications, builds the ``Scope``, runs the legs (legs.py: further legs on sessions
of their own that import the same snapshot, or in turn on the main session
when the pool has none free), and turns rows into hits and the trace in one place
(hits.py), adding highlights (highlight.py) and the next page's cursor in the same
snapshot. Document reads
and version listings run the same way; a quarantined document shows in them only
to a principal who may write the pipeline (documents.py). With read replicas
(db/replicas.py) a search's snapshot is on the replica the router chose (rerun on
the primary if that replica fails under it) and the trace names it; every other
read and every write stays on the primary.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

import psycopg

from . import documents, encryption, highlight, opening, paging, pipelines, planner, strategies
from .db.database import Database, SnapshotEnded
from .db.replicas import Router
from .hits import respond
from .legs import Leg, elapsed_ms, missing, run_fused, run_leg, run_single
from .models import (PipelineInfo, SearchRequest, SearchResponse, parse_classifications,
                     parse_search_request)
from .pipelines import Pipeline
from .scope import Principal, Scope, resolve_classifications, validate_filters
from .strategies.base import Context


class Engine:
    def __init__(self, db: Database, *, context: Context, max_query_chars: int,
                 max_k: int, keyring: encryption.Keyring | None = None,
                 reads: Router | None = None) -> None:
        self.db = db
        self.keyring = keyring
        """Opens encrypted pipelines' values (bound to each pipeline in _resolve)."""
        self.reads = reads
        """Read replicas for searches (everything else reads the primary)."""
        self.context = context
        self.max_query_chars = max_query_chars
        self.max_k = max_k
        self._pgsearch_ready = False
        self._textsearch_ready = False
        self._guesses = opening.Guesses()
        """What requests resolved to: their strategy's first statement goes ahead (opening.py)."""

    # -- requests -------------------------------------------------------------------

    def parse(self, body: dict[str, Any] | SearchRequest) -> SearchRequest:
        """Validate everything that needs no database: shape, params, filters, opt-in gates."""
        if isinstance(body, SearchRequest):
            body = body.model_dump(exclude_unset=True)
        request = parse_search_request(body, max_query_chars=self.max_query_chars, max_k=self.max_k)
        planner.validate(request, self.context)
        validate_filters(request.filters, self.context.filter_limits)
        return request

    def context_with_extensions(self) -> Context:
        self.db.open()
        if self.context.pgsearch and "pg_search" in self.db.extensions and not self._pgsearch_ready:
            from .strategies.pgsearch import ensure_index

            with self.db.admin() as owner:  # searches run read-only: the index comes first
                ensure_index(owner)
            self._pgsearch_ready = True
        if self.context.textsearch and not self._textsearch_ready:
            from .strategies.textsearch import ensure_extension

            with self.db.admin() as owner:
                if ensure_extension(owner):
                    self.db.extensions = self.db.extensions | {"pg_textsearch"}
            self._textsearch_ready = True
        return dataclasses.replace(self.context, extensions=self.db.extensions,
                                   owner=self.db.admin)

    def _prepare(self, principal: Principal, pipeline_name: str, asked: SearchRequest,
                 context: Context) -> Context:
        """Writes a search needs before its read-only snapshot: the pipeline's Apache AGE
        mirror, made current (only for a graph search asking for engine age, opted in)."""
        if not (context.age and asked.type == "graph" and asked.params.get("engine") == "age"):
            return context
        from .strategies.graph import age

        note = age.prepare(self.db, principal.tenant, pipeline_name)
        return dataclasses.replace(context, extensions=self.db.extensions, age_mirror=note)

    # -- search -------------------------------------------------------------------

    def search(self, principal: Principal, pipeline_name: str,
               body: dict[str, Any] | SearchRequest) -> SearchResponse:
        return self.search_in(principal, pipeline_name, body)[0]

    def search_in(self, principal: Principal, pipeline_name: str,
                  body: dict[str, Any] | SearchRequest) -> tuple[SearchResponse, Pipeline | None]:
        """The search and the pipeline it ran in (None for a plan that touches no
        database): live fetch reads the pipeline's settings from the same snapshot."""
        # The permission first: a key that may not search never gets the planner to
        # run its query (the identifier patterns are linear, yet cost time).
        principal.require(pipeline_name, "read", "execute")
        asked = self.parse(body)
        page = paging.open_page(asked, self.max_k)
        started = time.perf_counter()
        plan = planner.for_request(asked)
        if not any(strategies.get(leg.strategy).touches_database for leg in plan.legs):
            legs = [Leg(leg, planner.single_request(asked)) for leg in plan.legs]
            for leg in legs:  # documented no-ops: nothing is sent to PostgreSQL
                run_leg(None, leg, None, None, self.context)
            return respond(pipeline_name, asked, plan, legs, page, started), None
        context = self._prepare(principal, pipeline_name, asked, self.context_with_extensions())

        def on(db: Database) -> tuple[SearchResponse, Pipeline]:
            try:
                return self._search_on(db, principal, pipeline_name, asked, plan, page, context,
                                       started, ending=_may_end(asked, plan, page))
            except SnapshotEnded:  # the scope rejected candidates: again, in one snapshot
                return self._search_on(db, principal, pipeline_name, asked, plan, page, context,
                                       started, ending=False)
        if self.reads is None:
            return on(self.db)
        (response, pipeline), served = self.reads.run(asked.consistency, asked.min_lsn, on)
        trace = response.trace.model_copy(update={"server": served.as_dict()})
        return response.model_copy(update={"trace": trace}), pipeline

    def _search_on(self, db: Database, principal: Principal, pipeline_name: str,
                   asked: SearchRequest, plan: planner.Plan, page: paging.Page,
                   context: Context, started: float, *,
                   ending: bool) -> tuple[SearchResponse, Pipeline]:
        """The search in one snapshot of ``db`` (the primary or a read replica), opened
        in one round trip with the pipeline resolved (opening.py); ``ending``: the
        strategy's last statement may end the snapshot."""
        first = opening.First(principal, pipeline_name, asked, plan,
                              None if page.pinned else page.as_of, context, self._guesses)
        with db.snapshot(principal.tenant, first.send) as snapshot:
            pipeline, held, early = first.receive(snapshot.opened)
            pipeline = dataclasses.replace(pipeline, keyring=self.keyring)
            context = dataclasses.replace(context, opened=early, ends_snapshot=ending)
            request, scope = opening.scope_of(pipeline, held, asked, page.as_of)
            encryption.check_filters(pipeline, request.filters)
            if paging.still_current(snapshot.conn, page, scope):
                scope = dataclasses.replace(scope, as_of=None)  # the same versions, indexed
            if plan.fused:
                plan = planner.for_request(request, graph=_has_graph(snapshot.conn, pipeline))
                legs = run_fused(snapshot, plan, pipeline, request, scope, context)
                extra = planner.follow_up(request, plan, missing(legs))
                if extra is not None:
                    leg = Leg(extra, planner.leg_request(request, extra))
                    run_leg(snapshot.conn, leg, pipeline, scope, context, savepoint=True)
                    legs.append(leg)
            else:
                legs = [run_single(snapshot.conn, plan.legs[0], pipeline, request, scope,
                                   context, page)]
            response = respond(pipeline.name, request, plan, legs, page, started, pipeline)
            return (self._finish(snapshot.conn, asked, plan, legs, page, scope, response, started,
                                 pipeline), pipeline)

    def _finish(self, conn: psycopg.Connection, asked: SearchRequest, plan: planner.Plan,
                legs: list[Leg], page: paging.Page, scope: Scope, response: SearchResponse,
                started: float, pipeline: Pipeline) -> SearchResponse:
        """Highlights and the next page's cursor, in the search's snapshot."""
        hits = response.hits
        if asked.params.get("highlight"):
            # Sealed text is highlighted from the hits' opened page_content, sent as a parameter.
            texts = ({h.fragment_id: h.page_content for h in hits}
                     if encryption.encrypted(pipeline) else None)
            hits = highlight.for_hits(conn, scope, legs, hits, asked.group_by == "document", texts)
        # A graph leg of auto runs on current edges, its documents as of the cursor's time.
        versioned = any(strategies.get(leg.strategy).versioned for leg in plan.legs)
        cursor = paging.next_cursor(conn, asked, page, scope, len(hits), versioned)
        trace = response.trace.model_copy(update={"ms": elapsed_ms(started)})
        return response.model_copy(update={"hits": hits, "next_cursor": cursor, "trace": trace})

    def _resolve(self, conn: psycopg.Connection, principal: Principal, name: str,
                 asked: tuple[str, ...] | None) -> tuple[Pipeline, tuple[str, ...]]:
        """The pipeline and the classifications the request holds, resolved through
        their hierarchy; asking for more than the principal may hold is Forbidden."""
        asked = asked or principal.default_classifications
        pipeline, held, bound = pipelines.get_resolving(conn, name, asked,
                                                        principal.classifications)
        opening.check_bound(asked, bound)
        return dataclasses.replace(pipeline, keyring=self.keyring), held

    # -- pipelines and documents ------------------------------------------------------

    def pipelines(self, principal: Principal, *, classification: Any = None
                  ) -> list[PipelineInfo]:
        """The pipelines this principal may read, with counts of what the request holds
        (``classification``, or by default what a document listing holds)."""
        asked = parse_classifications(classification) if classification is not None else None
        with self.db.snapshot(principal.tenant) as snapshot:
            held = _held(snapshot.conn, principal, asked)
            return pipelines.infos(snapshot.conn, [
                p for p in pipelines.list_all(snapshot.conn) if principal.allows(p.name, "read")],
                held)

    def pipeline(self, principal: Principal, name: str, *,
                 classification: Any = None) -> PipelineInfo:
        """One pipeline with counts of what the request holds, as ``documents`` lists it
        (less the quarantined documents a writer sees flagged there)."""
        with self._reading(principal, name, classification) as (conn, pipeline, held, _):
            return pipelines.info(conn, pipeline, held)

    @contextmanager
    def _reading(self, principal: Principal, pipeline_name: str, classification: Any
                 ) -> Iterator[tuple[psycopg.Connection, Pipeline, tuple[str, ...], bool]]:
        """The snapshot, pipeline, held classifications and reviewer flag of a document read."""
        asked = parse_classifications(classification) if classification is not None else None
        principal.require(pipeline_name, "read")
        with self.db.snapshot(principal.tenant) as snapshot:
            pipeline, held = self._resolve(snapshot.conn, principal, pipeline_name, asked)
            yield snapshot.conn, pipeline, held, principal.allows(pipeline_name, "write")

    def document(self, principal: Principal, pipeline_name: str, document_id: str, *,
                 version: int | None = None, as_of: datetime | None = None,
                 classification: Any = None) -> dict[str, Any]:
        """One version of a document (current, numbered, or valid at ``as_of``)."""
        with self._reading(principal, pipeline_name, classification) as (conn, pipeline, held,
                                                                         reviewer):
            return documents.read(conn, pipeline, document_id, version=version, as_of=as_of,
                                  classifications=held, reviewer=reviewer)

    def versions(self, principal: Principal, pipeline_name: str, document_id: str, *,
                 classification: Any = None) -> list[dict[str, Any]]:
        """The versions of a document that the request's classifications may see."""
        with self._reading(principal, pipeline_name, classification) as (conn, pipeline, held,
                                                                         reviewer):
            return documents.versions(conn, pipeline, document_id, classifications=held,
                                      reviewer=reviewer)

    def documents(self, principal: Principal, pipeline_name: str, *, after: str | None = None,
                  limit: int = 100, classification: Any = None) -> dict[str, Any]:
        """A page of the pipeline's current documents that the request may see."""
        with self._reading(principal, pipeline_name, classification) as (conn, pipeline, held,
                                                                         reviewer):
            return documents.listing(conn, pipeline, classifications=held, after=after,
                                     limit=limit, reviewer=reviewer)

    def fragment(self, principal: Principal, pipeline_name: str, fragment_id: int, *,
                 classification: Any = None) -> dict[str, Any]:
        """One fragment by id (of any version) that the request may see."""
        with self._reading(principal, pipeline_name, classification) as (conn, pipeline, held,
                                                                         reviewer):
            return documents.fragment(conn, pipeline, fragment_id, classifications=held,
                                      reviewer=reviewer)

def _may_end(asked: SearchRequest, plan: planner.Plan, page: paging.Page) -> bool:
    """Whether nothing runs after a single strategy's statements (_finish sends a
    statement only to highlight or to page; grouping runs the strategy again)."""
    return not (plan.fused or page.paging or asked.params.get("highlight")
                or asked.group_by == "document")


def _held(conn: psycopg.Connection, principal: Principal,
          asked: tuple[str, ...] | None) -> tuple[str, ...]:
    """What a request holds, resolved (Engine._resolve's answer, without a pipeline)."""
    asked = asked or principal.default_classifications
    if principal.classifications is not None:
        opening.check_bound(asked, resolve_classifications(conn, principal.classifications))
    return resolve_classifications(conn, asked)


def _has_graph(conn: psycopg.Connection, pipeline: Pipeline) -> bool:
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pgbraid.edges WHERE pipeline_id = %s)",
                        (pipeline.id,)).fetchone()[0]
