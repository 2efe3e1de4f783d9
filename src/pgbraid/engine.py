"""The engine: runs every read a principal asks for, under one scope and one snapshot.

A search is a plan (planner.py): one strategy, ``history`` (one strategy as of
a time), or the legs of ``hybrid`` / ``auto``; a page of it (paging.py) as of
the request's time or its cursor's. The engine checks the principal (read +
execute on the pipeline, classifications it may hold), opens one read-only
REPEATABLE READ snapshot, looks up the pipeline and resolves the
classifications, builds the ``Scope``, runs the legs (further legs on sessions
of their own that import the same snapshot, or in turn on the main session
when the pool has none free), and turns rows into hits and the trace in one place, adding highlights
(highlight.py) and the next page's cursor in the same snapshot. Document reads
and version listings run the same way; a quarantined document shows in them only
to a principal who may write the pipeline (documents.py). With read replicas
(db/replicas.py) a search's snapshot is on the replica the router chose (rerun on
the primary if that replica fails under it) and the trace names it; every other
read and every write stays on the primary.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

import psycopg

from . import documents, encryption, highlight, paging, pipelines, planner, strategies
from .db.database import Database, Snapshot
from .db.replicas import Router
from .errors import Forbidden, NotEnabled, PgbraidError
from .fusion import Fused, fuse, lead, promote
from .models import (DEFAULT_CLASSIFICATION, Hit, PipelineInfo, SearchRequest, SearchResponse,
                     StrategyRank, Trace, TraceEntry, parse_classifications, parse_search_request)
from .pipelines import Pipeline
from .scope import Principal, Scope, resolve_classifications, validate_filters
from .strategies.base import Context, Outcome, Row

GROUP_OVERFETCH = 4
MAX_GROUP_DEPTH = 20_000
TOP_TRACED = 5
MAX_PARALLEL_LEGS = 4


@dataclasses.dataclass
class Leg:
    """A planned leg being run: what it ran and what it found."""

    plan: planner.Leg
    request: SearchRequest
    entry: TraceEntry | None = None
    rows: list[Row] = dataclasses.field(default_factory=list)


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
                self._run_leg(None, leg, None, None, self.context)
            return self._respond(pipeline_name, asked, plan, legs, page, started), None
        context = self._prepare(principal, pipeline_name, asked, self.context_with_extensions())

        def on(db: Database) -> tuple[SearchResponse, Pipeline]:
            return self._search_on(db, principal, pipeline_name, asked, plan, page, context,
                                   started)
        if self.reads is None:
            return on(self.db)
        (response, pipeline), served = self.reads.run(asked.consistency, asked.min_lsn, on)
        trace = response.trace.model_copy(update={"server": served.as_dict()})
        return response.model_copy(update={"trace": trace}), pipeline

    def _search_on(self, db: Database, principal: Principal, pipeline_name: str,
                   asked: SearchRequest, plan: planner.Plan, page: paging.Page,
                   context: Context, started: float) -> tuple[SearchResponse, Pipeline]:
        """The search in one snapshot of ``db`` (the primary or a read replica)."""
        with db.snapshot(principal.tenant) as snapshot:
            pipeline, held = self._resolve(snapshot.conn, principal, pipeline_name,
                                           asked.classification)
            request = asked.model_copy(update={"classification": held})
            encryption.check_filters(pipeline, request.filters)
            scope = Scope(pipeline.id, held, request.filters, as_of=page.as_of)
            if paging.still_current(snapshot.conn, page, scope):
                scope = dataclasses.replace(scope, as_of=None)  # the same versions, indexed
            if plan.fused:
                plan = planner.for_request(request, graph=_has_graph(snapshot.conn, pipeline))
                legs = self._run_fused(snapshot, plan, pipeline, request, scope, context)
                extra = planner.follow_up(request, plan, _missing(legs))
                if extra is not None:
                    leg = Leg(extra, planner.leg_request(request, extra))
                    self._run_leg(snapshot.conn, leg, pipeline, scope, context, savepoint=True)
                    legs.append(leg)
            else:
                legs = [self._run_single(snapshot.conn, plan.legs[0], pipeline, request, scope,
                                         context, page)]
            response = self._respond(pipeline.name, request, plan, legs, page, started, pipeline)
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
        trace = response.trace.model_copy(update={"ms": _ms(started)})
        return response.model_copy(update={"hits": hits, "next_cursor": cursor, "trace": trace})

    def _resolve(self, conn: psycopg.Connection, principal: Principal, name: str,
                 asked: tuple[str, ...] | None) -> tuple[Pipeline, tuple[str, ...]]:
        """The pipeline and the classifications the request holds, resolved through
        their hierarchy; asking for more than the principal may hold is Forbidden."""
        asked = asked or principal.default_classifications
        pipeline, held, bound = pipelines.get_resolving(conn, name, asked,
                                                        principal.classifications)
        pipeline = dataclasses.replace(pipeline, keyring=self.keyring)
        if bound is not None:
            beyond = sorted(set(asked) - set(bound) - {DEFAULT_CLASSIFICATION})
            if beyond:
                raise Forbidden(f"this principal may not hold {', '.join(beyond)}",
                                classification=beyond)
        return pipeline, held

    def _run_single(self, conn: psycopg.Connection, planned: planner.Leg, pipeline: Pipeline,
                    request: SearchRequest, scope: Scope, context: Context,
                    page: paging.Page) -> Leg:
        """One strategy named by the caller: unavailable is an error, not a skip. It
        ranks offset + k rows; the page is the last k."""
        strategy = strategies.get(planned.strategy)
        reason = strategy.unavailable(pipeline, context)
        if reason:
            raise NotEnabled(f"{strategy.name} is not enabled: {reason}", strategy=strategy.name)
        leg = Leg(planned, planner.single_request(request))
        began = time.perf_counter()
        want = page.offset + request.k if request.k else 0
        outcome, leg.rows = _deepen(conn, strategy, pipeline, leg.request, scope, context, want)
        leg.entry = TraceEntry(retriever=strategy.name, status="ran", hits=len(leg.rows),
                               ms=_ms(began), details=outcome.details)
        return leg

    def _run_fused(self, snapshot: Snapshot, plan: planner.Plan, pipeline: Pipeline,
                   request: SearchRequest, scope: Scope, context: Context) -> list[Leg]:
        """The legs of a fused plan: the first on the main session, the others on
        sessions importing the snapshot (or after it on the main session)."""
        legs = [Leg(p, planner.leg_request(request, p)) for p in plan.legs]
        runnable = []
        for leg in legs:
            reason = strategies.get(leg.plan.strategy).unavailable(pipeline, context)
            if reason:
                leg.entry = TraceEntry(retriever=leg.plan.strategy, status="skipped", reason=reason)
            else:
                runnable.append(leg)
        if not runnable:
            return legs
        later: list[Leg] = []
        if len(runnable) > 1:
            snapshot.export()

            def on_own_session(leg: Leg) -> None:
                with snapshot.leg() as conn:
                    if conn is None:
                        later.append(leg)
                    else:
                        self._run_leg(conn, leg, pipeline, scope, context)

            with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_LEGS, len(runnable) - 1),
                                    thread_name_prefix="pgbraid-leg") as pool:
                futures = [pool.submit(on_own_session, leg) for leg in runnable[1:]]
                self._run_leg(snapshot.conn, runnable[0], pipeline, scope, context, savepoint=True)
                for future in futures:
                    future.result()
        else:
            later = runnable
        for leg in later:
            self._run_leg(snapshot.conn, leg, pipeline, scope, context, savepoint=True)
        return legs

    def _run_leg(self, conn: psycopg.Connection | None, leg: Leg, pipeline: Pipeline | None,
                 scope: Scope | None, context: Context, *, savepoint: bool = False) -> None:
        """Run one fused leg; an error becomes a ``failed`` trace entry."""
        strategy = strategies.get(leg.plan.strategy)
        began = time.perf_counter()
        try:
            if savepoint:
                with conn.transaction():  # a failing leg must not abort the others' snapshot
                    outcome = strategy.run(conn, pipeline, leg.request, scope, leg.request.k,
                                           context)
            else:
                outcome = strategy.run(conn, pipeline, leg.request, scope, leg.request.k, context)
        except PgbraidError as exc:
            leg.entry = TraceEntry(retriever=strategy.name, status="failed", reason=exc.message,
                                   ms=_ms(began))
            return
        except psycopg.Error as exc:  # its SQLSTATE only: no statement or value text
            if exc.sqlstate is None or exc.sqlstate.startswith("08"):
                raise  # a lost connection (a Citus worker down): the answer fails, not a leg
            leg.entry = TraceEntry(retriever=strategy.name, status="failed", ms=_ms(began),
                                   reason=f"PostgreSQL error {exc.sqlstate or 'unknown'}")
            return
        leg.rows = outcome.rows
        details = dict(outcome.details)
        if leg.plan.query:
            details["query"] = leg.plan.query
        leg.entry = TraceEntry(retriever=strategy.name, status="ran", hits=len(outcome.rows),
                               ms=_ms(began), details=details)

    def _respond(self, pipeline: str, request: SearchRequest, plan: planner.Plan, legs: list[Leg],
                 page: paging.Page, started: float,
                 source: Pipeline | None = None) -> SearchResponse:
        """Rows to hits (``source``: the pipeline, whose sealed values _hit opens)."""
        sealed = source is not None and encryption.encrypted(source)
        if not plan.fused:
            (leg,) = legs
            hits = [_hit(row, rank, row.score, None, source)
                    for rank, row in enumerate(leg.rows[page.offset:], start=page.offset + 1)]
            return SearchResponse(pipeline=pipeline, query=request.query, type=request.type,
                                  hits=tuple(hits), as_of=page.as_of,
                                  trace=Trace(retrievers=(leg.entry,), ms=_ms(started)))
        weights = planner.weights(request, plan)
        for leg in legs:
            if leg.entry.status == "ran":
                leg.entry = leg.entry.model_copy(update={"details": {
                    **leg.entry.details, "weight": weights.get(leg.plan.strategy, 1.0),
                    "depth": leg.request.k}})
        ran = {leg.plan.strategy: leg.rows for leg in legs if leg.entry.status == "ran"}
        method = request.params.get("fusion", "rrf")
        rrf_k = request.params.get("rrf_k", 60)
        by_document = request.group_by == "document"
        # Promotion reads candidates' text: sealed, it is not opened for that (hits only).
        promoted = () if sealed else plan.identifiers
        fused = promote(lead(fuse(ran, method=method, rrf_k=rrf_k, weights=weights,
                                  by_document=by_document),
                             planner.leader(request, plan, _missing(legs))), promoted)
        hits = [_hit(item.row, rank, round(item.score, 8), item, source)
                for rank, item in enumerate(fused[page.offset:page.offset + request.k],
                                            start=page.offset + 1)]
        fusion = _fusion_trace(plan, method, rrf_k, weights, ran, fused, by_document)
        if sealed and plan.identifiers:
            fusion["promotion"] = ("skipped: the pipeline is encrypted, and candidates' text is "
                                   "opened only for the hits returned")
        return SearchResponse(pipeline=pipeline, query=request.query, type=request.type,
                              hits=tuple(hits), as_of=page.as_of,
                              trace=Trace(retrievers=tuple(leg.entry for leg in legs),
                                          fusion=fusion, ms=_ms(started)))

    # -- pipelines and documents ------------------------------------------------------

    def pipelines(self, principal: Principal) -> list[PipelineInfo]:
        """The pipelines this principal may read, with counts of what it may see."""
        with self.db.snapshot(principal.tenant) as snapshot:
            visible = _visible(snapshot.conn, principal)
            return [pipelines.info(snapshot.conn, p, visible)
                    for p in pipelines.list_all(snapshot.conn) if principal.allows(p.name, "read")]

    def pipeline(self, principal: Principal, name: str) -> PipelineInfo:
        principal.require(name, "read")
        with self.db.snapshot(principal.tenant) as snapshot:
            pipeline = pipelines.get(snapshot.conn, name)
            return pipelines.info(snapshot.conn, pipeline, _visible(snapshot.conn, principal))

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

def _visible(conn: psycopg.Connection, principal: Principal) -> tuple[str, ...] | None:
    """What a principal's counts may include: None (everything) for an unbounded one."""
    if principal.classifications is None:
        return None
    return resolve_classifications(conn, (*principal.classifications, DEFAULT_CLASSIFICATION))


