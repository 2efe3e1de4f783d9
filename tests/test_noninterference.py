"""Non-interference: a reader's responses do not change when content it may not see
changes — secret documents (some German) added, changed and removed, secret documents
cited by graph entities, a public document quarantined (then changed, released and
quarantined again), another tenant's pipeline of the same name.

The walk covers every entry of the strategy registry (a new strategy falls under it
with the default request), hybrid and auto, graph modes, point-in-time searches
(as_of with every versioned type, type history), highlights, pages (offset, and
the next page through the cursor, which must not change either), grounding,
document reads, document listings, version listings and pipeline counts, and live
fetch (whether the corpus holds an identifier is decided in the reader's scope). Timings are the
only values allowed to differ.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import pgbraid
from pgbraid import strategies
from pgbraid.scope import Principal

from .test_live import remote  # noqa: F401  (fixture)

QUERY = "reactor maintenance schedule"
PUBLIC = [
    {"id": "p1", "title": "Reactor handbook", "text": "The reactor maintenance schedule is weekly.",
     "metadata": {"team": "reactor operations"}},
    {"id": "p2", "title": "Visitor centre", "text": "Reactor visitor centre opening hours."},
    {"id": "p3", "title": "APT29 report", "text": "APT29 uses spearphishing and PowerShell."},
    {"id": "p4", "title": "Cozy Bear", "text": "Cozy Bear shares techniques with APT29."},
]
INTERNAL = [
    {"id": "i1", "title": "Maintenance crew", "text": "Internal maintenance crew rota for the reactor.",
     "classification": ["internal"]},
    {"id": "i2", "title": "Turla notes", "text": "Turla uses PowerShell too.",
     "classification": ["internal"]},
]


def secret_documents(version: int) -> list[dict[str, Any]]:
    """Out of the reader's scope: words it searches for, another language, a graph citation."""
    return [{"id": f"s{i}", "title": f"Reactor secret {i}",
             "text": f"Secret reactor maintenance schedule number {i} revision {version}.",
             "classification": ["secret"]} for i in range(6)] + [
        {"id": "s-de", "text": f"Der geheime Wartungsplan des Reaktors, Fassung {version}. "
                               "Die Wartung beginnt montags.", "classification": ["secret"],
         "language": "german"},
        {"id": "s-apt", "title": "APT29 secret", "text": f"APT29 secret tasking {version}.",
         "classification": ["secret"]}]


# Public, in the reader's scope, on its words, cited by the graph: withheld by quarantine.
QUARANTINED = {"id": "pq", "title": "Reactor maintenance schedule",
               "text": "Reactor maintenance schedule, APT29 tasking: the quarantined copy."}

VERTICES = [("group", "G1", "APT29", ["p3", "s-apt", "pq"]), ("group", "G2", "Cozy Bear", ["p4"]),
            ("group", "G3", "Turla", ["i2"]), ("technique", "T1", "Spearphishing", []),
            ("technique", "T2", "PowerShell", []), ("technique", "T3", "Valid Accounts", [])]
EDGES = [("group", "G1", "uses", "technique", "T1"), ("group", "G1", "uses", "technique", "T2"),
         ("group", "G2", "uses", "technique", "T1"), ("group", "G2", "uses", "technique", "T2"),
         ("group", "G3", "uses", "technique", "T2"), ("group", "G3", "uses", "technique", "T3")]

# Requests beyond the default ({"query": QUERY}) that a strategy needs to say something.
SPECIAL = {
    "graph": [{"query": "APT29", "params": {"k": 10, "mode": "similar"}},
              {"query": "APT29", "params": {"k": 10, "mode": "neighbours", "hops": 2}}],
    # Both methods; the word dictionary holds the secret and quarantined words too.
    "fuzzy": [{"query": QUERY, "params": {"k": 10}},
              {"query": QUERY, "params": {"k": 10, "method": "words"}},
              {"query": "reactr maintenence secrte", "params": {"k": 10, "method": "words"}},
              {"query": "geheime wartungsplan", "params": {"k": 10, "method": "words"}}],
}
FUSED = [{"type": "hybrid", "query": QUERY}, {"type": "auto", "query": QUERY},
         {"type": "auto", "query": "APT29"}, {"type": "hybrid", "query": "CVE-2021-44228 reactor"},
         {"type": "fulltext", "query": "reactor zebra"},  # a zero-hit explanation
         {"type": "bm25", "query": "zebra quagga"}]
FUTURE = "2100-01-01T00:00:00+00:00"  # every change of the phases is valid then
POINT_IN_TIME = [
    *[{"type": name, "query": QUERY, "params": {"k": 10}, "as_of": FUTURE}
      for name, strategy in strategies.REGISTRY.items() if strategy.versioned],
    *[{"type": "history", "query": QUERY, "params": {"k": 10, **extra}, "as_of": FUTURE}
      for extra in ({}, {"strategy": "fulltext"}, {"strategy": "similarity"})],
    {"type": "hybrid", "query": QUERY, "as_of": FUTURE},
    {"type": "auto", "query": "APT29", "as_of": FUTURE}]
