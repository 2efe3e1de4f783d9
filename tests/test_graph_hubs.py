"""graph similar next to hubs: exact by default (a certificate, not a sample), within
a budget; and the precomputed degrees it relies on, kept by every write. Both ways of
reading: packed lists, all at once (tally.py), and rows in rounds (hubs.py: what a
graph written by SQL of your own since its last load gets)."""

from __future__ import annotations

import threading

import psycopg
import pytest

from pgbraid.strategies.graph.hubs import Bound, passes
from pgbraid.strategies.graph.reference import Reference

FILLERS = 1_200  # per hub: more than the default max_fanout (1,000)


def hub_graph():
    """A seed s -> h1, h2 (hubs: 1,200+ edges each) and n (not a hub). Twelve vertices
    reach s through n, each with a private neighbour (jaccard 1/4); three "twins"
    point at h1 and h2 only (2/3), lightly weighted, loaded last; 2,400 fillers point
    at one hub each (1/3). The exact top 10: the twins, then fillers by key."""
    vertices = [("n", "s", "Seed", []), ("hub", "h1", "H1", []), ("hub", "h2", "H2", []),
                ("hub", "n", "N", [])]
    edges = [("n", "s", "to", "hub", "h1"), ("n", "s", "to", "hub", "h2"), ("n", "s", "to", "hub", "n")]
    for i in range(12):
        vertices += [("n", f"x{i:02d}", f"x{i}", []), ("hub", f"p{i:02d}", f"p{i}", [])]
        edges += [("n", f"x{i:02d}", "to", "hub", "n"), ("n", f"x{i:02d}", "to", "hub", f"p{i:02d}")]
    for i in range(2 * FILLERS):
        vertices.append(("n", f"f{i:04d}", f"f{i}", []))
        edges.append(("n", f"f{i:04d}", "to", "hub", f"h{1 + i % 2}", 1.0))
    for i in range(3):
        vertices.append(("n", f"t{i}", f"twin {i}", []))
        edges += [("n", f"t{i}", "to", "hub", "h1", 0.5), ("n", f"t{i}", "to", "hub", "h2", 0.5)]
    return vertices, edges


def unpack(client, name) -> None:
    """SQL of your own writes the graph (an edge's weight, unchanged): it bumps the graph
    version without repacking, so searches read rows in rounds until the next load."""
    with client.session() as conn:
        conn.execute("UPDATE pgbraid.edges SET weight = weight WHERE pipeline_id = (SELECT id FROM"
                     " pgbraid.pipelines WHERE name = %s) AND src = (SELECT min(src) FROM"
                     " pgbraid.edges e JOIN pgbraid.pipelines p ON p.id = e.pipeline_id"
                     " WHERE p.name = %s)", (name, name))


@pytest.fixture(scope="module", params=["packed", "rows"])
def hubs(data_dir, server, request):
    import uuid

    import pgbraid

    vertices, edges = hub_graph()
    name = f"hubs-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as client:
        client.create_pipeline(name, embedder="none")
        client.load_graph_records(name, vertices, edges)
        if request.param == "rows":
            unpack(client, name)
    return name, Reference(edges), request.param


def similar(client, name, **params):
    response = client.search(name, "x", type="graph", params={
        "seed": "s", "mode": "similar", "edge_type": "to", "k": 10, **params})
    return response.trace.retrievers[0].details


@pytest.mark.parametrize("measure", ["jaccard", "cosine", "adamic-adar"])
def test_the_default_answer_next_to_hubs_is_the_exact_one(client, hubs, measure):
    """Skipping hubs (the behaviour before) gave the twelve x's: candidates sharing only
    hubs with the seed were never considered. Now the answer equals the reference."""
    name, ref, lists = hubs
    details = similar(client, name, measure=measure)
    assert details["hubs"]["lists"].startswith(lists)
    expected = [(v.split(":", 1)[1], round(score, 6))
                for v, score, _ in ref.similar("n:s", {"to"}, measure=measure)[:10]]
    assert [(e["key"], e["score"]) for e in details["entities"]] == expected
    assert details["hubs"]["certified_exact"] is True
    if measure == "jaccard":
        assert [e["key"] for e in details["entities"][:3]] == ["t0", "t1", "t2"]


