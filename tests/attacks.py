"""What tenant A's keys send in tests/test_attacker.py: attempts built from the app's
OpenAPI document (every operation, so a new endpoint is attacked the day it is
added), with B's names, names that exist nowhere, injections, crafted
classifications and cursors, and forged ids."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from .test_noninterference import requests as strategy_requests

MARK = f"qz{uuid.uuid4().hex[:12]}"
"""In B's text, titles, metadata keys and values, document id, classification, graph and
source rows: A never sends it, so it can only come back by a leak."""
A_SECRET = f"as{uuid.uuid4().hex[:12]}"
"""In A's own secret documents: never shown to A's ``public`` key."""
B_CLASS = f"b{uuid.uuid4().hex[:10]}"
INJECTIONS = ["' OR '1'='1", "docs'; DROP TABLE pgbraid.fragments; --", '" OR 1=1 --',
              "1 UNION SELECT body FROM pgbraid.fragments", "$.** ? (@ like_regex \".*\")",
              "*", "%", "..", "docs\\", "' OR tenant_id <> '' --"]
GARBAGE = "pgb_" + "A" * 43
FORGED = ("tenant", "tenant_id", "pipeline_id")
TEXT = "reactor maintenance schedule"


@dataclass
class World:
    a_tenant: str
    b_tenant: str
    keys: dict[str, dict[str, str]]
    b_key: dict[str, str]
    b_fragments: list[int]
    b_table: str
    markers: list[str] = field(default_factory=list)


# -- the attempts ----------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Attempt:
    key: str
    method: str
    route: str
    path: str
    params: tuple = ()
    body: Any = None
    tag: str = ""

    @property
    def reads(self) -> bool:
        return self.method == "GET" or self.route.endswith(("/search", "/retrieve", "/ground"))


def _operations(http: httpx.Client) -> list[tuple[str, str, dict]]:
    document = http.get("/openapi.json").json()
    found = []
    for route, operations in document["paths"].items():
        for method, operation in operations.items():
            if route not in ("/healthz", "/readyz"):
                found.append((method.upper(), route, operation))
    return found, document["components"]["schemas"]


def _path_values(world: World, name: str) -> list[tuple[str, str]]:
    """(value, tag) for a path parameter: overlapping names, B's, nowhere's, injections."""
    given = {
        "pipeline": [("docs", "shared"), ("legal", "b-only"), ("nosuch", "nowhere")],
        "document_id": [("doc-1", "shared"), ("doc-s", "shared")],
        "fragment_id": [(str(f), "b-fragment") for f in world.b_fragments[:3]] + [("1e9", "")],
        "name": [("suppliers", "shared"), ("vendors", "b-only"), ("nosuch", "nowhere")],
        "key_id": [(world.b_key["id"], "b-key")],
        "vertex_type": [("org", "shared")],
        "key": [("o1", "shared")],
    }.get(name, [])
    return given + [(value, "injection") for value in INJECTIONS[::2]]


def _base_path(route: str, destructive: bool) -> dict[str, str]:
    """A's own names for a read; B's for a write (A may write its own: that proves nothing)."""
    own = {"pipeline": "docs", "document_id": "doc-1", "name": "suppliers",
           "vertex_type": "org", "key": "o1", "fragment_id": "1"}
    if destructive:
        own.update(pipeline="legal", name="vendors")
    return {n: own.get(n, "x") for n in re.findall(r"{(\w+)(?::path)?}", route)}


def _fill(route: str, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)(?::path)?}", lambda m: quote(values[m.group(1)], safe=""), route)


def _bodies(schema_name: str | None, schemas: dict, world: World) -> list[tuple[Any, str]]:
    """Bodies for an operation: a base, injected values, crafted fields, forged ids."""
    if schema_name is None:
        return [(None, "")]
    if schema_name == "SearchBody":
        return _search_bodies(world)
    bases = {
        "PipelineCreate": {"name": "' OR 1=1 --", "embedder": "none"},
        "DocumentIn": {"id": "doc-1", "text": "overwritten by an attacker"},
        "KeyCreate": {"pipeline": "legal", "permissions": "read"},
        "GraphLoadBody": {"vertices": [{"type": "org", "key": "o1", "label": "x"}]},
        "GroundBody": {"entity": "vendors", "value": "Reactor Supply"},
        "SourceCreate": {"name": "stolen", "table": world.b_table, "key": "id", "text": "name"},
        "SourceSearch": {"query": "Reactor Supply"},
    }
    base = bases.get(schema_name) or {
        name: "x" for name in schemas[schema_name].get("required", [])}
    bodies = [(base, "base")]
    for name, value in base.items():
        if isinstance(value, str):
            bodies += [({**base, name: text}, "injection") for text in INJECTIONS[:4]]
    bodies += [({**base, forged: value}, f"forged:{forged}") for forged in FORGED
               for value in (world.b_tenant,)]
    return bodies


def _search_bodies(world: World) -> list[tuple[dict, str]]:
    bodies = [(request, "strategy") for request in strategy_requests()]
    bodies += [({"query": text, "type": ("fulltext", "bm25", "fuzzy", "hybrid")[n % 4]},
                "injection") for n, text in enumerate(INJECTIONS)]
    filters = [{text: "x"} for text in INJECTIONS[:4]] + [
        {"owner": text} for text in INJECTIONS[:4]] + [
        {"owner": {"in": INJECTIONS[:3]}}, {"n": {"gte": "0 OR 1=1"}},
        {"or": [{"n": 1}, {"not": {"owner": "' OR 1=1"}}]}, {"tenant_id": world.b_tenant},
        {"$.tenant_id": "x"}, {"owner": {"like_regex": ".*"}}]
    bodies += [({"query": TEXT, "type": ("bm25", "similarity", "hybrid")[n % 3], "filters": f},
                "filter") for n, f in enumerate(filters)]
    for n, held in enumerate((["secret"], ["public", "secret"], [B_CLASS], ["' OR 1=1 --"],
                              ["*"], [])):
        bodies += [({"query": TEXT, "type": ("bm25", "hybrid")[n % 2], "classification": held},
                    "classification")]
    bodies += [({"query": TEXT, "cursor": text}, "cursor") for text in INJECTIONS[:3]]
    bodies += [({"query": TEXT, "params": {"k": "10; DROP TABLE x", "fields": "*"}}, "params"),
               ({"query": TEXT, "type": "' OR 1=1 --"}, "type")]
    bodies += [({"query": TEXT, forged: value}, f"forged:{forged}")
               for forged in FORGED for value in (world.b_tenant, 1)]
    return bodies


def _query_values(operation: dict) -> list[tuple[tuple, str]]:
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    variants: list[tuple[tuple, str]] = [((), "")]
    for name in names:
        values = {"classification": ["secret", B_CLASS, "' OR 1=1 --"], "limit": ["1; SELECT"],
                  "version": ["1 OR 1=1"]}.get(name, INJECTIONS[:3])
        variants += [(((name, value),), "query-injection") for value in values]
    return variants


def attempts(http: httpx.Client, world: World) -> list[Attempt]:
    operations, schemas = _operations(http)
    found: list[Attempt] = []
    for method, route, operation in operations:
        body_ref = (operation.get("requestBody", {}).get("content", {})
                    .get("application/json", {}).get("schema", {}))
        ref = body_ref.get("$ref") or (body_ref.get("anyOf") or [{}])[0].get("$ref")
        schema = ref.rsplit("/", 1)[-1] if ref else None
        destructive = method in ("DELETE", "POST", "PUT", "PATCH") and not route.endswith(
            ("/search", "/retrieve", "/ground"))
        base = _base_path(route, destructive)
        bodies = _bodies(schema, schemas, world)
        if route.endswith("/retrieve"):  # search's engine path: its stream is what differs
            bodies = [b for b in bodies if b[1] != "strategy"][::3] + bodies[:3]
        for name in base:
            for value, tag in _path_values(world, name):
                if destructive and tag == "shared" and name in ("pipeline", "name"):
                    continue  # A's own: the keys that may not write try it below
                found.append(Attempt("admin", method, route, _fill(route, {**base, name: value}),
                                     body=bodies[0][0], tag=f"path:{name}:{tag}"))
        path = _fill(route, base)
        for body, tag in bodies:
            found.append(Attempt("admin", method, route, path, body=body, tag=tag))
        for params, tag in _query_values(operation)[1:]:
            found.append(Attempt("admin", method, route, path, params, bodies[0][0], tag))
        own = _fill(route, _base_path(route, False))
        for key in ("reader", "public", "revoked", "expired", "garbage", "none"):
            found.append(Attempt(key, method, route, own, body=bodies[0][0], tag="base"))
        if schema == "SearchBody":  # every strategy with the key that must not see A's secret
            found += [Attempt("public", method, route, path, body=b, tag=t)
                      for b, t in bodies if t in ("strategy", "classification", "filter")]
            found += [Attempt(k, method, route, _fill(route, {"pipeline": p}),
                              body={"query": TEXT}, tag=f"pipeline:{p}")
                      for k in ("admin", "reader", "public") for p in ("legal", "nosuch")]
    return found


def send(http: httpx.Client, world: World, attempt: Attempt) -> httpx.Response:
    token = {"garbage": GARBAGE, "none": None}.get(
        attempt.key, world.keys.get(attempt.key, {}).get("key"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http.request(attempt.method, attempt.path, params=list(attempt.params),
                        json=attempt.body, headers=headers)