HIGHLIGHTS = [{"type": name, "query": QUERY, "params": {"k": 10, "highlight": True}}
              for name in ("fulltext", "bm25", "hybrid", "auto")]
PAGES = [{"type": name, "query": QUERY, "params": {"k": 2, "offset": 1}}
         for name in ("bm25", "fulltext", "similarity", "hybrid")] + [
    {"type": "bm25", "query": QUERY, "params": {"k": 2, "offset": 0}, "as_of": FUTURE}]


def requests() -> list[dict[str, Any]]:
    walked = []
    for name in strategies.REGISTRY:
        for extra in SPECIAL.get(name, [{"query": QUERY, "params": {"k": 10}}]):
            walked.append({"type": name, **extra})
    return walked + FUSED + POINT_IN_TIME + HIGHLIGHTS + PAGES


def strip_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_timings(v) for k, v in value.items() if k != "ms" and not k.endswith("_ms")}
    if isinstance(value, list):
        return [strip_timings(v) for v in value]
    return value


@pytest.fixture(params=[False, True], ids=["plain", "encrypted"])
def world(request, data_dir, server, superuser):
    name = f"ni-{uuid.uuid4().hex[:8]}"
    table = f"suppliers_{uuid.uuid4().hex[:6]}"
    superuser.execute(f"CREATE TABLE {table} (id serial PRIMARY KEY, name text NOT NULL)")
    superuser.execute(f"INSERT INTO {table} (name) VALUES ('Acme Metal Fabrication'), ('Apex Tools')")
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.define_classification("secret", implies=["internal"])
        # The default embedder: similarity and mmr run too. Encrypted, every walk repeats over
        # sealed text, titles and metadata (opened for the returned hits only).
        admin.create_pipeline(name, encrypt=request.param,
                              encrypt_metadata=["team"] if request.param else None)
        admin.ingest(name, PUBLIC + INTERNAL)
        admin.load_graph_records(name, VERTICES, EDGES)
        admin.add_source(f"src_{table}", table=table, key="id", text="name", create_indexes=True)
    return name, f"src_{table}"


