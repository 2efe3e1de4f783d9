"""graph with engine age: the Apache AGE mirror answers like pgbraid's own engine.

AGE is built from ../shared/vendor into the session's data dir (skipped where it
cannot be built); the native engine, the AGE engine and a plain-Python reference
must agree on ATT&CK, and the mirror must follow loads and deletes.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

import pgbraid
from pgbraid import NotEnabled
from pgbraid.errors import Conflict
from pgbraid.db.server import EmbeddedServer
from pgbraid.strategies.graph import reference
from pgbraid.strategies.graph.age import Age, graph_name

from .test_graph import attack_graph


@pytest.fixture(scope="module")
def age_client(build_extension, data_dir):
    build_extension("age")
    with pgbraid.connect(data_dir=data_dir, age=True) as client:
        yield client


@pytest.fixture(scope="module")
def attack(age_client):
    nodes, edges = attack_graph()
    name = "attack-age"
    if name not in {p.name for p in age_client.pipelines()}:
        age_client.create_pipeline(name, embedder="none")
        groups = [n for n in nodes.values() if n["kind"] == "group"]
        age_client.ingest(name, [{"id": g["attack_id"], "title": g["name"],
                                  "text": g["description"] or g["name"]} for g in groups])
        age_client.load_graph_records(name, [(n["kind"], k, n["name"], [k] if n["kind"] == "group"
                                               else []) for k, n in nodes.items()], edges)
    return name, nodes, edges


def both(client, pipeline, params, query="x"):
    """The native and the AGE answer of one request: (hits, details) each."""
    out = []
    for engine in ("pgbraid", "age"):
        response = client.search(pipeline, query, type="graph", params={**params, "engine": engine})
        details = dict(response.trace.retrievers[0].details)
        assert details.pop("engine") == engine
        details.pop("age", None)
        out.append(([(h.document_id, h.score, h.evidence) for h in response.hits], details))
    return out


def test_groups_most_similar_to_apt29_agree_across_engines_and_the_reference(age_client, attack):
    name, _, edges = attack
    native, age = both(age_client, name, {"mode": "similar", "edge_type": "uses",
                                          "neighbour_type": "technique", "k": 10}, query="APT29")
    assert native == age
    hits, details = age
    expected = reference.similar(edges, "group:G0016", {"uses"}, neighbour_type="technique")
    got = [(f"{e['type']}:{e['key']}", e["score"], e["evidence"]["shared_neighbours"])
           for e in details["entities"]]
    assert [g[0] for g in got] == [e[0] for e in expected[:10]]
    for (_, ours, shared), (_, theirs, their_shared) in zip(got, expected):
        assert ours == pytest.approx(theirs, abs=1e-6)
        assert shared == [s.split(":", 1)[1] for s in their_shared]
    assert [h[0] for h in hits] == [g[0].split(":", 1)[1] for g in got]
    assert details["capped"] == []  # no hub in ATT&CK at the default max_fanout: exact


@pytest.mark.parametrize("measure", ["cosine", "adamic-adar"])
def test_other_measures_agree_across_engines_and_the_reference(age_client, attack, measure):
    name, _, edges = attack
    native, age = both(age_client, name, {"seed": "G0016", "mode": "similar", "edge_type": "uses",
                                          "neighbour_type": "technique", "measure": measure,
                                          "k": 10})
    assert native == age
    expected = reference.similar(edges, "group:G0016", {"uses"}, neighbour_type="technique",
                                 measure=measure)
    assert [(e["key"], pytest.approx(e["score"], abs=1e-6)) for e in age[1]["entities"]] == [
        (v.split(":", 1)[1], s) for v, s, _ in expected[:10]]


def test_two_hop_neighbours_of_software_agree_across_engines_and_the_reference(age_client,
                                                                             attack):
    name, _, edges = attack
    params = {"seed": "S0154", "mode": "neighbours", "edge_types": ["uses"], "hops": 2,
              "k": 1000, "max_fanout": 100_000}
    native, age = both(age_client, name, params)
    assert native == age
    with age_client.session() as conn:
        ids = {f"{t}:{k}": i for i, t, k in conn.execute(
            "SELECT v.id, v.type, v.key FROM pgbraid.vertices v JOIN pgbraid.pipelines p"
            " ON p.id = v.pipeline_id WHERE p.name = %s", (name,))}
    expected = reference.neighbours(edges, "software:S0154", {"uses"}, hops=2, ids=ids)
    got = {f"{e['type']}:{e['key']}": e["hops"] for e in age[1]["entities"]}
    assert age[1]["reached"] == len(expected) > 1000  # k stops at 1,000, in (hops, key) order
    first = sorted(expected.items(), key=lambda kv: (kv[1], kv[0].split(":", 1)[1]))[:1000]
    assert got == dict(first)


def test_capped_walks_agree_across_engines(age_client, attack):
    name, _, _ = attack
    native, age = both(age_client, name, {"seed": "S0154", "mode": "neighbours",
                                          "edge_types": ["uses"], "hops": 2, "max_fanout": 5,
                                          "k": 1000})
    assert native == age and age[1]["capped"]


def _tiny(client, name, vertices, edges):
    client.create_pipeline(name, embedder="none")
    client.load_graph_records(name, vertices, edges)


def test_deleting_a_vertex_removes_its_edges_from_both_engines(age_client, superuser):
    name = f"g-{uuid.uuid4().hex[:8]}"
    _tiny(age_client, name, [("n", k, k.upper(), []) for k in "abcd"],
          [("n", "a", "r", "n", "b"), ("n", "b", "r", "n", "c"), ("n", "a", "r", "n", "d")])
    params = {"seed": "a", "mode": "neighbours", "hops": 2}
    before = both(age_client, name, params)
    assert before[0] == before[1]
    assert {e["key"] for e in before[1][1]["entities"]} == {"b", "c", "d"}
    age_client.delete_vertex(name, "n", "b")
    response = age_client.search(name, "x", type="graph", params={**params, "engine": "age"})
    assert response.trace.retrievers[0].details["age"]["rebuilt"] is False  # synced, not rebuilt
    after = both(age_client, name, params)
    assert after[0] == after[1]
    assert {e["key"] for e in after[1][1]["entities"]} == {"d"}
    pid = superuser.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]
    graph = graph_name(pid)
    counts = superuser.execute(
        f'SELECT (SELECT count(*) FROM "{graph}".entity), (SELECT count(*) FROM "{graph}".link)'
    ).fetchone()
    assert counts == (3, 1)
    age_client.load_graph_records(name, [("n", "e", "E", [])], [("n", "d", "r", "n", "e")])
    response = age_client.search(name, "x", type="graph", params={**params, "engine": "age"})
    assert response.trace.retrievers[0].details["age"]["rebuilt"] is False  # synced by the load
    loaded = both(age_client, name, params)
    assert loaded[0] == loaded[1]
    assert {e["key"]: e["hops"] for e in loaded[1][1]["entities"]} == {"d": 1, "e": 2}


def test_a_load_while_age_is_unset_makes_the_mirror_stale_and_it_is_rebuilt(age_client, data_dir,
                                                                           superuser):
    name = f"g-{uuid.uuid4().hex[:8]}"
    _tiny(age_client, name, [("n", k, k, []) for k in "abc"], [("n", "a", "r", "n", "b")])
    first = age_client.search(name, "x", type="graph", params={"seed": "a", "engine": "age",
                                                               "mode": "neighbours"})
    assert first.trace.retrievers[0].details["age"]["rebuilt"] is True  # made just now
    pid = superuser.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]
    with pgbraid.connect(data_dir=data_dir) as plain:  # PGBRAID_AGE unset: AGE is not touched
        plain.load_graph_records(name, [], [("n", "a", "r", "n", "c")])
    assert superuser.execute(f'SELECT count(*) FROM "{graph_name(pid)}".link').fetchone()[0] == 1
    again = age_client.search(name, "x", type="graph", params={"seed": "a", "engine": "age",
                                                               "mode": "neighbours"})
    details = again.trace.retrievers[0].details
    assert details["age"]["rebuilt"] is True and "PGBRAID_AGE was unset" in details["age"]["reason"]
    assert {e["key"] for e in details["entities"]} == {"b", "c"}


CYPHER_SIGNIFICANT = ["it's", "$$ MATCH (x) DETACH DELETE x $$", "a}b{c", "back\\slash\\", "'}) //"]


def test_cypher_significant_keys_and_types_travel_as_parameters(age_client):
    name = f"g-{uuid.uuid4().hex[:8]}"
    keys = CYPHER_SIGNIFICANT
    vtype, etype = "ty'pe}$$", "ed\\ge'$$}"
    _tiny(age_client, name, [(vtype, k, f"label {i}", []) for i, k in enumerate(keys)]
          + [("hub", "h1", "H1", []), ("hub", "h2", "H2", [])],
          [(vtype, k, etype, "hub", h) for k in keys for h in ("h1", "h2")[:1 + keys.index(k) % 2]])
    for params in ({"seed": keys[0], "mode": "similar", "edge_type": etype, "k": 50},
                   {"seed": keys[1], "mode": "neighbours", "edge_types": [etype], "hops": 2,
                    "k": 50}):
        native, age = both(age_client, name, params)
        assert native == age and age[1]["entities"]
    assert {e["key"] for e in age[1]["entities"]} >= set(keys) - {keys[1]}


def test_age_requested_while_disabled_is_501_with_the_reason(client, pipeline):
    with pytest.raises(NotEnabled, match="PGBRAID_AGE=1") as failure:
        client.search(pipeline, "x", type="graph", params={"seed": "a", "engine": "age"})
    assert failure.value.http_status == 501


def test_age_enabled_but_not_installed_is_501_naming_the_extension(tmp_path):
    server = EmbeddedServer(tmp_path / "no-age")  # a data dir where AGE was never built
    server.start()
    try:
        with pgbraid.connect(data_dir=tmp_path / "no-age", age=True) as client:
            client.create_pipeline("p", embedder="none")
            client.load_graph_records("p", [("n", "a", "A", []), ("n", "b", "B", [])],
                                      [("n", "a", "r", "n", "b")])
            with pytest.raises(NotEnabled, match="age extension is not installed") as failure:
                client.search("p", "x", type="graph", params={"seed": "a", "engine": "age"})
            assert failure.value.http_status == 501 and failure.value.details["extension"] == "age"
            native = client.search("p", "x", type="graph", params={"seed": "a", "mode": "neighbours"})
            assert [e["key"] for e in native.trace.retrievers[0].details["entities"]] == ["b"]
    finally:
        server.stop()


def test_a_users_own_graph_of_the_mirrors_name_is_refused_by_name(age_client, superuser):
    name = f"g-{uuid.uuid4().hex[:8]}"
    _tiny(age_client, name, [("n", "a", "A", []), ("n", "b", "B", [])], [("n", "a", "r", "n", "b")])
    pid = superuser.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]
    superuser.execute("SET search_path = ag_catalog, public")  # this test connection only
    superuser.execute("SELECT ag_catalog.create_graph(%s)", (graph_name(pid),))
    try:
        with pytest.raises(Conflict, match=graph_name(pid)):
            age_client.search(name, "x", type="graph", params={"seed": "a", "engine": "age"})
        response = age_client.search(name, "x", type="graph", params={"seed": "a"})
        assert response.trace.retrievers[0].details["engine"] == "pgbraid"
    finally:
        superuser.execute("SELECT ag_catalog.drop_graph(%s, true)", (graph_name(pid),))


def test_cypher_runs_under_ag_catalog_without_leaking_search_path(age_client, attack):
    with age_client.session() as conn:
        before = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s",
                           (attack[0],)).fetchone()[0]
        seed = conn.execute("SELECT id FROM pgbraid.vertices WHERE pipeline_id = %s AND key = 'G0016'",
                            (pid,)).fetchone()[0]
        found = Age(conn, graph_name(pid)).lists([seed], "out", ["uses"])
        assert len(found[seed]) > 20
        assert conn.execute("SELECT current_setting('search_path')").fetchone()[0] == before
        assert "ag_catalog" not in before


@pytest.mark.parametrize("measure", ["jaccard", "adamic-adar"])
def test_hub_certificates_agree_across_engines_and_the_reference(age_client, measure):
    """Next to hubs both engines give the same entities and hits, certified, equal to the
    reference. The native engine reads its packed lists all at once (tally.py), AGE
    rows in rounds: their hub traces say so. On a graph read as rows (written by SQL of
    your own since its last load) both run the same rounds (walks.py, hubs.py) over
    their own lookups: the same hub trace too."""
    from .test_graph_hubs import hub_graph, unpack

    name = f"hubs-age-{measure}-{uuid.uuid4().hex[:6]}"
    vertices, edges = hub_graph()
    age_client.create_pipeline(name, embedder="none")
    age_client.load_graph_records(name, vertices, edges)
    params = {"seed": "s", "mode": "similar", "edge_type": "to", "measure": measure, "k": 10}
    native, age = both(age_client, name, params)
    assert native[1]["hubs"]["lists"].startswith("packed")
    assert age[1]["hubs"]["lists"].startswith("rows")
    assert native[0] == age[0] and native[1]["entities"] == age[1]["entities"]
    assert native[1]["hubs"]["certified_exact"] is True
    unpack(age_client, name)
    rows, age = both(age_client, name, params)
    assert rows == age and rows[1]["entities"] == native[1]["entities"]
    assert age[1]["hubs"]["certified_exact"] is True
    expected = [(v.split(":", 1)[1], round(s, 6)) for v, s, _ in
                reference.similar(edges, "n:s", {"to"}, measure=measure)[:10]]
    assert [(e["key"], e["score"]) for e in age[1]["entities"]] == expected


def _mirrored(client, superuser, name: str) -> str:
    """A tiny pipeline of ``client``'s tenant with a current AGE mirror; its graph name."""
    _tiny(client, name, [("org", "o1", "Secret Org", []), ("org", "o2", "Two", [])],
          [("org", "o1", "knows", "org", "o2")])
    client.search(name, "Secret Org", type="graph", params={"engine": "age", "mode": "neighbours"})
    pid = superuser.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]
    return graph_name(pid)


