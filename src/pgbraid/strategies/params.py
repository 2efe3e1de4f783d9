"""Search parameters: every type declares its own, in one place.

As Datasette keeps each filter operator in a registry by key, each strategy
declares its params (``Strategy.params``) and the plans theirs (``FUSED``,
``HISTORY`` here): a name, a kind, a default (or, when it depends on another
value, the rule in words), a range or the choices, and one line of
description. ``check`` refuses a param no declaration names, listing the
allowed ones, and any value of the wrong kind or out of range; ``Param.value``
gives the checked value or the documented default, so an omitted param is
never a silent 0 (seed 003's trap). ``strategies.describe()`` lists them all,
and tests/test_params.py walks the list against README and the engine.

This module imports nothing from the strategies, so every one of them (and the
planner) can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InvalidRequest
from ..models import check_text, number, printable, shown

KINDS = ("integer", "number", "boolean", "choice", "string", "key", "vector", "strings",
         "strategies", "map", "depth")
"""What a value may be. The first five are checked here; the others (a seed key,
a vector, lists and maps) by their owner, which knows their shape."""

HISTORY_STRATEGIES = ("bm25", "fulltext", "fuzzy", "similarity", "mmr")
FUSED_ONLY = ("k", "offset", "highlight")
"""Params of the whole fused plan, never of one leg (``leg_params``)."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    """null means the default."""
    rule: str | None = None
    """A default that depends on other values, in words (``default`` is then None)."""

    def value(self, params: Mapping[str, Any], label: str = "params") -> Any:
        """The param's checked value, or its default when absent (or null, if nullable)."""
        where = f"{label}.{self.name}"
        if self.name not in params or (self.nullable and params[self.name] is None):
            return self.default
        raw = params[self.name]
        if self.kind in ("integer", "number"):
            return number(params, self.name, self.default, self.low, self.high,
                          integer=self.kind == "integer", nullable=self.nullable, label=where)
        if self.kind == "boolean" and not isinstance(raw, bool):
            raise InvalidRequest(f"{where} must be true or false, got {shown(raw)}",
                                 field=self.name)
        if self.kind == "choice" and (not isinstance(raw, str) or raw not in self.choices):
            raise InvalidRequest(f"{where} must be one of {', '.join(self.choices)}, got "
                                 f"{shown(raw)}", field=self.name)
        if self.kind == "string":
            if not isinstance(raw, str):
                raise InvalidRequest(f"{where} must be a string, got {shown(raw)}",
                                     field=self.name)
            check_text(raw, where, self.name)
        return raw

    def describe(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "kind": self.kind, "default": self.default,
                                 "description": self.description}
        if self.rule:
            entry["default_rule"] = self.rule
        if self.low is not None or self.high is not None:
            entry["range"] = [self.low, self.high]
        if self.choices:
            entry["choices"] = list(self.choices)
        return entry


def declared(*params: Param) -> dict[str, Param]:
    """Params by name; a name declared twice is a bug."""
    table = {p.name: p for p in params}
    assert len(table) == len(params), "a param is declared twice"
    assert all(p.kind in KINDS for p in params)
    return table


def check(params: Mapping[str, Any], table: Mapping[str, Param], owner: str,
          label: str = "params") -> None:
    """Refuse names ``table`` does not declare (listing the allowed ones), then check
    every declared value."""
    unknown = [printable(str(name), 40) for name in params if name not in table][:5]
    if unknown:
        raise InvalidRequest(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in {label} "
            f"for {owner}; allowed: {', '.join(table) or 'none'}",
            field=unknown[0], unknown=unknown, allowed=list(table))
    for param in table.values():
        param.value(params, label)


# -- declared by every type -------------------------------------------------------

K = Param("k", "integer", 5, "hits to return; 0 returns none. offset + k is at most "
          "PGBRAID_MAX_K (default 1000)", low=0)
OFFSET = Param("offset", "integer", 0, "hits to skip: a page holds hits offset+1 .. offset+k "
               "of the ranking; the response then carries next_cursor", low=0)
HIGHLIGHT = Param("highlight", "boolean", False, "add highlights to each hit: passages of its "
                  "own fragment, HTML-escaped, each matched word in a mark element")
PAGING = (K, OFFSET)

# -- fused plans (planner.py) -----------------------------------------------------

_FUSED_COMMON = (
    Param("weights", "map", None, "a weight (>= 0) per strategy: its share of the fused score",
          rule="1 per leg; auto: the plan's weights"),
    Param("rrf_k", "integer", 60, "reciprocal rank fusion's constant k", low=1, high=10_000),
    Param("fusion", "choice", "rrf", "how legs are fused: rank positions or normalised scores",
          choices=("rrf", "min-max", "z-score")),
    Param("depth", "depth", None, "candidates each leg fetches: an integer, or one per strategy",
          low=1, high=1000, rule="max(50, k)"),
    Param("leg_params", "map", None, "params per leg strategy, checked against that strategy's "
          "own (k, offset and highlight belong to the whole plan)"),
)
FUSED: dict[str, dict[str, Param]] = {
    "hybrid": declared(*PAGING, HIGHLIGHT, Param(
        "strategies", "strategies", None, "the legs: strategy names (not hybrid or auto)",
        rule="bm25 + similarity, plus fuzzy when the query looks like a name"), *_FUSED_COMMON),
    "auto": declared(*PAGING, HIGHLIGHT, *_FUSED_COMMON),
}
DESCRIPTIONS = {
    "hybrid": "runs several strategies at once and fuses their rankings (RRF by default)",
    "auto": "the planner chooses the legs and weights from the query's shape",
    "history": "one strategy over the versions valid at as_of (exact scans)",
}

# -- history: a strategy at a point in time ---------------------------------------

STRATEGY = Param("strategy", "choice", "bm25", "the strategy run over the versions valid at "
                 "as_of", choices=HISTORY_STRATEGIES)
