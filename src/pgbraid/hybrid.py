"""hybrid and auto: several strategies for one query, run concurrently and fused.

``hybrid`` runs ``params.strategies`` (default bm25 + similarity, plus fuzzy when
the query looks like a name); ``auto`` asks the planner. Each leg runs in its own
session (so the query embedding overlaps the lexical SQL), to ``params.depth``
candidates (an int, or per strategy), with ``params.leg_params[strategy]``.
A leg that cannot run is ``skipped``, one that errs is ``failed``; either way
the others answer. Fusion is RRF (``rrf_k``, default 60, optional ``weights``)
or ``min-max`` / ``z-score`` score fusion (``params.fusion``). Hits holding the
query's exact identifiers verbatim come first.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from . import pipelines, planner, strategies
from .errors import InvalidRequest, PgbraidError
from .fusion import METHODS, Fused, fuse, promote
from .models import (Hit, SearchRequest, SearchResponse, StrategyRank, Trace, TraceEntry, number,
                     printable)
from .scope import Scope
from .strategies.base import Outcome

if TYPE_CHECKING:
    from .engine import Engine

TYPES = ("hybrid", "auto")
DEFAULT_DEPTH = 50
MAX_DEPTH = 1000
TOP_TRACED = 5


def validate(request: SearchRequest, engine: "Engine") -> None:
    params = request.params
    names = params.get("strategies")
    if names is not None:
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) for n in names)):
            raise InvalidRequest("params.strategies must be a non-empty list of strategy names",
                                 field="strategies")
        for name in names:
            if name in TYPES:
                raise InvalidRequest(f"{name!r} cannot be a leg of a fused search", field="strategies")
            strategies.get(name)
    weights = params.get("weights", {})
    if not isinstance(weights, dict):
        raise InvalidRequest("params.weights must map strategy names to numbers >= 0", field="weights")
    for name in weights:
        strategies.get(name)
        number(weights, name, None, 0, label=f"params.weights.{name}")
    number(params, "rrf_k", 60, 1, 10_000, integer=True)
    if params.get("fusion", "rrf") not in METHODS:
        raise InvalidRequest(f"params.fusion must be one of {', '.join(METHODS)}", field="fusion")
    depth = params.get("depth")
    if isinstance(depth, dict):  # per strategy
        for name in depth:
            number(depth, name, None, 1, MAX_DEPTH, integer=True, label=f"params.depth.{printable(str(name), 40)}")
    else:
        number(params, "depth", None, 1, MAX_DEPTH, integer=True)
    leg_params = params.get("leg_params", {})
    if not isinstance(leg_params, dict) or not all(isinstance(v, dict) for v in leg_params.values()):
        raise InvalidRequest("params.leg_params must map strategy names to objects", field="leg_params")
    for leg in _plan(request).legs:
        strategies.get(leg.strategy).validate(_leg_request(request, leg, 1), engine.context)


def _depths(request: SearchRequest) -> dict[str, int]:
    depth = request.params.get("depth", max(DEFAULT_DEPTH, request.k))
    values = depth if isinstance(depth, dict) else {"*": depth}
    for value in values.values():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEPTH:
            raise InvalidRequest(f"params.depth must be an integer from 1 to {MAX_DEPTH} "
                                 "(or a map of them per strategy)", field="depth")
    return values


def _plan(request: SearchRequest, *, graph: bool = False) -> planner.Plan:
    if request.type == "auto":
        return planner.plan(request.query, graph=graph)
    names = request.params.get("strategies")
    reasons = ["strategies as requested"]
    if names is None:
        names = ["bm25", "similarity"]
        reasons = ["default mix: bm25 + similarity"]
        if planner.looks_like_name(request.query):
            names.append("fuzzy")
            reasons.append("looks like a name: fuzzy added")
    found = planner.promotable(planner.identifiers(request.query))
    return planner.Plan([planner.Leg(n) for n in names], reasons, found)


def _leg_request(request: SearchRequest, leg: planner.Leg, depth: int) -> SearchRequest:
    extra = request.params.get("leg_params", {}).get(leg.strategy, {})
    return request.model_copy(update={
        "type": leg.strategy, "query": leg.query or request.query,
        "params": {**extra, "k": depth}, "group_by": "fragment"})


def search(engine: "Engine", pipeline_name: str, request: SearchRequest) -> SearchResponse:
    started = time.perf_counter()
    context = engine.context_with_extensions()
    with engine.db.session(engine.tenant) as conn:
        pipeline, held = pipelines.get_resolving(conn, pipeline_name, request.classification)
        has_graph = conn.execute("SELECT EXISTS (SELECT 1 FROM pgbraid.edges WHERE pipeline_id = %s)",
                                 (pipeline.id,)).fetchone()[0]
    plan = _plan(request, graph=has_graph)
    weights = {leg.strategy: leg.weight for leg in plan.legs}
    weights.update(request.params.get("weights", {}))
    depths = _depths(request)
    scope = Scope(pipeline.id, held, request.filters)

    def run(leg: planner.Leg) -> tuple[TraceEntry, list]:
        strategy = strategies.get(leg.strategy)
        reason = strategy.unavailable(pipeline, context)
        if reason:
            return TraceEntry(retriever=leg.strategy, status="skipped", reason=reason), []
        depth = depths.get(leg.strategy, depths.get("*", max(DEFAULT_DEPTH, request.k)))
        leg_request = _leg_request(request, leg, depth)
        began = time.perf_counter()
        try:
            with engine.db.session(engine.tenant) as leg_conn:
                outcome: Outcome = strategy.run(leg_conn, pipeline, leg_request, scope, depth, context)
        except PgbraidError as exc:
            return TraceEntry(retriever=leg.strategy, status="failed", reason=exc.message,
                              ms=_ms(began)), []
        details = {**outcome.details, "weight": weights.get(leg.strategy, 1.0), "depth": depth}
        if leg.query:
            details["query"] = leg.query
        return TraceEntry(retriever=leg.strategy, status="ran", hits=len(outcome.rows),
                          ms=_ms(began), details=details), outcome.rows

    with ThreadPoolExecutor(max_workers=min(4, len(plan.legs)),
                            thread_name_prefix="pgbraid-leg") as pool:
        results = list(pool.map(run, plan.legs))
    legs = {entry.retriever: rows for entry, rows in results if entry.status == "ran"}
    method = request.params.get("fusion", "rrf")
    rrf_k = request.params.get("rrf_k", 60)
    fused = promote(fuse(legs, method=method, rrf_k=rrf_k, weights=weights,
                         by_document=request.group_by == "document"), plan.identifiers)
    top = fused[:request.k]
    return SearchResponse(
        pipeline=pipeline.name, query=request.query, type=request.type,
        hits=tuple(_hit(item, rank) for rank, item in enumerate(top, start=1)),
        trace=Trace(retrievers=tuple(entry for entry, _ in results),
                    fusion=_fusion_trace(plan, method, rrf_k, weights, legs, fused, request),
                    ms=_ms(started)))


def _fusion_trace(plan: planner.Plan, method: str, rrf_k: int, weights: dict[str, float],
                  legs: dict[str, list], fused: list[Fused], request: SearchRequest) -> dict[str, Any]:
    final = {item.row.document_id if request.group_by == "document" else item.row.fragment_id: rank
             for rank, item in enumerate(fused, start=1)}
    key = (lambda r: r.document_id) if request.group_by == "document" else (lambda r: r.fragment_id)
    return {
        "method": method, "rrf_k": rrf_k if method == "rrf" else None, "weights": weights,
        "plan": plan.as_dict(), "promoted_identifiers": plan.identifiers,
        "candidates": len(fused),
        "top_hits_final_rank": {name: [final.get(key(r)) for r in rows[:TOP_TRACED]]
                                for name, rows in legs.items()},
    }


def _hit(item: Fused, rank: int) -> Hit:
    row = item.row
    return Hit(document_id=row.document_id, fragment_id=row.fragment_id, version=row.version,
               title=row.title, page_content=row.body, score=round(item.score, 8), rank=rank,
               metadata=row.metadata, classifications=tuple(row.classifications),
               language=row.language, evidence=row.evidence,
               found_by=tuple(StrategyRank(strategy=s, rank=r, score=v) for s, r, v in item.found_by))


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