def observe(reader: pgbraid.Client, pipeline: str, source: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for n, request in enumerate(requests()):
        response = reader.search(pipeline, **request)
        seen[f"{n}:{request['type']}:{request['query']}"] = strip_timings(
            response.model_dump(mode="json"))
        if response.next_cursor:  # the next page, as of the cursor's time
            following = {**request, "params": {**request["params"]}}
            following["params"].pop("offset")
            body = reader.search(pipeline, cursor=response.next_cursor, **following)
            seen[f"{n}:next page"] = strip_timings(body.model_dump(mode="json"))
    seen["document"] = reader.document(pipeline, "p1")
    seen["listing"] = reader.documents(pipeline)
    seen["versions"] = reader.versions(pipeline, "p1")
    seen["pipeline"] = reader.pipeline(pipeline).model_dump()
    seen["pipelines"] = [p.model_dump() for p in reader.pipelines() if p.name == pipeline]
    seen["ground"] = strip_timings(reader.ground(source, "Acme Metal Fabricaton"))
    return seen


def _tamper_secrets(superuser, pipeline: str) -> None:
    """Spoil every sealed value of the secret documents: a reader who may not see them
    never opens them, so its responses cannot change (nor fail)."""
    superuser.execute(
        "UPDATE pgbraid.fragments f SET body = 'pgbraid:1:0000000000000000:spoilt',"
        " title = 'pgbraid:1:0000000000000000:spoilt' FROM pgbraid.pipelines p"
        " WHERE p.id = f.pipeline_id AND p.name = %s AND 'secret' = ANY(f.classifications)",
        (pipeline,))
    assert superuser.execute(
        "UPDATE pgbraid.versions v SET body = 'pgbraid:1:0000000000000000:spoilt'"
        " FROM pgbraid.documents d JOIN pgbraid.pipelines p ON p.id = d.pipeline_id"
        " WHERE d.pipeline_id = v.pipeline_id AND d.id = v.document_id AND p.name = %s"
        " AND 'secret' = ANY(v.classifications)",
        (pipeline,)).rowcount


def test_out_of_scope_changes_leave_every_response_unchanged(data_dir, world, superuser):
    pipeline, source = world
    holder = Principal("default", {"*": frozenset({"read", "execute"})}, ("internal",))
    with pgbraid.connect(data_dir=data_dir, principal=holder) as reader, \
            pgbraid.connect(data_dir=data_dir) as admin, \
            pgbraid.connect(data_dir=data_dir, tenant="other") as other:
        encrypted = admin.pipeline(pipeline).encrypted
        before = observe(reader, pipeline, source)
        assert before[f"0:{next(iter(strategies.REGISTRY))}:{QUERY}"]["hits"], "walk found nothing"
        def quarantined():
            admin.ingest(pipeline, [QUARANTINED])
            hits = reader.search(pipeline, QUERY, type="bm25", params={"k": 1}).hits
            assert hits[0].document_id == "pq"  # it would change what the reader sees
            admin.quarantine_document(pipeline, "pq", reason="non-interference")

        phases = {
            "quarantined": quarantined,
            "changed while quarantined": lambda: admin.ingest(
                pipeline, [{**QUARANTINED, "text": QUARANTINED["text"] + " Reactor, revised."}]),
            "released and quarantined again": lambda: (admin.release_document(pipeline, "pq"),
                                                       admin.quarantine_document(pipeline, "pq")),
            "added": lambda: admin.ingest(pipeline, secret_documents(1)),
            "changed": lambda: admin.ingest(pipeline, secret_documents(2)),
            **({"sealed secrets spoilt": lambda: _tamper_secrets(superuser, pipeline)}
               if encrypted else {}),
            "removed": lambda: [admin.delete_document(pipeline, d["id"]) for d in secret_documents(2)],
            "other tenant": lambda: (other.create_pipeline(pipeline, embedder="none"),
                                     other.ingest(pipeline, PUBLIC + secret_documents(1))),
        }
        changed = {}
        for phase, change in phases.items():
            change()
            after = observe(reader, pipeline, source)
            changed[phase] = [key for key in before if after[key] != before[key]]
        assert changed == {phase: [] for phase in phases}, "responses changed"


def test_the_walk_covers_every_strategy():
    walked = {r["type"] for r in requests()}
    assert set(strategies.REGISTRY) <= walked
    assert {"hybrid", "auto", "history"} <= walked
    versioned = {n for n, s in strategies.REGISTRY.items() if s.versioned}
    assert versioned <= {r["type"] for r in requests() if r.get("as_of")}
    assert {r["type"] for r in requests() if r.get("params", {}).get("highlight")} >= {
        "fulltext", "bm25", "hybrid"}
    assert any("offset" in r.get("params", {}) for r in requests())


def test_live_fetch_decides_within_the_readers_scope(data_dir, server, client, remote):  # noqa: F811
    """A secret document that holds (or is named by) the identifier changes nothing for a
    reader who may not see it: the reader's search fetches, stores and cites the same."""
    from .test_live import MISSING, source

    holder = Principal("default", {"*": frozenset({"read", "execute"})}, ("internal",))
    seen, name = [], f"ni-live-{uuid.uuid4().hex[:8]}"  # one name: the trace's reasons hold it
    for hidden in ([], [{"id": MISSING, "title": f"{MISSING} secret", "classification": ["secret"],
                         "text": f"{MISSING} is being exploited against the reactor."}]):
        client.define_classification("secret", implies=["internal"])
        client.create_pipeline(name, embedder="none", live=source(remote))
        client.ingest(name, PUBLIC + hidden)
        with pgbraid.connect(data_dir=data_dir, principal=holder) as reader:
            response = reader.search(name, MISSING, type="auto").model_dump(mode="json")
        seen.append({
            "hits": [(h["document_id"], h["version"], h["title"], h["page_content"])
                     for h in response["hits"]],
            "trace": [{k: v for k, v in strip_timings(e).items() if k != "details"}
                      | {"stored": e["details"].get("stored")} for e in response["trace"]["retrievers"]]})
        client.delete_pipeline(name)
    assert seen[0]["trace"][-1]["status"] == "ran"
    assert seen[0] == seen[1]


AGE_REQUESTS = [{"type": "graph", "query": "APT29", "params": {"k": 10, "mode": mode, "engine": "age"}}
                for mode in ("similar", "neighbours")]


def test_the_age_engine_is_just_as_blind_to_out_of_scope_changes(data_dir, world, build_extension):
    """graph with engine age (its mirror, Cypher, the same scope for the documents cited)."""
    build_extension("age")
    pipeline, _ = world
    holder = Principal("default", {"*": frozenset({"read", "execute"})}, ("internal",))
    with pgbraid.connect(data_dir=data_dir, principal=holder, age=True) as reader, \
            pgbraid.connect(data_dir=data_dir, age=True) as admin, \
            pgbraid.connect(data_dir=data_dir, tenant="other", age=True) as other:
        def observe_age() -> list[Any]:
            return [strip_timings(reader.search(pipeline, **r).model_dump(mode="json"))
                    for r in AGE_REQUESTS]

        observe_age()  # the first AGE search makes the mirror (its trace says rebuilt)
        before = observe_age()
        assert before[0]["hits"] and before[0]["trace"]["retrievers"][0]["details"]["engine"] == "age"

        def other_tenant():
            other.create_pipeline(pipeline, embedder="none")
            other.ingest(pipeline, PUBLIC + secret_documents(1))
            other.load_graph_records(pipeline, VERTICES + [("group", "G9", "APT29 twin", ["s0"])],
                                     EDGES + [("group", "G9", "uses", "technique", "T1")])
            other.search(pipeline, "APT29", type="graph", params={"engine": "age"})

        phases = {
            "added": lambda: admin.ingest(pipeline, secret_documents(1)),
            "removed": lambda: [admin.delete_document(pipeline, d["id"]) for d in secret_documents(1)],
            "other tenant": other_tenant,
        }
        changed = {}
        for phase, change in phases.items():
            change()
            after = observe_age()
            changed[phase] = [i for i, response in enumerate(after) if response != before[i]]
        assert changed == {phase: [] for phase in phases}, "responses changed"
