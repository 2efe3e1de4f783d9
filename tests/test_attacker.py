"""An attacker's suite over HTTP: tenant A's keys against tenant B, on a real
``pgbraid serve``.

Two tenants hold a pipeline of the same name (``docs``) with documents of the same
ids, an entity source of the same name, graphs, keys and classifications; B also
has a pipeline and a source A has not. Every operation of the app's OpenAPI
document (so a new endpoint is attacked the day it is added) is called with each
of A's keys (its admin, a reader of one pipeline, a reader holding ``public``
only, a revoked and an expired key, and garbage), with SQL-injection strings in
path ids, query parameters, queries, filter values and field names, crafted
classifications, cursors and forged tenant or pipeline ids in bodies; every
strategy of the registry is searched. Then:

- no response (its whole text, trace included) holds any of B's marker strings,
  nor, for the ``public`` key, A's own secret marker; nothing answers 5xx;
- revoked, expired and garbage keys get 401 everywhere; a forged field is 400;
- naming B's pipeline or source answers exactly what naming one that exists
  nowhere answers (404 for a key of every pipeline, never 403);
- every read answers the same after B's content changed (nothing of B counted);
- every 401 and 403 is in the audit log: each refusal of a known key as a row of
  A's (``access.denied``, ``key.refused``), garbage keys counted under no tenant.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from pgbraid import audit

from .serving import served, tenant_client  # noqa: F401  (fixture)
from .test_noninterference import requests as strategy_requests
from .test_noninterference import strip_timings

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


def _docs(tenant_mark: str, secret: str) -> list[dict[str, Any]]:
    return [{"id": f"doc-{i}", "title": f"Reactor {tenant_mark} {i}",
             "text": f"The {TEXT} {tenant_mark} number {i}, reactor crew.",
             "metadata": {"owner": f"{tenant_mark}-owner", f"k{tenant_mark}": i, "n": i}}
            for i in range(1, 4)] + [
        {"id": "doc-s", "title": f"Secret {secret}", "text": f"The secret {TEXT} {secret}.",
         "classification": ["secret"], "metadata": {"owner": secret}}]


@dataclass
class World:
    a_tenant: str
    b_tenant: str
    keys: dict[str, dict[str, str]]
    b_key: dict[str, str]
    b_fragments: list[int]
    b_table: str
    a_table: str
    markers: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def world(data_dir, server, served, tmp_path_factory):
    import psycopg

    with psycopg.connect(server.status().dsn, autocommit=True) as su, \
            tenant_client(data_dir) as a, tenant_client(data_dir) as b:
        tables = {}
        for who, mark in (("a", "acme"), ("b", MARK)):
            tables[who] = f"att_{who}_{uuid.uuid4().hex[:8]}"
            su.execute(f"CREATE TABLE public.{tables[who]} (id int PRIMARY KEY, name text)")
            su.execute(f"INSERT INTO public.{tables[who]} VALUES (1, 'Reactor {mark} Supply')")
        for client, mark, secret, who in ((a, "acme", A_SECRET, "a"), (b, MARK, MARK, "b")):
            client.define_classification("secret", ["internal"])
            client.create_pipeline("docs")  # the default embedder: similarity and mmr run
            client.ingest("docs", _docs(mark, secret))
            client.load_graph_records("docs", [("org", "o1", f"Org {mark}", ["doc-1"]),
                                               ("org", "o2", f"Peer {mark}", ["doc-2"])],
                                      [("org", "o1", "supplies", "org", "o2")])
            client.add_source("suppliers", table=tables[who], key="id", text="name")
        b.define_classification(B_CLASS)
        b.create_pipeline("legal", embedder="none")
        b.ingest("legal", [{"id": f"hidden-{MARK}", "text": f"{TEXT} {MARK}",
                            "classification": [B_CLASS]}])
        b.add_source("vendors", table=tables["b"], key="id", text="name")
        b_key = b.create_key(pipeline="*", permissions="read,execute")
        with b.session() as conn:
            b_fragments = [r[0] for r in conn.execute("SELECT id FROM pgbraid.fragments")]
        keys = {
            "admin": a.create_key(pipeline="*", permissions="read,write,execute,admin",
                                  admin=True),
            "reader": a.create_key(pipeline="docs", permissions="read,execute"),
            "public": a.create_key(pipeline="*", permissions="read,execute",
                                   classification="public"),
            "revoked": a.create_key(pipeline="*", permissions="read,write,execute,admin",
                                    admin=True),
            "expired": a.create_key(pipeline="*", permissions="read,execute",
                                    expires="2001-01-01T00:00:00Z"),
        }
        a.revoke_key(keys["revoked"]["id"])
        world = World(a.tenant, b.tenant, keys, b_key, b_fragments, tables["b"], tables["a"])
        world.markers = [MARK, B_CLASS, b.tenant, b_key["id"], b_key["key"][:12]]
        yield world, a, b
        a.remove_source("suppliers")
        b.remove_source("suppliers")
        b.remove_source("vendors")
        su.execute(f"DROP TABLE IF EXISTS public.{tables['a']}, public.{tables['b']} CASCADE")


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


# -- the checks ------------------------------------------------------------------------

def _check(world: World, attempt: Attempt, response: httpx.Response) -> None:
    text = response.text
    where = f"{attempt} -> {response.status_code} {text[:300]}"
    assert response.status_code < 500, where
    sent = json.dumps([attempt.path, attempt.params, attempt.body])
    if attempt.route == "/audit":  # A's own log holds what A sent (B_CLASS, forged ids)
        sent = sent + json.dumps(world.markers[1:-1])
    for marker in world.markers:
        if marker not in sent:
            assert marker not in text, f"B's {marker!r} leaked: {where}"
    if attempt.key == "public":
        assert A_SECRET not in text, where
    if attempt.key in ("revoked", "expired", "garbage", "none"):
        assert response.status_code == 401, where
    if attempt.tag.startswith("forged"):
        assert response.status_code == 400 and "unknown field" in text, where
    if attempt.tag.endswith(":b-only") or attempt.tag in ("path:fragment_id:b-fragment",
                                                         "path:key_id:b-key"):
        assert response.status_code in (400, 403, 404), where


def _normal(response: httpx.Response) -> Any:
    try:
        body = [json.loads(line) for line in response.text.splitlines() if line.strip()]
    except json.JSONDecodeError:
        body = response.text
    return response.status_code, strip_timings(body)


def sweep(served, world: World, chosen: list[Attempt]) -> dict[Attempt, Any]:
    seen = {}
    with httpx.Client(base_url=served.url, timeout=60) as http:
        for attempt in chosen:
            seen[attempt] = response = send(http, world, attempt)
            _check(world, attempt, response)
    return seen


def test_tenant_a_learns_nothing_of_tenant_b(world, served):
    world, a, b = world
    with served.client() as http:
        chosen = attempts(http, world)
    anonymous = _anonymous_refusals(world, a, served)
    assert len({(x.method, x.route) for x in chosen}) >= 25
    reads = [x for x in chosen if x.reads and x.route != "/audit"]
    before = sweep(served, world, reads)
    # The scan sees content: A's admin reads A's secret, the public key A's public text.
    assert any(A_SECRET in r.text for x, r in before.items() if x.key == "admin")
    assert any("acme" in r.text for x, r in before.items() if x.key == "public")
    writes = sweep(served, world, [x for x in chosen if not x.reads])
    logs = sweep(served, world, [x for x in chosen if x.route == "/audit"])  # A's own log
    assert all(r.status_code >= 400 for r in writes.values()), [
        (x, r.status_code) for x, r in writes.items() if r.status_code < 400]
    # B changes everything A could count: more matching text, a delete, a key, a graph.
    b.ingest("docs", [{"id": f"more-{i}", "text": f"{TEXT} {TEXT} {MARK} {i}"} for i in range(5)])
    b.delete_document("docs", "doc-2")
    b.create_key(pipeline="docs", permissions="read")
    b.load_graph_records("docs", [("org", "o3", f"New {MARK}", ["doc-3"])],
                         [("org", "o3", "supplies", "org", "o1")])
    # What answered is asked again (a refusal's answer depends on A's names only: checked
    # against a name that exists nowhere, below).
    answered = [x for x in reads if before[x].status_code < 400]
    after = sweep(served, world, answered)
    changed = [x for x in answered if _normal(before[x]) != _normal(after[x])]
    assert changed == [], changed[:5]
    _same_as_nowhere(before)
    _b_untouched(world, b, served)
    seen = [*before.items(), *writes.items(), *logs.items(), *after.items()]
    _refusals_are_audited(world, a, served, seen, anonymous)


def _same_as_nowhere(seen: dict[Attempt, httpx.Response]) -> None:
    """B's pipeline answers what a pipeline that exists nowhere answers."""
    by = {(x.key, x.method, x.route, x.tag): r for x, r in seen.items()
          if x.tag in ("pipeline:legal", "pipeline:nosuch")}
    pairs = 0
    for (key, method, route, tag), response in by.items():
        if tag == "pipeline:legal":
            other = by[(key, method, route, "pipeline:nosuch")]
            assert response.status_code == other.status_code
            assert response.text.replace("legal", "nosuch") == other.text
            if key in ("admin", "public"):  # keys of every pipeline: not found, never forbidden
                assert response.status_code == 404, response.text
            pairs += 1
    assert pairs >= 6


