"""Plans: which strategies a search runs, with what weights and depths.

Every search is a plan: a single strategy is a plan of one leg; ``hybrid``
runs ``params.strategies`` (default bm25 + similarity, plus fuzzy when the
query looks like a name); ``auto`` lets the query's shape choose. The engine
runs every plan the same way (one snapshot, one trace).

The auto planner, from the query's shape to a mix of strategies and weights:

- exact identifiers (CVE/CWE/GHSA ids, ATT&CK ids, hashes, IPs, domains, file
  paths, code identifiers, quoted phrases) weigh lexical strategies, add an
  exact ``fulltext`` leg over the identifiers, and promote hits that contain
  them verbatim;
- natural-language questions, and long queries (six words or more), weigh
  ``similarity``;
- short capitalised names add ``fuzzy`` (a query holding an identifier, or dotted
  code such as ``Vector2.normalized``, is not a name); when bm25 then finds a query word
  nowhere in scope (df 0: a likely misspelling), other short queries get a
  fuzzy leg after the others (``follow_up``) and fuzzy's ranking leads the
  fused list (``leader``);
- a known entity name adds ``graph`` when the pipeline has a graph;
- a query without a letter or a digit ("!!! ???") has no words to search: it is
  planned as keywords, and every leg answers nothing and says why.
The plan and the reasons are reported in the trace.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from . import strategies
from .errors import InvalidRequest
from .models import SearchRequest, number, printable
from .strategies import params
from .strategies.base import NO_WORDS, Context, has_words

FUSED = ("hybrid", "auto")
HISTORY = "history"
PLANNABLE = {"hybrid": ("bm25", "similarity", "fuzzy"),
             "auto": ("fulltext", "bm25", "similarity", "fuzzy", "graph")}
"""What a plan without params.strategies may run."""
DEFAULT_DEPTH = 50
MAX_DEPTH = 1000

IDENTIFIERS = {
    "cve": re.compile(r"\bCVE-\d{4}-\d{4,7}\b", re.I),
    "cwe": re.compile(r"\bCWE-\d{1,5}\b", re.I),
    "advisory": re.compile(r"\b(?:GHSA(?:-[23456789cfghjmpqrvwx]{4}){3}|[A-Z]{2,5}SA-\d{4}:\d+)\b", re.I),
    "attack": re.compile(r"\b[TGS]\d{4}(?:\.\d{3})?\b"),
    "hash": re.compile(r"\b(?:[a-fA-F0-9]{64}|[a-fA-F0-9]{40}|[a-fA-F0-9]{32})\b"),
    "ip": re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"),
    # A dotted run of labels, matched once from its first label (possessive: no
    # backtracking; the lookbehind: no restart inside a run), so linear in the query;
    # it is a domain up to its last label that is a known top-level domain (_domains).
    "domain": re.compile(r"(?<![\w.\]-])[a-z0-9-]++(?:(?:\[\.\]|\.)[a-z0-9-]++)++(?!\w)", re.I),
    "path": re.compile(r"(?:(?<=\s)|^)(?:/[\w.-]+){2,}|\b[A-Za-z]:\\[\w\\. -]+"),
    # snake_case and calls: shapes only code has
    "code": re.compile(r"\b[a-z]+_[a-z0-9_]+\b|\b\w+\.\w+\(\)|\b\w+\(\)"),
    # camelCase, PascalCase with a digit (AnimatedSprite2D, not PowerShell): code, but
    # also gene and product names (miRNA, iPSC, FoxO3a, iPhone)
    "mixed-case": re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b|\b[A-Z][a-z]+[A-Z][A-Za-z]*\d\w*\b"),
    "quoted": re.compile(r"\"([^\"]{2,200})\""),
}
# Kinds that weigh the lexical legs but are not promoted above every other hit:
# measured on SciFact, promoting claims' gene names (miRNA, iPSC, clpC; 24 of 300
# queries) cost hybrid 0.013 nDCG@10, while a CVE id or a hash has one meaning.
NOT_PROMOTED = {"mixed-case"}
QUESTION = re.compile(r"^(?:who|what|when|where|why|which|how|is|are|can|could|does|do|should|"
                      r"would|will|did)\b", re.I)
NAME = re.compile(r"^(?:[A-Z][\w&.,'-]*)(?:\s+(?:[A-Z][\w&.,'-]*|&|and|of|de|the)){0,5}$")
DOTTED = re.compile(r"(?<!\w)\w{2,}+\.[a-z_]\w*")
"""Code's member access (Vector2.normalized, Node.js, os.path): a dot between a word of
two characters or more and a lower-case one; names have initials (J.P. Morgan) or a
capital after their dot (Dr.Reddy's). Possessive and anchored at a word's start: linear."""
LONG_QUERY_WORDS = 6


@dataclass(frozen=True)
class Leg:
    strategy: str
    weight: float = 1.0
    query: str | None = None
    """A query of its own (the exact-identifier leg), else the request's."""


@dataclass
class Plan:
    legs: list[Leg]
    reasons: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    fused: bool = True
    """False for a single strategy: its rows are the answer, its errors the caller's."""

    def as_dict(self) -> dict:
        return {"legs": [{"strategy": l.strategy, "weight": l.weight,
                          **({"query": l.query} if l.query else {})} for l in self.legs],
                "reasons": self.reasons, "identifiers": self.identifiers}


TLDS = frozenset("com net org io ru cn info biz xyz top gov edu de uk fr jp kr in br co me app "
                 "dev online site".split())
_LABEL_SEPARATOR = re.compile(r"\[\.\]|\.")


def _domains(run: re.Match[str]) -> Iterator[tuple[int, int, str]]:
    """The domain in a dotted run of labels: up to its last known top-level domain."""
    text, cut = run.group(0), None
    separators = list(_LABEL_SEPARATOR.finditer(text))
    ends = [s.start() for s in separators] + [len(text)]
    for n in range(len(separators), 0, -1):  # label n starts after separator n-1
        if text[separators[n - 1].end():ends[n]].lower() in TLDS:
            cut = ends[n]
            break
    if cut is not None:
        yield run.start(), run.start() + cut, text[:cut]


def _matches(kind: str, pattern: re.Pattern[str], query: str) -> Iterator[tuple[int, int, str]]:
    for match in pattern.finditer(query):
        if kind == "domain":
            yield from _domains(match)
        else:
            text = match.group(1) if kind == "quoted" else match.group(0)
            yield match.start(), match.end(), text


def identifiers(query: str) -> list[tuple[str, str]]:
    """(kind, text) of every exact identifier in the query, in query order, no overlaps
    (a kind listed earlier in IDENTIFIERS wins).

    Linear in the query (every pattern is; tests/test_redos.py holds each to a time
    budget on crafted 10,000-character queries), and computed once per query: the
    planner asks for a request's identifiers up to three times (validation, the plan,
    the plan once the graph is known)."""
    return list(_identifiers(query))


@functools.lru_cache(maxsize=64)
def _identifiers(query: str) -> tuple[tuple[str, str], ...]:
    starts: list[int] = []  # of the spans taken so far, sorted (they never overlap)
    spans: dict[int, tuple[int, str, str]] = {}
    for kind, pattern in IDENTIFIERS.items():
        for start, end, text in _matches(kind, pattern, query):
            at = bisect.bisect_right(starts, start)
            if at and spans[starts[at - 1]][0] > start:
                continue  # overlaps the span before it
            if at < len(starts) and starts[at] < end:
                continue  # overlaps the span after it
            starts.insert(at, start)
            spans[start] = (end, kind, text.replace("[.]", "."))
    return tuple((spans[s][1], spans[s][2]) for s in starts)


def promotable(found: list[tuple[str, str]]) -> list[str]:
    """The identifiers whose verbatim holders go first in a fused list."""
    return [text for kind, text in found if kind not in NOT_PROMOTED]


def looks_like_name(query: str) -> bool:
    """Up to six capitalised words, not a question, and no identifier: a CVE or ATT&CK
    id, a hash, a domain or dotted code is looked up as written, not misspelled, and a
    fuzzy leg over it, widened, was hybrid's slowest leg for nothing (mixed-case words
    still count: eBay, iPhone)."""
    words = query.split()
    return (1 <= len(words) <= 6 and bool(NAME.match(query.strip()))
            and not query.strip().endswith("?") and not promotable(identifiers(query))
            and not DOTTED.search(query))


def is_question(query: str) -> bool:
    """A question word first, or a question mark last, in a query that has words."""
    stripped = query.strip()
    return has_words(query) and (bool(QUESTION.match(stripped)) or stripped.endswith("?"))


def plan(query: str, *, graph: bool = False) -> Plan:
    # Mixed-case names alone (miRNA, iPhone) plan like words: an exact-phrase
    # fulltext leg weighing most ranked SciFact claims by a gene name (measured).
    found = identifiers(query)
    if not promotable(found):
        found = []
    words = re.findall(r"[^\W\d_]{2,}", query)
    if found:
        exact = [text for kind, text in found]
        rest = query
        for text in exact:
            rest = rest.replace(text, " ")
        only_identifiers = len(re.findall(r"[^\W\d_]{3,}", rest)) == 0
        legs = [Leg("fulltext", 2.0, " OR ".join(f'"{t}"' for t in exact))]
        if not only_identifiers:
            legs.append(Leg("bm25", 1.5))
        legs.append(Leg("similarity", 0.5))
        kinds = sorted({kind for kind, _ in found})
        return Plan(legs, [f"exact identifiers ({', '.join(kinds)}): lexical legs weigh most, "
                           "hits holding them verbatim come first"], promotable(found))
    if is_question(query) or len(words) >= LONG_QUERY_WORDS:
        shape = ("natural-language question" if is_question(query)
                 else f"a long query ({LONG_QUERY_WORDS} words or more)")
        return Plan([Leg("bm25", 1.0), Leg("similarity", 1.5)],
                    [f"{shape}: semantic leg weighs most"])
    legs = [Leg("bm25", 1.0), Leg("similarity", 1.0)]
    reasons = ["keywords: lexical and semantic legs weigh the same"]
    if not has_words(query):
        reasons = [f"{NO_WORDS}: every leg finds nothing"]
    if looks_like_name(query):
        legs.append(Leg("fuzzy", 1.0))
        reasons.append("looks like a name: fuzzy catches misspellings")
        if graph:
            legs.append(Leg("graph", 1.0))
            reasons.append("a graph exists: graph finds the entity's relationships")
    return Plan(legs, reasons)


def follow_up(request: SearchRequest, chosen: Plan, missing: list[str]) -> Leg | None:
    """A fuzzy leg for auto's short query that its legs showed to be misspelled.

    Query words that bm25 found in no fragment in scope (``missing``; its df is
    scoped) are likely misspelled. A short query without a fuzzy leg (not
    capitalised: "pulbic storage") gets one then, run after the others in the
    same snapshot; every other query pays nothing for it (fuzzy rechecks whole
    texts, slow on long fragments).
    """
    words = request.query.split()
    if (request.type != "auto" or not missing or request.params.get("strategies")
            or any(leg.strategy == "fuzzy" for leg in chosen.legs)
            or not any(leg.strategy == "bm25" for leg in chosen.legs)
            or not 1 <= len(words) <= 6 or is_question(request.query)):
        return None
    leg = Leg("fuzzy", 1.0)
    chosen.legs.append(leg)
    chosen.reasons.append("a short query with words found in no fragment in scope: "
                          "a fuzzy leg ran after the others")
    return leg


def leader(request: SearchRequest, chosen: Plan, missing: list[str]) -> str | None:
    """The leg whose ranking leads auto's fused list once its legs ran, or None.

    Query words that bm25 found in no fragment in scope (``missing``; its df is
    scoped) are likely misspelled: then fuzzy's ranking leads and the other legs
    break no ties above it, they fill the list below. Weights in the request
    turn this off. Measured on the bench's company names (bench fuzzy): with a
    typo in each of two words, RRF with fuzzy weighing even 4 ranked the right
    name first in 0.89 of cases (a second fuzzy hit found by another leg too
    outranks fuzzy's first), fuzzy alone in 0.99.
    """
    legs = {leg.strategy for leg in chosen.legs}
    if (request.type != "auto" or not missing or not {"fuzzy", "bm25"} <= legs
            or request.params.get("weights")):
        return None
    chosen.reasons.append(f"words found in no fragment in scope ({', '.join(missing)}): likely "
                          "misspelled, so fuzzy's ranking leads and the other legs follow")
    return "fuzzy"


# -- plans for requests ---------------------------------------------------------

def validate(request: SearchRequest, context: Context) -> None:
    """Everything about the plan that needs no database: names, params, gates."""
    if request.type == HISTORY:
        _validate_history(request, context)
    elif request.type not in FUSED:
        strategy = strategies.get(request.type)
        params.check(request.params, strategy.declared, strategy.name)
        strategy.validate(request, context)
    else:
        params.check(request.params, params.FUSED[request.type], request.type)
        _check_maps(request, _leg_names(request))
        for leg in for_request(request).legs:
            strategies.get(leg.strategy).validate(leg_request(request, leg), context)


def _validate_history(request: SearchRequest, context: Context) -> None:
    if request.as_of is None:
        raise InvalidRequest("type history searches the versions valid at a time: give as_of",
                             field="as_of")
    inner = single_request(request)
    strategy = strategies.get(inner.type)
    params.check(request.params, {**strategy.declared, "strategy": params.STRATEGY},
                 f"history ({strategy.name})")
    strategy.validate(inner, context)


def _leg_names(request: SearchRequest) -> tuple[str, ...]:
    """The strategies a fused plan may run: what weights, depth and leg_params may name."""
    names = request.params.get("strategies")
    if names is None:
        return PLANNABLE[request.type]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise InvalidRequest("params.strategies must be a non-empty list of strategy names",
                             field="strategies")
    for name in names:
        if name in FUSED or name == HISTORY:
            raise InvalidRequest(f"{name!r} cannot be a leg of a fused search", field="strategies")
        strategies.get(name)
    return tuple(names)


def _check_maps(request: SearchRequest, legs: tuple[str, ...]) -> None:
    """weights, depth and leg_params name legs of the plan; each leg's params are its
    strategy's own (k, offset and highlight belong to the whole plan)."""
    given = request.params
    weights = _leg_map(given.get("weights"), legs, "weights", "numbers >= 0")
    for name in weights:
        number(weights, name, None, 0, label=f"params.weights.{name}")
    depth = given.get("depth")
    if isinstance(depth, dict):  # per strategy
        for name in _leg_map(depth, legs, "depth", "integers"):
            number(depth, name, None, 1, MAX_DEPTH, integer=True, label=f"params.depth.{name}")
    else:
        number(given, "depth", None, 1, MAX_DEPTH, integer=True)
    for name, own in _leg_map(given.get("leg_params"), legs, "leg_params", "objects").items():
        if not isinstance(own, dict):
            raise InvalidRequest(f"params.leg_params.{name} must be an object", field="leg_params")
        table = {n: p for n, p in strategies.get(name).declared.items()
                 if n not in params.FUSED_ONLY}
        params.check(own, table, name, label=f"params.leg_params.{name}")


def _leg_map(value: Any, legs: tuple[str, ...], what: str, holding: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest(f"params.{what} must map strategy names to {holding}", field=what)
    unknown = [printable(str(name), 40) for name in value if name not in legs]
    if unknown:
        raise InvalidRequest(f"params.{what} names {', '.join(unknown)}, not a strategy this plan "
                             f"may run; it may run: {', '.join(legs)}", field=what)
    return value


def single_request(request: SearchRequest) -> SearchRequest:
    """The request a single-strategy plan runs (history: its strategy, as of the time)."""
    if request.type != HISTORY:
        return request
    strategy = params.STRATEGY.value(request.params)
    return request.model_copy(update={
        "type": strategy, "params": {n: v for n, v in request.params.items() if n != "strategy"}})


def for_request(request: SearchRequest, *, graph: bool = False) -> Plan:
    """The plan of a (validated) request; ``graph``: the pipeline has edges."""
    if request.type not in FUSED:
        return Plan([Leg(strategies.get(single_request(request).type).name)], fused=False)
    if request.type == "auto":
        chosen = plan(request.query, graph=graph and request.as_of is None)
        if graph and request.as_of is not None and looks_like_name(request.query):
            chosen.reasons.append("as_of: no graph leg (the graph is not versioned)")
        return chosen
    names = request.params.get("strategies")
    reasons = ["strategies as requested"]
    if names is None:
        names = ["bm25", "similarity"]
        reasons = ["default mix: bm25 + similarity"]
        if not has_words(request.query):
            reasons.append(f"{NO_WORDS}: every leg finds nothing")
        if looks_like_name(request.query):
            names.append("fuzzy")
            reasons.append("looks like a name: fuzzy added")
    return Plan([Leg(n) for n in names], reasons, promotable(identifiers(request.query)))


def weights(request: SearchRequest, chosen: Plan) -> dict[str, float]:
    found = {leg.strategy: leg.weight for leg in chosen.legs}
    found.update(request.params.get("weights") or {})
    return found


def _depths(request: SearchRequest) -> dict[str, int]:
    depth = request.params.get("depth", max(DEFAULT_DEPTH, request.k))
    values = depth if isinstance(depth, dict) else {"*": depth}
    for value in values.values():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEPTH:
            raise InvalidRequest(f"params.depth must be an integer from 1 to {MAX_DEPTH} "
                                 "(or a map of them per strategy)", field="depth")
    return values


def depth(request: SearchRequest, strategy: str) -> int:
    """How many candidates a fused plan's leg fetches."""
    values = _depths(request)
    return values.get(strategy, values.get("*", max(DEFAULT_DEPTH, request.k)))


def leg_request(request: SearchRequest, leg: Leg, k: int | None = None) -> SearchRequest:
    """The request a fused plan's leg runs: its own query and params, k candidates."""
    extra = (request.params.get("leg_params") or {}).get(leg.strategy, {})
    return request.model_copy(update={
        "type": leg.strategy, "query": leg.query or request.query,
        "params": {**extra, "k": k if k is not None else depth(request, leg.strategy)},
        "group_by": "fragment"})
