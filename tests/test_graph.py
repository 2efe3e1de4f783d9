"""graph: ATT&CK similarity against a reference computation, walks, caps, bad loads."""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections import defaultdict

import pytest

import pgbraid
from pgbraid import InvalidRequest, NotEnabled, NotFound

from .conftest import CITUS, shared


def attack_graph():
    nodes = {}
    with gzip.open(shared("mitre_attack", "nodes.jsonl.gz"), "rt") as handle:
        for line in handle:
            n = json.loads(line)
            if not n["revoked"] and not n["deprecated"] and n["attack_id"]:
                nodes[n["attack_id"]] = n
    edges = set()
    with gzip.open(shared("mitre_attack", "edges.tsv.gz"), "rt") as handle:
        for r in csv.DictReader(handle, delimiter="\t"):
            s, t = r["source_attack_id"], r["target_attack_id"]
            if r["revoked"] == "false" and r["deprecated"] == "false" and s in nodes and t in nodes and s != t:
                edges.add((nodes[s]["kind"], s, r["relationship_type"], nodes[t]["kind"], t))
    return nodes, sorted(edges)


@pytest.fixture(scope="module")
def attack(data_dir, server):
    nodes, edges = attack_graph()
    with pgbraid.connect(data_dir=data_dir) as client:
        if "attack" not in {p.name for p in client.pipelines()}:
            client.create_pipeline("attack", embedder="none")
            groups = [n for n in nodes.values() if n["kind"] == "group"]
            client.ingest("attack", [{"id": g["attack_id"], "title": g["name"],
                                      "text": g["description"] or g["name"]} for g in groups])
            vertices = [(n["kind"], key, n["name"], [key] if n["kind"] == "group" else [])
                        for key, n in nodes.items()]
            counts = client.load_graph_records("attack", vertices, edges)
            assert counts["edges"] == len(edges) > 15_000
    return "attack", nodes, edges


def reference_jaccard(edges, seed):
    techniques = defaultdict(set)
    for src_type, src, etype, dst_type, dst in edges:
        if src_type == "group" and etype == "uses" and dst_type == "technique":
            techniques[src].add(dst)
    mine = techniques[seed]
    scores = {g: len(mine & t) / len(mine | t) for g, t in techniques.items() if g != seed and mine & t}
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])), techniques


def test_groups_most_similar_to_apt29_match_the_reference(client, attack):
    name, nodes, edges = attack
    response = client.search(name, "APT29", type="graph", params={
        "mode": "similar", "edge_type": "uses", "neighbour_type": "technique", "k": 10})
    details = response.trace.retrievers[0].details
    assert details["seed"]["key"] == "G0016" and "exact label" in details["seed_resolved_by"]
    expected, techniques = reference_jaccard(edges, "G0016")
    got = [(e["key"], e["score"]) for e in details["entities"]]
    assert [k for k, _ in got] == [k for k, _ in expected[:10]]
    for (_, ours), (_, theirs) in zip(got, expected):
        assert ours == pytest.approx(theirs, abs=1e-6)
    for entity in details["entities"]:
        assert set(entity["evidence"]["shared_neighbours"]) == techniques["G0016"] & techniques[entity["key"]]
    # Groups describe documents: the hits cite them, in the same order.
    assert [h.document_id for h in response.hits] == [k for k, _ in got]
    assert response.hits[0].evidence["shared_neighbours"]


@pytest.mark.parametrize("measure", ["cosine", "adamic-adar"])
def test_other_measures(client, attack, measure):
    name, _, edges = attack
    response = client.search(name, "x", type="graph", params={
        "seed": "G0016", "mode": "similar", "edge_type": "uses", "neighbour_type": "technique",
        "measure": measure, "k": 5})
    entities = response.trace.retrievers[0].details["entities"]
    _, techniques = reference_jaccard(edges, "G0016")
    degree = defaultdict(int)
    for t in techniques.values():
        for technique in t:
            degree[technique] += 1
    for e in entities:
        shared = techniques["G0016"] & techniques[e["key"]]
        if measure == "cosine":
            expected = len(shared) / math.sqrt(len(techniques["G0016"]) * len(techniques[e["key"]]))
            assert e["score"] == pytest.approx(expected, abs=1e-6)
        else:
            assert e["score"] > 0
    scores = [e["score"] for e in entities]
    assert scores == sorted(scores, reverse=True)