@pytest.mark.parametrize("measure", ["jaccard", "adamic-adar"])
def test_exact_too_when_a_stored_degree_only_bounds_the_neighbour_count(client, hubs, measure):
    """With neighbour_type a candidate's stored degree is an upper bound on its
    neighbours of that type: the engine tallies, walks.py scores best first."""
    name, ref, _ = hubs
    details = similar(client, name, measure=measure, neighbour_type="hub")
    expected = [(v.split(":", 1)[1], round(score, 6)) for v, score, _ in
                ref.similar("n:s", {"to"}, measure=measure, neighbour_type="hub")[:10]]
    assert [(e["key"], e["score"]) for e in details["entities"]] == expected
    assert details["hubs"]["certified_exact"] is True


def test_the_trace_says_which_hubs_were_read_and_why_the_answer_is_exact(client, hubs):
    name, _, _ = hubs
    details = similar(client, name)
    trace = details["hubs"]
    assert details["capped"] == ["hub:h1 (1,204 edges)", "hub:h2 (1,204 edges)"]
    assert trace["hubs"] == ["hub:h1", "hub:h2"]          # smallest first (ties: by id)
    assert trace["hubs_read"] == ["hub:h1", "hub:h2"]     # fillers tie at 1/3: both read
    assert trace["hub_edges_read"] >= 2 * 1_204 and trace["edges_read"] >= trace["hub_edges_read"]
    assert "every hub's list was read" in trace["bound"]
    assert trace["note"].startswith("certified exact")
    assert trace["kth_best"] == pytest.approx(1 / 3)


def test_one_hub_read_is_enough_when_the_bound_proves_it(client, hubs):
    """k = 3: the twins (2/3) are the answer; after the smallest hub's list a candidate
    in neither list read shares at most h2: jaccard <= 1/3 < 2/3. (Packed lists are
    read all at once: no bound is needed.)"""
    name, _, lists = hubs
    trace = similar(client, name, k=3)["hubs"]
    if lists == "packed":
        assert trace["certified_exact"] and trace["hubs_read"] == ["hub:h1", "hub:h2"]
        assert trace["rounds"] == 1 and trace["unseen_bound"] == 0
        return
    assert trace["certified_exact"] and trace["hubs_read"] == ["hub:h1"]
    assert "jaccard <= shared / |N(seed)|" in trace["bound"] and "< the k-th best score 0.666667 (k = 3)" in trace["bound"]


def test_the_budget_stops_the_hub_search_and_says_not_certified(client, hubs):
    name, _, _ = hubs
    details = similar(client, name, hub_budget=100)
    trace = details["hubs"]
    assert trace["certified_exact"] is False and trace["hubs_read"] == []
    assert trace["note"].startswith("not certified exact") and "budget of 100 edges" in trace["note"]
    assert trace["edges_read"] <= 100
    # what it does give are the exactly scored candidates through the non-hub
    assert {e["key"] for e in details["entities"]} == {f"x{i:02d}" for i in range(10)}


def test_the_need_table_keeps_exactly_what_can_reach_t():
    bound = Bound("jaccard", 9, [1.0] * 8, exact=True)
    need, beyond = bound.need(6 / 11)
    for degree in range(1, 30):
        for a in range(1, 9):
            for unread in range(8):
                best = max((x / (9 + degree - x) for x in range(1, min(a + unread, degree, 8) + 1)),
                           default=0)
                assert passes(a, degree, unread, need, beyond) == (best >= 6 / 11 - 1e-12)


def degrees_drift(conn, name) -> list:
    """vertex_degrees rows that differ from a recount of the pipeline's edges."""
    return conn.execute("""
        WITH p AS (SELECT id FROM pgbraid.pipelines WHERE name = %s),
        counted AS (SELECT x.vertex, x.type, x.outgoing, count(*) AS edges FROM (
            SELECT e.src AS vertex, e.type, true AS outgoing FROM pgbraid.edges e, p WHERE e.pipeline_id = p.id
            UNION ALL SELECT e.dst, e.type, false FROM pgbraid.edges e, p WHERE e.pipeline_id = p.id) x
            GROUP BY 1, 2, 3),
        stored AS (SELECT g.vertex, g.type, g.outgoing, g.edges FROM pgbraid.vertex_degrees g, p
                    WHERE g.pipeline_id = p.id)
        SELECT * FROM counted FULL JOIN stored USING (vertex, type, outgoing)
         WHERE counted.edges IS DISTINCT FROM stored.edges""", (name,)).fetchall()