def _b_untouched(world: World, b, served) -> None:
    assert b.document("docs", "doc-1")["text"].endswith("reactor crew.")
    assert MARK in b.document("docs", "doc-1")["text"]
    assert {s["name"] for s in b.sources()} == {"suppliers", "vendors"}
    assert "legal" in {p.name for p in b.pipelines()}
    with served.client(world.b_key["key"]) as http:
        assert http.get("/pipelines").status_code == 200  # A could not revoke it


def _anonymous_refusals(world: World, a, served) -> int:
    """Refusals of unknown keys counted so far (the server's counts written first)."""
    with served.client(world.keys["admin"]["key"]) as http:
        assert http.get("/audit", params={"limit": 1}).status_code == 200
    return sum(e["count"] for e in a.audit(unauthenticated=True, limit=audit.MAX_LIMIT,
                                           action="key.refused"))


def _refusals_are_audited(world: World, a, served, seen: list[tuple[Attempt, httpx.Response]],
                          anonymous_before: int) -> None:
    statuses = Counter((x.key, r.status_code) for x, r in seen)
    with served.client(world.keys["admin"]["key"]) as http:  # also writes the server's counts
        events = http.get("/audit", params={"limit": audit.MAX_LIMIT}).json()
    rows = Counter()
    for event in events:
        rows[(event["principal"], event["action"])] += event["count"]
    for name in ("admin", "reader", "public"):
        label = f"key:{world.keys[name]['id']}"
        assert rows[(label, "access.denied")] == statuses[(name, 403)], name
    for name in ("revoked", "expired"):
        label = f"key:{world.keys[name]['id']}"
        assert rows[(label, "key.refused")] == statuses[(name, 401)] > 0, name
    assert statuses[("reader", 403)] > 0 and statuses[("public", 403)] > 0
    unknown = statuses[("garbage", 401)] + statuses[("none", 401)]
    assert _anonymous_refusals(world, a, served) - anonymous_before == unknown > 0