def test_two_hop_neighbours_of_software_with_paths(client, attack):
    name, _, _ = attack
    response = client.search(name, "x", type="graph", params={
        "seed": "S0154", "mode": "neighbours", "edge_types": ["uses"], "hops": 2, "k": 1000})
    details = response.trace.retrievers[0].details
    assert details["seed"]["label"] == "Cobalt Strike"
    by_hops = defaultdict(list)
    for e in details["entities"]:
        by_hops[e["hops"]].append(e)
        path = e["evidence"]["path"]
        assert path[0] == "software:S0154" and len(path) == e["hops"] + 1
    assert by_hops[1] and by_hops[2]
    assert any(e["type"] == "group" for e in by_hops[1])  # groups that use Cobalt Strike


def test_hub_fanout_is_capped_and_reported(client, attack):
    name, _, _ = attack
    response = client.search(name, "x", type="graph", params={
        "seed": "S0154", "mode": "neighbours", "edge_types": ["uses"], "hops": 2, "max_fanout": 5,
        "k": 1000})
    details = response.trace.retrievers[0].details
    assert details["capped"] and "cap_note" in details
    assert len(details["entities"]) <= 5 + 5 * 5


def test_an_entity_without_edges_is_not_the_same_as_an_unknown_one(client, attack):
    name, _, _ = attack
    client.load_graph_records(name, [("group", "G9999", "Lonely Group", [])])
    response = client.search(name, "x", type="graph", params={"seed": "G9999", "edge_type": "uses"})
    assert response.hits == ()
    assert response.trace.retrievers[0].details["explanation"] == "no relationships materialised for this entity"
    with pytest.raises(NotFound, match="not found"):
        client.search(name, "x", type="graph", params={"seed": "G0000"})


@pytest.mark.parametrize("params, error", [
    ({"seed": "G0016", "edge_type": "befriends"}, InvalidRequest),
    ({"seed": "G0016", "neighbour_type": "planet"}, InvalidRequest),
    ({"seed": "G0016", "mode": "neighbours", "hops": 4}, InvalidRequest),
    ({"seed": "G0016", "measure": "vibes"}, InvalidRequest),
    ({"seed": "G0016", "engine": "age"}, NotEnabled),
])
def test_bad_graph_requests(client, attack, params, error):
    with pytest.raises(error):
        client.search(attack[0], "x", type="graph", params=params)


def test_loads_are_all_or_nothing_with_line_numbers(client, pipeline, tmp_path):
    vertices = tmp_path / "v.tsv"
    vertices.write_text("type\tkey\tlabel\nsupplier\ts1\tAcme\nsupplier\ts2\tGlobex\npo\tp1\tPO 1\n")
    edges = tmp_path / "e.tsv"
    edges.write_text("supplier\ts1\tissued\tpo\tp1\n"
                     "supplier\ts2\tissued\tpo\tp1\n"
                     "supplier\ts1\tissued\tpo\tp1\n"          # duplicate of line 1
                     "supplier\ts1\tknows\tsupplier\ts1\n"     # self-loop
                     "supplier\ts1\tissued\n")                  # malformed
    with pytest.raises(InvalidRequest) as failure:
        client.load_graph(pipeline, vertices=vertices, edges=edges)
    errors = failure.value.details["errors"]
    assert any("e.tsv:3" in e and "duplicate" in e and "e.tsv:1" in e for e in errors)
    assert any("e.tsv:4" in e and "self-loop" in e for e in errors)
    assert any("e.tsv:5" in e for e in errors)
    assert client.graph_summary(pipeline) == {"vertices": {}, "edges": {}}

    edges.write_text("supplier\ts1\tissued\tpo\tp1\nsupplier\ts2\tissued\tpo\tp1\nsupplier\ts9\tissued\tpo\tp1\n")
    with pytest.raises(InvalidRequest, match="e.tsv:3: unknown vertex supplier:s9"):
        client.load_graph(pipeline, vertices=vertices, edges=edges)
    assert client.graph_summary(pipeline) == {"vertices": {}, "edges": {}}

    edges.write_text("supplier\ts1\tissued\tpo\tp1\t2.0\nsupplier\ts2\tissued\tpo\tp1\n")
    for _ in range(2):  # idempotent
        assert client.load_graph(pipeline, vertices=vertices, edges=edges) == {"vertices": 3, "edges": 2}
    assert client.graph_summary(pipeline) == {"vertices": {"po": 1, "supplier": 2}, "edges": {"issued": 2}}
    # Suppliers are neighbour-similar through the purchase order they share (seed 000).
    similar = client.search(pipeline, "Acme", type="graph", params={"mode": "similar", "edge_type": "issued"})
    entities = similar.trace.retrievers[0].details["entities"]
    assert [(e["key"], e["evidence"]["shared_neighbours"]) for e in entities] == [("s2", ["p1"])]
    client.delete_vertex(pipeline, "po", "p1")
    assert client.graph_summary(pipeline)["edges"] == {}


