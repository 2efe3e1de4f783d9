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
strategy of the registry is searched (tests/attacks.py builds the attempts). Then:

- no response (its whole text, trace included) holds any of B's marker strings,
  nor, for the ``public`` key, A's own secret marker; nothing answers 5xx;
- revoked, expired and garbage keys get 401 everywhere; a forged field is 400;
- naming B's pipeline or source answers exactly what naming one that exists
  nowhere answers (404 for a key of every pipeline, never 403);
- every read answers the same after B's content changed (nothing of B counted);
- every 401 and 403 is in the audit log, counted per key and minute: each known
  key's refusals in A's (``access.denied``, ``key.refused``; a row per key, minute
  and flush of the counts), garbage keys counted under no tenant.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import httpx
import psycopg
import pytest

from pgbraid import audit

from .attacks import A_SECRET, B_CLASS, MARK, TEXT, Attempt, World, attempts, send
from .keys import expired_key
from .serving import served, tenant_client  # noqa: F401  (fixture)
from .test_noninterference import strip_timings


def _docs(tenant_mark: str, secret: str) -> list[dict[str, Any]]:
    return [{"id": f"doc-{i}", "title": f"Reactor {tenant_mark} {i}",
             "text": f"The {TEXT} {tenant_mark} number {i}, reactor crew.",
             "metadata": {"owner": f"{tenant_mark}-owner", f"k{tenant_mark}": i, "n": i}}
            for i in range(1, 4)] + [
        {"id": "doc-s", "title": f"Secret {secret}", "text": f"The secret {TEXT} {secret}.",
         "classification": ["secret"], "metadata": {"owner": secret}}]


@pytest.fixture(scope="module")
def world(data_dir, server, served):
    with psycopg.connect(server.status().dsn, autocommit=True) as su, \
            tenant_client(data_dir, source_schemas="*=public") as a, \
            tenant_client(data_dir, source_schemas="*=public") as b:
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
            "expired": expired_key(a, pipeline="*", permissions="read,execute",
                                   expired_at="2001-01-01T00:00:00Z"),
        }
        a.revoke_key(keys["revoked"]["id"])
        world = World(a.tenant, b.tenant, keys, b_key, b_fragments, tables["b"])
        world.markers = [MARK, B_CLASS, b.tenant, b_key["id"], b_key["key"][:12]]
        yield world, a, b
        a.remove_source("suppliers")
        b.remove_source("suppliers")
        b.remove_source("vendors")
        su.execute(f"DROP TABLE IF EXISTS public.{tables['a']}, public.{tables['b']} CASCADE")


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
    rows, written, minutes = Counter(), Counter(), {}
    for event in events:
        rows[(event["principal"], event["action"])] += event["count"]
        written[(event["principal"], event["action"])] += 1
        minutes.setdefault((event["principal"], event["action"]), set()).add(event["at"])
    # Counted, not written one by one: a row per key and minute, plus one more at most
    # each time a read of the log wrote the counts so far (GET /audit that answered).
    flushes = 2 + sum(1 for x, r in seen if x.route == "/audit" and r.status_code == 200)
    for name, action, status in (("admin", "access.denied", 403),
                                 ("reader", "access.denied", 403),
                                 ("public", "access.denied", 403),
                                 ("revoked", "key.refused", 401),
                                 ("expired", "key.refused", 401)):
        which = (f"key:{world.keys[name]['id']}", action)
        assert rows[which] == statuses[(name, status)], name
        assert written[which] <= len(minutes.get(which, ())) + flushes, (name, written[which])
    for name in ("revoked", "expired", "reader", "public"):
        assert statuses[(name, 401 if name in ("revoked", "expired") else 403)] > 0, name
    assert statuses[("reader", 403)] > 0 and statuses[("public", 403)] > 0
    unknown = statuses[("garbage", 401)] + statuses[("none", 401)]
    assert _anonymous_refusals(world, a, served) - anonymous_before == unknown > 0
