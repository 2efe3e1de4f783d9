"""The params registry walked: every param declared, documented, checked, defaulted.

Each search type's params come from one declaration (strategies/params.py,
``Strategy.params``); ``strategies.describe()`` lists them. This module fails
when a declared param is missing from README's table, when a wrong value of
any param is not refused by name, when an unknown name is not refused, and
when a search with every documented default given explicitly differs from the
same search with the params left out.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

import pgbraid
from pgbraid import InvalidRequest, fusion, strategies
from pgbraid.strategies import params as declared

README = Path(__file__).resolve().parents[1] / "README.md"
NOWHERE = "no-such-pipeline"  # parameters are refused before any pipeline is looked up
TYPES = list(strategies.describe()["types"])
BAD = {"integer": "7", "number": "x", "boolean": "yes", "choice": "nope", "string": 5,
       "key": [1], "vector": "v", "strings": 5, "strategies": "bm25", "map": 5, "depth": "deep"}


def rows() -> list[tuple[str, dict]]:
    return [(name, p) for name, t in strategies.describe()["types"].items() for p in t["params"]]


def readme_rows() -> list[str]:
    """README's parameter table as it must read: one row per param, listing the types that
    declare it alike ("every type" for k and offset)."""
    types: dict[str, list[str]] = {}
    for type_, p in rows():
        default = p.get("default_rule") or (
            "none" if p["default"] is None else json.dumps(p["default"]))
        low_high = p.get("range")
        allowed = (" \\| ".join(p["choices"]) if "choices" in p else
                   f"{_n(low_high[0])}..{_n(low_high[1])}" if low_high else "")
        rest = f"`{p['name']}` | {p['kind']} | {default} | {allowed} | {p['description']} |"
        types.setdefault(rest, []).append(type_)
    return [f"| {'every type' if len(names) == len(TYPES) else ', '.join(names)} | {rest}"
            for rest, names in types.items()]


def _n(value) -> str:
    return "" if value is None else f"{value:g}"


def body(type_: str, params: dict) -> dict:
    extra = {"as_of": "2030-01-01T00:00:00Z"} if type_ == "history" else {}
    return {"query": "reactor", "type": type_, "params": params, **extra}


def test_every_param_is_in_readme():
    text = README.read_text(encoding="utf-8")
    missing = [row for row in readme_rows() if row not in text]
    assert not missing, "README's parameter table lacks (or differs on):\n" + "\n".join(missing)
    assert "strategies.describe()" in text
    assert "history" in TYPES and {"hybrid", "auto"} <= set(TYPES)


@pytest.mark.parametrize("type_,param", [(t, p["name"]) for t, p in rows()])
def test_a_wrong_value_is_refused_by_name(client, type_, param):
    kind = next(p for t, p in rows() if t == type_ and p["name"] == param)
    with pytest.raises(InvalidRequest) as refused:
        client.search(NOWHERE, **body(type_, {param: BAD[kind["kind"]]}))
    assert param.rstrip("s") in refused.value.message, refused.value.message
    for edge in _out_of_range(kind):
        with pytest.raises(InvalidRequest, match=param):
            client.search(NOWHERE, **body(type_, {param: edge}))


def _out_of_range(p: dict) -> list:
    if p["kind"] not in ("integer", "number"):
        return []
    low, high = p.get("range") or (None, None)
    edges = [True, math.nan, math.inf, -math.inf] if p["kind"] == "number" else [True, 1.5]
    edges += [low - 1] if low is not None else []
    return edges + ([high + 1] if high is not None else [])


@pytest.mark.parametrize("type_", TYPES)
def test_an_unknown_param_is_refused_naming_it_and_the_allowed(client, type_):
    with pytest.raises(InvalidRequest) as refused:
        client.search(NOWHERE, **body(type_, {"treshold": 0.5, "k": 3}))
    message = refused.value.message
    assert "unknown parameter treshold" in message
    allowed = [p["name"] for t, p in rows() if t == type_]
    assert all(name in message.split("allowed:")[1] for name in allowed)
    assert refused.value.details["unknown"] == ["treshold"]


def test_misspellings_of_the_seed_are_refused(client):
    for type_, params in [("mmr", {"lamda_mult": 0.9}), ("similarity", {"treshold": 0.2}),
                          ("fuzzy", {"threshhold": 0.2}), ("bm25", {"K1": 1.2}),
                          ("hybrid", {"rrfk": 10}), ("auto", {"strategies": ["bm25"]}),
                          ("history", {"stratgy": "bm25"})]:
        with pytest.raises(InvalidRequest, match="unknown parameter"):
            client.search(NOWHERE, **body(type_, params))


@pytest.mark.parametrize("type_", ["hybrid", "auto"])
def test_leg_params_are_checked_against_their_strategy(client, type_):
    for leg_params, complaint in [
            ({"bm25": {"treshold": 1}}, "unknown parameter treshold in params.leg_params.bm25"),
            ({"bm25": {"k1": math.nan}}, "params.leg_params.bm25.k1"),
            ({"similarity": {"k": 3}}, "unknown parameter k "),
            ({"fuzzy": {"offset": 3}}, "unknown parameter offset "),
            ({"mmr": {}}, "not a strategy this plan may run"),
            ({"bm25": 3}, "must be an object")]:
        with pytest.raises(InvalidRequest, match=complaint):
            client.search(NOWHERE, **body(type_, {"leg_params": leg_params}))
    with pytest.raises(InvalidRequest, match="not a strategy this plan may run"):
        client.search(NOWHERE, **body(type_, {"weights": {"mmr": 1}}))


def test_hybrid_maps_name_only_its_legs(client):
    legs = {"strategies": ["bm25", "fulltext"]}
    for other in ({"weights": {"similarity": 2}}, {"depth": {"fuzzy": 10}},
                  {"leg_params": {"similarity": {"threshold": 0.3}}}):
        with pytest.raises(InvalidRequest, match="may run: bm25, fulltext"):
            client.search(NOWHERE, **body("hybrid", {**legs, **other}))


def test_fusion_choices_are_fusions_methods():
    assert declared.FUSED["hybrid"]["fusion"].choices == fusion.METHODS


# -- defaults: what README says is what runs ----------------------------------------

# Defaults given as rules, as values for these requests (k = 5, offset 0).
RULES = {("mmr", "fetch_k"): 10, ("hybrid", "depth"): 50, ("auto", "depth"): 50,
         ("graph", "direction"): "out", ("graph", "max_fanout"): 1_000,
         ("hybrid", "strategies"): ["bm25", "similarity"], ("similarity", "embedder"): "minilm",
         ("mmr", "embedder"): "minilm", ("hybrid", "weights"): {}, ("auto", "weights"): {},
         ("hybrid", "leg_params"): {}, ("auto", "leg_params"): {}}
REQUESTS = {"graph": {"query": "APT29"}, "history": {"as_of": "2100-01-01T00:00:00Z"}}


@pytest.fixture(scope="module")
def reactor(data_dir, server):
    name = f"pd-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.create_pipeline(name)
        admin.ingest(name, [{"id": f"r{i}", "text": f"reactor {'core ' * i}maintenance log {i}"}
                            for i in range(12)] + [{"id": "apt", "text": "APT29 notes"}])
        admin.load_graph_records(name, [("group", "G1", "APT29", ["apt"]),
                                        ("group", "G2", "Cozy", ["r1"]),
                                        ("technique", "T1", "Phishing", [])],
                                 [("group", "G1", "uses", "technique", "T1"),
                                  ("group", "G2", "uses", "technique", "T1")])
    return name


def explicit_defaults(type_: str) -> dict:
    given = {}
    for t, p in rows():
        if t != type_ or p["name"] in ("k", "offset"):
            continue
        if (t, p["name"]) in RULES:
            given[p["name"]] = RULES[(t, p["name"])]
        elif p["default"] is not None:
            given[p["name"]] = p["default"]
    return given


def answer(client, pipeline, request) -> dict:
    seen = client.search(pipeline, **request).model_dump(mode="json")
    for entry in seen["trace"]["retrievers"]:
        entry.pop("ms")
        entry["details"].pop("embed_ms", None)
    seen["trace"].pop("ms")
    if seen["trace"]["fusion"]:  # "default mix" or "as requested": the same legs either way
        seen["trace"]["fusion"]["plan"].pop("reasons")
    return seen


@pytest.mark.parametrize("type_", TYPES)
def test_omitted_params_take_their_documented_defaults(client, reactor, type_):
    base = {"query": "reactor core maintenance", "type": type_, **REQUESTS.get(type_, {})}
    given = explicit_defaults(type_)
    omitted = answer(client, reactor, {**base, "params": {"k": 5}})
    stated = answer(client, reactor, {**base, "params": {"k": 5, **given}})
    assert stated["hits"] == omitted["hits"]
    assert stated["trace"] == omitted["trace"]
    if type_ != "relational":
        assert omitted["hits"], type_  # an omitted param never silently empties the answer
    assert answer(client, reactor, {**base})["hits"] == omitted["hits"]  # k's default is 5


def test_a_misspelled_request_field_is_refused_by_name(client):
    for field in ("as_off", "cursr", "clasification", "filter"):
        with pytest.raises(InvalidRequest, match=field):
            client.search(NOWHERE, **{"query": "reactor", "type": "bm25", field: "x"})
