"""Hit assembly: a plan's leg rows become the response's hits and trace (fused by
rank or score for a fused plan, with the fusion's own trace), and ``_hit`` is the one
row-to-hit mapper, where an encrypted pipeline's sealed values are opened for the
hits returned only. Used by engine.py."""

from __future__ import annotations

from typing import Any

from . import encryption, paging, planner
from .fusion import Fused, fuse, lead, promote
from .legs import Leg, elapsed_ms, missing
from .models import Hit, SearchRequest, SearchResponse, StrategyRank, Trace
from .pipelines import Pipeline
from .strategies.base import Row

TOP_TRACED = 5


def respond(pipeline: str, request: SearchRequest, plan: planner.Plan, legs: list[Leg],
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
                              trace=Trace(retrievers=(leg.entry,), ms=elapsed_ms(started)))
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
                         planner.leader(request, plan, missing(legs))), promoted)
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
                                      fusion=fusion, ms=elapsed_ms(started)))


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
