"""Running a plan's legs under one scope: a single strategy the caller named (deepened
until a page of documents when grouped), or the legs of a fused plan, the first on
the search's session and the others on sessions importing its snapshot (or in turn
on the main session when the pool has none free). A fused leg that fails becomes a
``failed`` trace entry; the others still answer. Used by engine.py."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from . import paging, planner, strategies
from .db.database import Snapshot
from .errors import NotEnabled, PgbraidError
from .models import SearchRequest, TraceEntry
from .pipelines import Pipeline
from .scope import Scope
from .strategies.base import Context, Outcome, Row

GROUP_OVERFETCH = 4
MAX_GROUP_DEPTH = 20_000
MAX_PARALLEL_LEGS = 4


@dataclasses.dataclass
class Leg:
    """A planned leg being run: what it ran and what it found."""

    plan: planner.Leg
    request: SearchRequest
    entry: TraceEntry | None = None
    rows: list[Row] = dataclasses.field(default_factory=list)


def run_single(conn: psycopg.Connection, planned: planner.Leg, pipeline: Pipeline,
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
                           ms=elapsed_ms(began), details=outcome.details)
    return leg


def run_fused(snapshot: Snapshot, plan: planner.Plan, pipeline: Pipeline,
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
                    run_leg(conn, leg, pipeline, scope, context)

        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_LEGS, len(runnable) - 1),
                                thread_name_prefix="pgbraid-leg") as pool:
            futures = [pool.submit(on_own_session, leg) for leg in runnable[1:]]
            run_leg(snapshot.conn, runnable[0], pipeline, scope, context, savepoint=True)
            for future in futures:
                future.result()
    else:
        later = runnable
    for leg in later:
        run_leg(snapshot.conn, leg, pipeline, scope, context, savepoint=True)
    return legs


def run_leg(conn: psycopg.Connection | None, leg: Leg, pipeline: Pipeline | None,
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
                               ms=elapsed_ms(began))
        return
    except psycopg.Error as exc:  # its SQLSTATE only: no statement or value text
        if exc.sqlstate is None or exc.sqlstate.startswith("08"):
            raise  # a lost connection (a Citus worker down): the answer fails, not a leg
        leg.entry = TraceEntry(retriever=strategy.name, status="failed", ms=elapsed_ms(began),
                               reason=f"PostgreSQL error {exc.sqlstate or 'unknown'}")
        return
    leg.rows = outcome.rows
    details = dict(outcome.details)
    if leg.plan.query:
        details["query"] = leg.plan.query
    leg.entry = TraceEntry(retriever=strategy.name, status="ran", hits=len(outcome.rows),
                           ms=elapsed_ms(began), details=details)


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


def missing(legs: list[Leg]) -> list[str]:
    """The query terms the bm25 leg found in no fragment in scope (its df is scoped)."""
    for leg in legs:
        if leg.plan.strategy == "bm25" and leg.entry.status == "ran":
            return [t["term"] for t in leg.entry.details.get("terms", ()) if t["df"] == 0]
    return []


def elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
