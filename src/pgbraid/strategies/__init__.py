"""The strategy registry: adding a strategy is one module and one line here.

``describe()`` lists every search type with its declared params and their
defaults (strategies/params.py): the listing the HTTP layer can serve.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest
from ..models import shown
from . import params
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


def describe() -> dict[str, dict[str, Any]]:
    """Every search type: its description, whether it searches as of a time, and its
    params (name, kind, default or default_rule, range or choices, description)."""
    types: dict[str, dict[str, Any]] = {
        name: {"description": s.description, "as_of": s.versioned,
               "params": [p.describe() for p in s.params]} for name, s in REGISTRY.items()}
    for name, table in params.FUSED.items():
        types[name] = {"description": params.DESCRIPTIONS[name], "as_of": True,
                       "params": [p.describe() for p in table.values()]}
    types["history"] = {
        "description": params.DESCRIPTIONS["history"], "as_of": True,
        "params": [p.describe() for p in (*params.PAGING, params.STRATEGY)],
        "params_of": "the chosen strategy's params, as for that type"}
    return {"types": types, "aliases": dict(ALIASES)}


def get(name: str) -> Strategy:
    key = ALIASES.get(name, name)
    strategy = REGISTRY.get(key)
    if strategy is None:
        known = ", ".join(sorted([*REGISTRY, *ALIASES, "hybrid", "auto", "history"]))
        raise InvalidRequest(f"unknown search type {shown(name)}; use one of: {known}",
                             field="type")
    return strategy