def _has_graph(conn: psycopg.Connection, pipeline: Pipeline) -> bool:
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pgbraid.edges WHERE pipeline_id = %s)",
                        (pipeline.id,)).fetchone()[0]


def _deepen(conn, strategy, pipeline, request, scope, context, k) -> tuple[Outcome, list[Row]]:
    """Run a single strategy for k rows; grouped by document, deepen until k documents
    or exhaustion."""
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


def _missing(legs: list[Leg]) -> list[str]:
    """The query terms the bm25 leg found in no fragment in scope (its df is scoped)."""
    for leg in legs:
        if leg.plan.strategy == "bm25" and leg.entry.status == "ran":
            return [t["term"] for t in leg.entry.details.get("terms", ()) if t["df"] == 0]
    return []


def _fusion_trace(plan: planner.Plan, method: str, rrf_k: int, weights: dict[str, float],
                  legs: dict[str, list[Row]], fused: list[Fused],
                  by_document: bool) -> dict[str, Any]:
    def key(row: Row) -> Any:
        return row.document_id if by_document else row.fragment_id

    final = {key(item.row): rank for rank, item in enumerate(fused, start=1)}
    return {
        "method": method, "rrf_k": rrf_k if method == "rrf" else None, "weights": weights,
        "plan": plan.as_dict(), "promoted_identifiers": plan.identifiers,
        "candidates": len(fused),
        "top_hits_final_rank": {name: [final.get(key(r)) for r in rows[:TOP_TRACED]]
                                for name, rows in legs.items()},
    }


def _hit(row: Row, rank: int, score: float, fused: Fused | None = None,
         pipeline: Pipeline | None = None) -> Hit:
    """The one row-to-hit mapper. An encrypted pipeline's sealed title, text and metadata
    fields are opened here, once, for the hits returned only (KeyUnavailable /
    IntegrityFailure: the search fails, nothing is returned)."""
    values = {"title": row.title, "body": row.body, "metadata": row.metadata}
    if pipeline is not None:
        values = encryption.open_fragment(pipeline, row.fragment_id, row.version, values)
    return Hit(document_id=row.document_id, fragment_id=row.fragment_id, version=row.version,
               title=values["title"], page_content=values["body"], score=float(score), rank=rank,
               metadata=values["metadata"], classifications=tuple(row.classifications),
               language=row.language,
               matched_terms=tuple(row.matched_terms) if row.matched_terms is not None else None,
               mmr_score=row.mmr_score, evidence=row.evidence,
               found_by=tuple(StrategyRank(strategy=s, rank=r, score=v)
                              for s, r, v in fused.found_by) if fused else ())


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