def test_degrees_follow_loads_deletes_and_sql_of_your_own(client, pipeline):
    vertices = [("n", k, k, []) for k in "abcde"]
    client.load_graph_records(pipeline, vertices, [("n", "a", "to", "n", "b"), ("n", "a", "to", "n", "c"),
                                                   ("n", "d", "to", "n", "b"), ("n", "a", "likes", "n", "b")])
    client.load_graph_records(pipeline, [], [("n", "a", "to", "n", "b", 2.0), ("n", "e", "to", "n", "b")])
    with client.session() as conn:
        assert degrees_drift(conn, pipeline) == []
        row = conn.execute("SELECT g.edges FROM pgbraid.vertex_degrees g JOIN pgbraid.vertices v"
                           " ON v.id = g.vertex WHERE v.key = 'b' AND g.type = 'to' AND NOT g.outgoing"
                           " AND v.pipeline_id = g.pipeline_id AND g.pipeline_id = (SELECT id FROM"
                           " pgbraid.pipelines WHERE name = %s)", (pipeline,)).fetchone()
        assert row == (3,)  # re-loading a->b (new weight) counted it once
    client.delete_vertex(pipeline, "n", "a")  # cascades to its three edges
    with client.session() as conn:
        assert degrees_drift(conn, pipeline) == []
        conn.execute("UPDATE pgbraid.edges SET type = 'knows' WHERE type = 'to' AND pipeline_id ="
                     " (SELECT id FROM pgbraid.pipelines WHERE name = %s)", (pipeline,))
        conn.execute("DELETE FROM pgbraid.edges WHERE type = 'knows' AND src = (SELECT id FROM"
                      " pgbraid.vertices WHERE key = 'd' AND pipeline_id = pgbraid.edges.pipeline_id)")
        assert degrees_drift(conn, pipeline) == []
    client.delete_pipeline(pipeline)
    with client.session() as conn:
        assert conn.execute("SELECT count(*) FROM pgbraid.vertex_degrees g WHERE NOT EXISTS"
                            " (SELECT 1 FROM pgbraid.pipelines p WHERE p.id = g.pipeline_id)").fetchone() == (0,)


def test_two_concurrent_writers_lose_no_edge_count(client, pipeline):
    """Two transactions add edges into the same vertex at once: the second waits for
    the first's row lock, then adds its own delta to the committed count."""
    client.load_graph_records(pipeline, [("n", "hub", "Hub", [])] + [("n", f"v{i}", "", []) for i in range(40)])
    first_in, release = threading.Event(), threading.Event()
    errors = []

    def write(keys, hold):
        try:
            with client.session() as conn:
                pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (pipeline,)).fetchone()[0]
                hub = conn.execute("SELECT id FROM pgbraid.vertices WHERE pipeline_id = %s"
                                   " AND key = 'hub'", (pid,)).fetchone()[0]
                ids = [r[0] for r in conn.execute("SELECT id FROM pgbraid.vertices WHERE"
                                                  " pipeline_id = %s AND key = ANY(%s)", (pid, keys))]
                # INSERT ... VALUES (on Citus an INSERT ... SELECT into edges is refused)
                conn.cursor().executemany("INSERT INTO pgbraid.edges (pipeline_id, src, type, dst)"
                                          " VALUES (%s, %s, 'to', %s)", [(pid, i, hub) for i in ids])
                if hold:
                    first_in.set()
                    release.wait(10)
        except (psycopg.Error, AssertionError) as exc:  # reported below: fails the test
            errors.append(exc)

    one = threading.Thread(target=write, args=([f"v{i}" for i in range(20)], True))
    one.start()
    assert first_in.wait(10)
    two = threading.Thread(target=write, args=([f"v{i}" for i in range(20, 40)], False))
    two.start()
    two.join(0.5)
    assert two.is_alive()  # waiting on the hub's count, held by the first writer
    release.set()
    one.join(10)
    two.join(10)
    assert errors == []
    with client.session() as conn:
        assert degrees_drift(conn, pipeline) == []
        assert conn.execute("SELECT g.edges FROM pgbraid.vertex_degrees g JOIN pgbraid.vertices v ON"
                            " v.id = g.vertex WHERE v.key = 'hub' AND v.pipeline_id = g.pipeline_id"
                            " AND NOT g.outgoing AND g.pipeline_id = (SELECT id FROM pgbraid.pipelines"
                            " WHERE name = %s)", (pipeline,)).fetchone() == (40,)


