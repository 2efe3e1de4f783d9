"""The strategy registry: adding a strategy is one module and one line here."""

from __future__ import annotations

from ..errors import InvalidRequest
from ..models import shown
from .base import Strategy
from .bm25 import BM25
from .fulltext import FullText
from .fuzzy import Fuzzy
from .graph import Graph
from .relational import Relational
from .vector import MMR, Similarity

REGISTRY: dict[str, Strategy] = {s.name: s for s in [
    FullText(),
    Fuzzy(),
    BM25(),
    Relational(),
    Similarity(),
    MMR(),
    Graph(),
]}
ALIASES: dict[str, str] = {"search": "bm25"}


def get(name: str) -> Strategy:
    key = ALIASES.get(name, name)
    strategy = REGISTRY.get(key)
    if strategy is None:
        known = ", ".join(sorted([*REGISTRY, *ALIASES, "hybrid", "auto"]))
        raise InvalidRequest(f"unknown search type {shown(name)}; use one of: {known}", field="type")
    return strategy