def test_deleting_a_pipeline_drops_its_mirror(age_client, superuser):
    """The mirror holds the pipeline's keys, types and edges: they go with the pipeline
    (no schema left behind that pgbraid_app may still read)."""
    name = f"g-{uuid.uuid4().hex[:8]}"
    graph = _mirrored(age_client, superuser, name)
    assert superuser.execute("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = %s",
                             (graph,)).fetchone()[0] == 1
    age_client.delete_pipeline(name)
    assert superuser.execute("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = %s",
                             (graph,)).fetchone()[0] == 0
    assert superuser.execute("SELECT to_regnamespace(%s)", (graph,)).fetchone()[0] is None
    assert _mirrored(age_client, superuser, name) != graph  # and anew: a mirror of its own


def test_a_mirror_a_lock_keeps_is_a_warning_and_the_next_delete_drops_it(age_client, superuser,
                                                                          server):
    """The pipeline is gone once its delete commits; a mirror whose drop meets a lock (a
    reader of its vertices) is reported, listed in pgbraid.leftovers, and dropped later."""
    from psycopg import sql

    from pgbraid import housekeeping

    name, later = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    graph = _mirrored(age_client, superuser, name)
    age_client.create_pipeline(later, embedder="none")
    count = "SELECT count(*) FROM ag_catalog.ag_graph WHERE name = %s"
    with psycopg.connect(server.status().dsn) as holder:
        holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS SHARE MODE").format(
            sql.Identifier(graph, "_ag_label_vertex")))
        answer = age_client.delete_pipeline(name)
        holder.rollback()
    assert answer["deleted"] == name, answer
    assert [w["step"] for w in answer["warnings"]] == ["drop_graph_mirror"], answer
    assert name not in {p.name for p in age_client.pipelines()}
    assert [i.graph for i in housekeeping.leftovers(age_client._db, age_client.tenant)] == [graph]
    assert superuser.execute(count, (graph,)).fetchone()[0] == 1
    assert age_client.delete_pipeline(later) == {"deleted": later, "warnings": []}
    assert superuser.execute(count, (graph,)).fetchone()[0] == 0
    assert housekeeping.leftovers(age_client._db, age_client.tenant) == []


@pytest.mark.xfail(strict=True, reason="open (review, session 9): AGE label tables carry no "
                   "row-level security, and pgbraid_app is granted every mirror; a policy "
                   "there keeps AGE's operators (not LEAKPROOF) off its indexes")
def test_another_tenants_raw_session_cannot_read_a_mirror(age_client, data_dir, superuser):
    graph = _mirrored(age_client, superuser, f"g-{uuid.uuid4().hex[:8]}")
    with pgbraid.connect(data_dir=data_dir, tenant=f"other-{uuid.uuid4().hex[:8]}") as other, \
            other.session() as conn:
        try:
            seen = conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}.entity").format(
                psycopg.sql.Identifier(graph))).fetchone()[0]
        except psycopg.errors.InsufficientPrivilege:
            seen = 0  # refused outright: as good
    assert seen == 0
