"""Rank fusion: pure functions over ranked lists, no database.

Scores of different strategies are not comparable, so the default fuses rank
positions: reciprocal rank fusion (Cormack et al., 2009),

    rrf(d) = sum over strategies s of  w_s / (rrf_k + rank_s(d))

with rrf_k = 60 by default. ``min-max`` and ``z-score`` fuse normalised scores
instead (each list's scores scaled to [0, 1] or standardised, distances
inverted so higher is better, missing = 0), weighted the same way; they are
alternatives, not the default. Duplicates collapse to one hit that keeps every
strategy's rank and raw score; the hit's body comes from its best-ranked leg.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .strategies.base import Row

Method = Literal["rrf", "min-max", "z-score"]
METHODS = ("rrf", "min-max", "z-score")
LOWER_IS_BETTER = {"similarity", "mmr"}


@dataclass
class Fused:
    row: Row
    score: float
    found_by: list[tuple[str, int, float]] = field(default_factory=list)
    """(strategy, rank in that strategy, raw score)."""


def collapse(rows: list[Row], by_document: bool) -> list[Row]:
    """One entry per fragment (or per document), keeping the first (best) occurrence."""
    seen: set = set()
    kept = []
    for row in rows:
        key = row.document_id if by_document else row.fragment_id
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def fuse(legs: dict[str, list[Row]], *, method: Method = "rrf", rrf_k: int = 60,
         weights: dict[str, float] | None = None, by_document: bool = False) -> list[Fused]:
    weights = weights or {}
    fused: dict = {}
    for name, rows in legs.items():
        ranked = collapse(rows, by_document)
        contribution = _contributions(name, ranked, method, rrf_k)
        weight = weights.get(name, 1.0)
        for rank, (row, value) in enumerate(zip(ranked, contribution), start=1):
            key = row.document_id if by_document else row.fragment_id
            entry = fused.get(key)
            if entry is None:
                entry = fused[key] = Fused(row, 0.0)
            elif rank < min(r for _, r, _ in entry.found_by):
                entry.row = row  # show the fragment from the leg that ranked it best
            entry.score += weight * value
            entry.found_by.append((name, rank, float(row.score)))
    return sorted(fused.values(), key=lambda f: (-f.score, min(r for _, r, _ in f.found_by),
                                                 f.row.fragment_id))


def _contributions(name: str, rows: list[Row], method: Method, rrf_k: int) -> np.ndarray:
    if not rows:
        return np.zeros(0)
    if method == "rrf":
        return 1.0 / (rrf_k + np.arange(1, len(rows) + 1))
    scores = np.asarray([r.score for r in rows], dtype=np.float64)
    if name in LOWER_IS_BETTER:
        scores = -scores
    if method == "min-max":
        spread = scores.max() - scores.min()
        return (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    deviation = scores.std()
    return (scores - scores.mean()) / deviation if deviation > 0 else np.zeros_like(scores)


def promote(fused: list[Fused], evidence: list[str]) -> list[Fused]:
    """Hits holding every exact identifier of the query come first (stable otherwise),
    those naming it in their title before those that only mention it.

    An identifier found verbatim is evidence no paraphrase can outweigh: a CVE id's
    record must not be drowned by semantic near-misses (seed 004).
    """
    if not evidence:
        return fused
    needles = [e.lower() for e in evidence]

    def strength(item: Fused) -> int:
        """2: every identifier in the title (the document is about it), 1: in the text, 0: not."""
        title = (item.row.title or "").lower()
        if all(n in title for n in needles):
            return 2
        return 1 if all(n in f"{title}\n{item.row.body.lower()}" for n in needles) else 0

    return sorted(fused, key=lambda f: -strength(f))


def lead(fused: list[Fused], strategy: str | None) -> list[Fused]:
    """The hits ``strategy`` found first, in its order; the others after, as fused."""
    if strategy is None:
        return fused

    def rank(item: Fused) -> float:
        return min((r for s, r, _ in item.found_by if s == strategy), default=float("inf"))

    return sorted(fused, key=rank)