@pytest.mark.skipif(CITUS, reason="on Citus an INSERT ... SELECT into edges (a table with "
                    "triggers) goes through the coordinator's COPY, which RLS refuses on the "
                    "workers: INSERT ... VALUES only (docs/scale.md, 3)")
def test_edges_written_in_sql_of_your_own_are_searchable_by_their_type(client, pipeline):
    """README's SQL route (no pgbraid load): triggers keep the types and graph version."""
    client.load_graph_records(pipeline, [("supplier", "s1", "Acme", []), ("supplier", "s2", "Globex", []),
                                         ("po", "p1", "PO 1", [])])
    with client.session() as conn:
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (pipeline,)).fetchone()[0]
        before = conn.execute("SELECT version FROM pgbraid.graph_versions WHERE pipeline_id = %s",
                              (pid,)).fetchone()[0]
        conn.execute("INSERT INTO pgbraid.edges (pipeline_id, src, type, dst) SELECT s.pipeline_id,"
                     " s.id, 'issued', o.id FROM pgbraid.vertices s JOIN pgbraid.vertices o"
                     " ON o.pipeline_id = s.pipeline_id WHERE s.pipeline_id = %(p)s"
                     " AND s.type = 'supplier' AND o.type = 'po'", {"p": pid})
        after = conn.execute("SELECT version, edge_types FROM pgbraid.graph_versions"
                             " WHERE pipeline_id = %s", (pid,)).fetchone()
    assert after == (before + 1, ["issued"])
    similar = client.search(pipeline, "Acme", type="graph", params={"edge_type": "issued"})
    assert [e["key"] for e in similar.trace.retrievers[0].details["entities"]] == ["s2"]


def test_a_seed_whose_neighbours_are_all_hubs_finds_its_candidates_through_them(client, pipeline):
    members = [f"c{i:02d}" for i in range(12)]
    client.load_graph_records(pipeline, [("n", "s", "Seed", []), ("hub", "h", "Hub", [])]
                              + [("n", m, m, []) for m in members],
                              [("n", "s", "in", "hub", "h")] + [("n", m, "in", "hub", "h") for m in members])
    response = client.search(pipeline, "x", type="graph", params={
        "seed": "s", "mode": "similar", "edge_type": "in", "max_fanout": 3, "k": 5})
    details = response.trace.retrievers[0].details
    assert details["capped"] == ["hub:h (13 edges)"]
    assert details["hubs"]["certified_exact"] is True and details["hubs"]["hubs_read"] == ["hub:h"]
    # all tie at 1.0: ordered by key
    assert [e["key"] for e in details["entities"]] == members[:5]
    assert {e["score"] for e in details["entities"]} == {1.0}
    wide = client.search(pipeline, "x", type="graph", params={
        "seed": "s", "mode": "similar", "edge_type": "in", "k": 20})
    assert len(wide.trace.retrievers[0].details["entities"]) == 12
    assert wide.trace.retrievers[0].details["capped"] == []
    assert "hubs" not in wide.trace.retrievers[0].details
