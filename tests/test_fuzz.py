"""Hypothesis over the search request and the filter language: whatever a reader sends,
the engine (in process) and the HTTP API answer a hit list or one of the error
table's refusals — never an internal error, never 5xx (save the documented 501
``not_enabled``) — and never a marker of a document the reader may not see: a
secret one of its own tenant, or any of another tenant's pipeline of the same name.

Requests are drawn from the strategy registry's own description (every type and
each of its parameters, with values of the right kind and of every other kind),
the filter language's operators (nested and/or/not, dotted keys, injected key
names and values), crafted classifications, times, cursors and unknown fields.
The numbers of examples are bounded so the file runs in well under a minute on
an idle machine.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pgbraid import strategies as registry
from pgbraid.errors import NotEnabled, PgbraidError, describe
from pgbraid.scope import OPERATORS, Principal

from .serving import served, tenant_client  # noqa: F401  (fixture)

SECRET = f"sx{uuid.uuid4().hex[:12]}"
OTHER = f"ot{uuid.uuid4().hex[:12]}"
IN_PROCESS_EXAMPLES = 150
HTTP_EXAMPLES = 40
DOCS = [{"id": f"d{i}", "title": f"Pump {i}", "text": f"centrifugal pump {i} maintenance guide",
         "metadata": {"n": i, "tag": ["a", "b"][i % 2], "nested": {"depth": i}}}
        for i in range(4)]


def _secret(marker: str) -> list[dict[str, Any]]:
    return [{"id": "d1", "title": f"Pump {marker}", "classification": ["secret"],
             "text": f"centrifugal pump {marker} maintenance guide",
             "metadata": {"n": 1, "tag": marker, "nested": {"depth": marker}}},
            {"id": f"s-{marker}", "title": marker, "text": f"pump maintenance {marker}",
             "classification": ["secret"], "metadata": {marker: 1}}]


@pytest.fixture(scope="module")
def fuzzed(data_dir, server):
    """A reader of tenant A holding ``public``; A's secret and B's pipeline of the same name."""
    with tenant_client(data_dir) as a, tenant_client(data_dir) as b:
        for client, extra in ((a, _secret(SECRET)), (b, DOCS + _secret(OTHER))):
            client.define_classification("secret", ["internal"])
            client.create_pipeline("fuzz", embedder="none")
            client.ingest("fuzz", (DOCS if client is a else []) + extra)
            client.load_graph_records("fuzz", [("org", "o1", "Pump maker", ["d0"]),
                                               ("org", "o2", "Pump user", ["d1"])],
                                      [("org", "o1", "supplies", "org", "o2")])
        principal = Principal(a.tenant, {"fuzz": frozenset({"read", "execute"})}, ("public",))
        key = a.create_key(pipeline="fuzz", permissions="read,execute", classification="public")
        yield a.acting_as(principal), key["key"]


# -- requests -------------------------------------------------------------------------

NASTY = ["' OR '1'='1", "'; DROP TABLE pgbraid.fragments; --", "$.** ? (@ == 1)", "\\", "%",
         "*", "\x00", "\ud800", "a" * 300, "🦀", "NaN", "-1", "1e309", "", " ", "@", "$"]
texts = st.one_of(st.sampled_from(NASTY + ["pump", "maintenance guide", "Pump maker", "d1"]),
                  st.text(max_size=40))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), texts)
keys = st.one_of(st.sampled_from(["n", "tag", "nested.depth", "a.b", "tenant_id", "$", ""]),
                 texts)


def _leaf(value: st.SearchStrategy) -> st.SearchStrategy:
    operators = st.sampled_from([*OPERATORS, "like_regex", "eq ", "$gt"])
    operand = st.one_of(value, st.lists(value, max_size=4))
    return st.one_of(value, st.dictionaries(operators, operand, min_size=1, max_size=2))


filters = st.recursive(
    st.dictionaries(keys, _leaf(scalars), min_size=1, max_size=3),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"and": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"or": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"not": inner}),
        st.dictionaries(keys, inner, min_size=1, max_size=2)),
    max_leaves=8)


def _param_value(kind: str) -> st.SearchStrategy:
    right = {"integer": st.integers(-5, 1100), "number": st.floats(-2, 1200),
             "boolean": st.booleans()}.get(kind, texts)
    return st.one_of(right, scalars, st.lists(scalars, max_size=2))


def _params() -> st.SearchStrategy:
    described = {p["name"]: p["kind"] for t in registry.describe()["types"].values()
                 for p in t["params"]}
    known = st.sampled_from(sorted(described)).flatmap(
        lambda name: st.tuples(st.just(name), _param_value(described[name])))
    unknown = st.tuples(texts, scalars)
    return st.lists(st.one_of(known, known, unknown), max_size=4).map(dict)


TYPES = [*registry.describe()["types"], "hybrid", "auto", "history", "search", "vector",
         "' OR 1=1", "FULLTEXT"]
bodies = st.fixed_dictionaries(
    {"query": st.one_of(texts, scalars)},
    optional={"type": st.sampled_from(TYPES), "params": st.one_of(_params(), scalars),
              "filters": st.one_of(filters, scalars),
              "classification": st.one_of(
                  st.lists(st.sampled_from(["public", "secret", "internal", "*", "' OR 1=1",
                                            "PUBLIC", ""]), max_size=3),
                  scalars),
              "distance_strategy": st.one_of(st.sampled_from(
                  ["cosine", "l2", "inner_product", "l1", "hamming"]), texts),
              "group_by": st.one_of(st.sampled_from(["fragment", "document"]), texts),
              "as_of": st.one_of(st.sampled_from(["2100-01-01", "1900-01-01T00:00:00Z",
                                                  "yesterday", "2024-02-30"]), scalars),
              "cursor": st.one_of(texts, scalars),
              "tenant": st.just("someone-else"), "pipeline_id": st.integers(1, 10)})


# Mostly well-formed requests, so that most examples reach the strategies' SQL.
good_values = st.one_of(st.integers(-3, 6), st.sampled_from(["a", "b", "pump", "' OR 1=1"]))
good_leaf = st.one_of(
    good_values,
    st.fixed_dictionaries({}, optional={op: good_values for op in ("eq", "ne", "gt", "gte",
                                                                   "lt", "lte")}),
    st.fixed_dictionaries({"in": st.lists(good_values, max_size=3)}),
    st.fixed_dictionaries({"nin": st.lists(good_values, max_size=3)}),
    st.fixed_dictionaries({"exists": st.booleans()}))
good_filters = st.recursive(
    st.dictionaries(st.sampled_from(["n", "tag", "nested.depth", "missing"]), good_leaf,
                    min_size=1, max_size=2),
    lambda inner: st.one_of(st.fixed_dictionaries({"and": st.lists(inner, min_size=1,
                                                                    max_size=2)}),
                            st.fixed_dictionaries({"or": st.lists(inner, min_size=1,
                                                                  max_size=2)}),
                            st.fixed_dictionaries({"not": inner})),
    max_leaves=4)
good_params = st.fixed_dictionaries({}, optional={
    "k": st.integers(0, 20), "offset": st.integers(0, 3), "highlight": st.booleans()})
good_bodies = st.fixed_dictionaries(
    {"query": st.sampled_from(["pump", "maintenance guide", "Pump maker", "centrifugal",
                               "pump OR 1=1", "' OR '1'='1", "d1", "guide -pump"])},
    optional={"type": st.sampled_from([*registry.describe()["types"], "hybrid", "auto"]),
              "params": good_params, "filters": good_filters,
              "classification": st.lists(st.sampled_from(["public", "secret", "internal"]),
                                         min_size=1, max_size=2, unique=True),
              "group_by": st.sampled_from(["fragment", "document"]),
              "as_of": st.sampled_from(["2100-01-01T00:00:00Z", "2000-01-01T00:00:00Z"])})
requests = st.one_of(good_bodies, good_bodies, bodies)


def _no_leak(text: str) -> None:
    assert SECRET not in text and OTHER not in text, text[:500]


COMMON = dict(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])


@settings(max_examples=IN_PROCESS_EXAMPLES, **COMMON)
@given(body=requests)
def test_the_engine_answers_or_refuses_and_never_leaks(fuzzed, body):
    reader, _ = fuzzed
    try:
        response = reader.search("fuzz", **body)
    except NotEnabled as exc:
        event("refused: not_enabled")
        _no_leak(json.dumps(describe(exc).body(), default=str))
        return
    except PgbraidError as exc:
        described = describe(exc)
        event(f"refused: {described.code}")
        assert described.status < 500, described
        _no_leak(json.dumps(described.body(), default=str))
        return
    event("answered with hits" if response.hits else "answered, no hit")
    _no_leak(response.model_dump_json())
    assert all("secret" not in hit.classifications for hit in response.hits)


@pytest.fixture(scope="module")
def http(fuzzed, served):
    _, key = fuzzed
    with served.client(key) as client:
        yield client


@settings(max_examples=HTTP_EXAMPLES, **COMMON)
@given(body=requests, route=st.sampled_from(["search", "retrieve"]))
def test_the_http_api_answers_below_500_and_never_leaks(http: httpx.Client, body, route):
    try:
        content = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return
    response = http.post(f"/pipelines/fuzz/{route}", content=content,
                         headers={"content-type": "application/json"})
    event(f"status {response.status_code}")
    if response.status_code >= 500:
        assert response.status_code == 501 and response.json()["error"]["code"] == \
            "not_enabled", response.text[:300]
    _no_leak(response.text)