def test_one_vertex_type_needs_no_type_lookup_and_stays_exact(client, pipeline):
    """Every vertex is of the seed's type (the pipeline knows no other): candidates are
    not looked up for their type, and the answer is still the reference's."""
    edges = ([("n", "s", "to", "n", h) for h in ("h1", "h2", "m")]
             + [("n", f"c{i}", "to", "n", f"h{1 + i % 2}") for i in range(8)]
             + [("n", "c9", "to", "n", "h1"), ("n", "c9", "to", "n", "h2"), ("n", "c8", "to", "n", "m")])
    keys = sorted({e[1] for e in edges} | {e[4] for e in edges})
    client.load_graph_records(pipeline, [("n", k, k, []) for k in keys], edges)
    details = similar(client, pipeline, max_fanout=3, k=4)
    expected = [(v.split(":", 1)[1], round(score, 6)) for v, score, _ in
                Reference(edges).similar("n:s", {"to"})[:4]]
    assert [(e["key"], e["score"]) for e in details["entities"]] == expected
    assert details["entities"][0]["key"] == "c9" and details["hubs"]["certified_exact"]


def jump_graph():
    """A seed s -> h1 < h2 < h3 < h4 (hubs at max_fanout 10, by size). Three "triples"
    point at h1, h2 and a private vertex each (jaccard 2/5); fillers point at one hub
    each (1/4). After h1's list the k-th best (k = 3) is 2/5, and a candidate in none
    of the lists read scores at most (4 - read) / 4: below 2/5 only once three are read."""
    vertices = [("n", "s", "Seed", [])] + [("hub", f"h{i}", f"H{i}", []) for i in range(1, 5)]
    edges = [("n", "s", "to", "hub", f"h{i}") for i in range(1, 5)]
    for i in range(3):
        vertices += [("n", f"t{i}", f"triple {i}", []), ("hub", f"p{i}", f"p{i}", [])]
        edges += [("n", f"t{i}", "to", "hub", "h1"), ("n", f"t{i}", "to", "hub", "h2"),
                  ("n", f"t{i}", "to", "hub", f"p{i}")]
    for hub, fillers in (("h1", 9), ("h2", 11), ("h3", 16), ("h4", 18)):
        for i in range(fillers):
            vertices.append(("n", f"f{hub}{i:02d}", f"f{hub}{i}", []))
            edges.append(("n", f"f{hub}{i:02d}", "to", "hub", hub))
    return vertices, edges


def test_after_the_first_round_it_reads_as_far_as_the_kth_best_needs_in_one_go(client, pipeline):
    """The first round (h1) scores the triples, and keeps their exact scores although they
    are below what could certify after h1: t = 2/5 says three lists are needed, read in
    the second round. Before, a candidate scored below the round's bound was dropped
    and scored again in each later round (h1, h1 + h2, then h1..h3: three rounds)."""
    vertices, edges = jump_graph()
    client.load_graph_records(pipeline, vertices, edges)
    unpack(client, pipeline)
    details = similar(client, pipeline, k=3, max_fanout=10)
    expected = [(v.split(":", 1)[1], round(score, 6))
                for v, score, _ in Reference(edges).similar("n:s", {"to"})[:3]]
    assert [(e["key"], e["score"]) for e in details["entities"]] == expected
    assert [e["key"] for e in details["entities"]] == ["t0", "t1", "t2"]
    trace = details["hubs"]
    assert trace["certified_exact"] is True and trace["kth_best"] == pytest.approx(0.4)
    assert trace["hubs_read"] == ["hub:h1", "hub:h2", "hub:h3"] and trace["rounds"] == 2
