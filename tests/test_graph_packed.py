"""graph similar over packed lists (migration 047, graph/packed.py, graph/tally.py): the
packed lists and degree blocks follow every load and delete, a graph written by SQL of
your own is read as rows until its next load repacks it, and the packed answer is the
row path's and the reference's, for every measure, direction and scope."""

from __future__ import annotations

import random
import threading
import uuid

import numpy as np
import pytest

import pgbraid
from pgbraid.strategies.graph import packed, store
from pgbraid.strategies.graph.reference import Reference
from pgbraid.tenancy import Principal

from .test_graph_hubs import unpack


def pipeline_id(conn, name) -> int:
    return conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (name,)).fetchone()[0]


def drift(conn, name) -> list:
    """What the packed lists and degree blocks say that a recount of the edges does not,
    and whether the pipeline's packing is stamped current."""
    pid = pipeline_id(conn, name)
    wrong = []
    lists: dict[tuple, set] = {}
    for src, etype, dst in conn.execute("SELECT src, type, dst FROM pgbraid.edges WHERE"
                                        " pipeline_id = %s", (pid,)):
        lists.setdefault((src, etype, True), set()).add(dst)
        lists.setdefault((dst, etype, False), set()).add(src)
    stored: dict[tuple, list] = {}
    for v, t, o, span, m in conn.execute("SELECT vertex, type, outgoing, span, members FROM"
                                         " pgbraid.neighbour_lists WHERE pipeline_id = %s",
                                         (pid,), binary=True):
        offsets = np.frombuffer(m, dtype=">i2").astype(np.int64)
        if not len(offsets) or offsets.min() < 0 or offsets.max() >= packed.SPAN:
            wrong.append(("span", v, t, o, span))
        stored.setdefault((v, t, o), []).extend((offsets + span * packed.SPAN).tolist())
    big = {key: members for key, members in lists.items() if len(members) >= packed.PACK_MIN}
    if any(len(set(m)) != len(m) for m in stored.values()):
        wrong.append("repeated")
    stored = {key: set(m) for key, m in stored.items()}
    if stored != big:
        wrong.append(("lists", sorted(set(stored) ^ set(big)), sorted(
            k for k in set(stored) & set(big) if stored[k] != big[k])))
    for (v, t, o), members in lists.items():
        found = packed.degrees(conn, pid, np.array([v]), t, o)[0]
        if found != len(members):
            wrong.append(("degree", v, t, o, int(found), len(members)))
    blocks = conn.execute("SELECT sum(length(slots)) / 2 FROM pgbraid.degree_blocks WHERE"
                          " pipeline_id = %s", (pid,)).fetchone()[0] or 0
    if blocks != len(lists):  # a block slot for each (vertex, type, direction), no more
        wrong.append(("blocks", int(blocks), len(lists)))
    if not conn.execute("SELECT packed_version = version FROM pgbraid.graph_versions WHERE"
                        " pipeline_id = %s", (pid,)).fetchone()[0]:
        wrong.append("stale")
    return wrong


def star(hub: str, keys, etype="to") -> list[tuple]:
    return [("n", k, etype, "n", hub) for k in keys]


def test_packed_lists_follow_loads_reloads_and_deletes(client, pipeline):
    """A hub growing past PACK_MIN, re-loaded edges (new weights), a second edge type,
    a deleted leaf (the hub's list shrinks), a deleted hub (every list it was in)."""
    keys = [f"v{i:03d}" for i in range(packed.PACK_MIN + 10)]
    vertices = [("n", k, k, []) for k in keys + ["hub", "other"]]
    client.load_graph_records(pipeline, vertices, star("hub", keys[:packed.PACK_MIN - 1]))
    with client.session() as conn:
        assert drift(conn, pipeline) == []
        assert conn.execute("SELECT count(*) FROM pgbraid.neighbour_lists WHERE pipeline_id = %s",
                            (pipeline_id(conn, pipeline),)).fetchone() == (0,)  # 63: rows
    client.load_graph_records(pipeline, [], star("hub", keys) + star("other", keys[:70], "likes")
                              + [("n", "hub", "to", "n", k) for k in keys[:packed.PACK_MIN]])
    with client.session() as conn:
        assert drift(conn, pipeline) == []
        assert conn.execute("SELECT count(*) FROM pgbraid.neighbour_lists WHERE pipeline_id = %s",
                            (pipeline_id(conn, pipeline),)).fetchone() == (3,)
    client.load_graph_records(pipeline, [], [(*e, 2.0) for e in star("hub", keys[:5])])
    client.delete_vertex(pipeline, "n", keys[0])
    with client.session() as conn:
        assert drift(conn, pipeline) == []
    # a neighbour whose id lies a span further: the hub's list gains a span, then loses it
    client.load_graph_records(pipeline, [("n", f"filler{i}", "", []) for i in range(packed.SPAN)]
                              + [("n", "far", "far", [])], star("hub", ["far"]))
    with client.session() as conn:
        pid = pipeline_id(conn, pipeline)
        spans = conn.execute("SELECT count(*) FROM pgbraid.neighbour_lists l JOIN pgbraid.vertices v"
                             " ON v.id = l.vertex WHERE l.pipeline_id = %s AND v.pipeline_id = %s"
                             " AND v.key = 'hub' AND NOT l.outgoing", (pid, pid)).fetchone()[0]
        assert spans >= 2 and drift(conn, pipeline) == []
    client.delete_vertex(pipeline, "n", "far")
    with client.session() as conn:
        assert drift(conn, pipeline) == []
    client.delete_vertex(pipeline, "n", "hub")
    with client.session() as conn:
        assert drift(conn, pipeline) == []


def test_sql_of_your_own_leaves_rows_until_the_next_load_repacks(client, pipeline):
    keys = [f"v{i:03d}" for i in range(80)]
    edges = star("hub", keys) + star("h2", keys[:70]) + [("n", "s", "to", "n", "hub"),
                                                         ("n", "s", "to", "n", "h2")]
    client.load_graph_records(pipeline, [("n", k, k, []) for k in keys + ["hub", "h2", "s"]], edges)
    params = {"seed": "s", "mode": "similar", "edge_type": "to", "max_fanout": 10, "k": 10}
    first = client.search(pipeline, "x", type="graph", params=params).trace.retrievers[0].details
    assert first["hubs"]["lists"].startswith("packed")
    with client.session() as conn:
        conn.execute("DELETE FROM pgbraid.edges WHERE pipeline_id = %s AND dst = (SELECT id FROM"
                     " pgbraid.vertices WHERE pipeline_id = %s AND key = 'h2') AND src IN (SELECT id"
                     " FROM pgbraid.vertices WHERE pipeline_id = %s AND key < 'v010')",
                     (pipeline_id(conn, pipeline),) * 3)
        assert drift(conn, pipeline) != []  # the h2 list still holds the deleted edges
    after = client.search(pipeline, "x", type="graph", params=params).trace.retrievers[0].details
    assert after["hubs"]["lists"].startswith("rows")
    kept = [e for e in edges if not (e[4] == "h2" and e[1] < "v010")]
    expected = [(v.split(":", 1)[1], round(s, 6)) for v, s, _ in
                Reference(kept).similar("n:s", {"to"})[:10]]
    assert [(e["key"], e["score"]) for e in after["entities"]] == expected
    client.load_graph_records(pipeline, [("n", "late", "late", [])], [])  # repacks it all
    with client.session() as conn:
        assert drift(conn, pipeline) == []
    again = client.search(pipeline, "x", type="graph", params=params).trace.retrievers[0].details
    assert again["hubs"]["lists"].startswith("packed") and again["entities"] == after["entities"]


def random_graph(rng: random.Random):
    """Two vertex types; sources point at a few targets drawn from a skewed
    distribution (hubs at max_fanout 4), some targets point back."""
    people = [f"p{i:03d}" for i in range(160)]
    places = [f"q{i:02d}" for i in range(30)]
    edges = set()
    for p in people:
        for _ in range(rng.randint(1, 6)):
            edges.add(("person", p, "to", "place", places[min(int(rng.paretovariate(1.1)) - 1, 29)]))
        if rng.random() < 0.2:
            edges.add(("person", p, "to", "person", rng.choice(people)))
    edges = {e for e in edges if e[1] != e[4]}
    vertices = [("person", p, p, []) for p in people] + [("place", q, q, []) for q in places]
    return vertices, sorted(edges)


@pytest.mark.parametrize("graph_seed", [1, 2])
def test_packed_answers_equal_the_row_path_and_the_reference(client, graph_seed):
    """Every measure, both directions, a candidate type: the packed tally, the rows in
    rounds (the same pipeline once made stale) and the plain-Python reference agree."""
    rng = random.Random(graph_seed)
    vertices, edges = random_graph(rng)
    ref = Reference(edges)
    name = f"packed-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    client.load_graph_records(name, vertices, edges)
    cases = [({"seed": p, "seed_type": "person", "measure": m, "direction": "out"}, f"person:{p}")
             for p in rng.sample([v[1] for v in vertices if v[0] == "person"], 6)
             for m in ("jaccard", "cosine", "adamic-adar")]
    cases += [({"seed": q, "seed_type": "place", "measure": "jaccard", "direction": "in"},
               f"place:{q}") for q in ("q00", "q01", "q05")]

    def answers():
        found = []
        for params, _ in cases:
            details = client.search(name, "x", type="graph", params={
                "mode": "similar", "edge_type": "to", "k": 5, "max_fanout": 4, **params}
            ).trace.retrievers[0].details
            found.append(([(e["key"], e["score"], e["evidence"]) for e in details["entities"]],
                          details.get("hubs", {}).get("lists")))
        return found

    fast = answers()
    unpack(client, name)
    slow = answers()
    assert [a for a, _ in fast] == [a for a, _ in slow]
    assert any(lists and lists.startswith("packed") for _, lists in fast)
    assert not any(lists and lists.startswith("packed") for _, lists in slow)
    for (params, seed), (entities, _) in zip(cases, fast):
        found = ref.similar(seed, {"to"}, direction=params["direction"], measure=params["measure"])
        # ties by key: the reference sums Adamic-Adar weights in a set's order (last bits)
        expected = sorted((v.split(":", 1)[1], round(s, 6)) for v, s, _ in found)
        expected = sorted(expected, key=lambda e: -e[1])[:5]
        assert [(key, score) for key, score, _ in entities] == expected, params


def test_a_narrower_scope_gets_the_row_paths_answer_and_no_hidden_document(client, data_dir):
    """Entities' documents are cited within the reader's scope: a reader without the
    classification sees the same entities (packed or rows) but not the secret document,
    in the hits or the evidence; another tenant reads none of the packed rows."""
    name = f"scoped-{uuid.uuid4().hex[:8]}"
    secret = f"g3-secret-{uuid.uuid4().hex[:6]}"
    client.create_pipeline(name, embedder="none")
    client.define_classification(secret)
    client.ingest(name, [{"id": "open", "text": "an open note"},
                         {"id": "hidden", "text": "a secret note", "classification": [secret]}])
    keys = [f"v{i:03d}" for i in range(90)]
    docs = {"v001": ["open"], "v002": ["hidden"], "v003": ["open", "hidden"]}
    vertices = [("n", k, k, docs.get(k, [])) for k in keys + ["hub", "h2", "s"]]
    edges = (star("hub", keys) + star("h2", keys[:4]) + [("n", "s", "to", "n", "hub"),
                                                        ("n", "s", "to", "n", "h2")])
    client.load_graph_records(name, vertices, edges)
    params = {"seed": "s", "mode": "similar", "edge_type": "to", "max_fanout": 10, "k": 5}
    allowed = {name: frozenset({"read", "execute"})}
    narrow, holder = Principal("default", allowed, frozenset()), Principal("default", allowed,
                                                                          frozenset({secret}))

    def both(who):
        response = who.search(name, "x", type="graph", params=params)
        details = response.trace.retrievers[0].details
        return details["entities"], [(h.document_id, h.score) for h in response.hits], details

    with pgbraid.connect(data_dir=data_dir, principal=narrow) as reader, \
            pgbraid.connect(data_dir=data_dir, principal=holder) as cleared:
        fast_all, fast_reader = both(cleared), both(reader)
        unpack(client, name)
        slow_all, slow_reader = both(cleared), both(reader)
    assert fast_all[2]["hubs"]["lists"].startswith("packed")
    assert slow_reader[2]["hubs"]["lists"].startswith("rows")
    assert fast_all[:2] == slow_all[:2] and fast_reader[:2] == slow_reader[:2]
    assert [e["key"] for e in fast_reader[0]] == [e["key"] for e in fast_all[0]]
    assert {d for d, _ in fast_all[1]} == {"open", "hidden"}
    assert {d for d, _ in fast_reader[1]} == {"open"}
    assert all("hidden" not in e["documents"] for e in fast_reader[0])
    with pgbraid.connect(data_dir=data_dir, tenant=f"other-{uuid.uuid4().hex[:6]}") as other:
        with other.session() as conn:
            assert conn.execute("SELECT count(*) FROM pgbraid.neighbour_lists").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM pgbraid.degree_blocks").fetchone() == (0,)


def test_two_concurrent_loads_into_one_hub_leave_its_list_whole(client, pipeline):
    """The second load waits for the first's graph lock, then repacks from the edges the
    first committed: the hub's packed list holds both loads' edges."""
    keys = [f"v{i:03d}" for i in range(2 * packed.PACK_MIN)]
    client.load_graph_records(pipeline, [("n", k, k, []) for k in keys + ["hub"]])
    first_in, release, errors = threading.Event(), threading.Event(), []

    def write(part, hold):
        try:
            with client.session() as conn:
                store.load(conn, pipeline_id(conn, pipeline), store.from_records([], star("hub", part)))
                if hold:
                    first_in.set()
                    release.wait(10)
        except Exception as exc:  # reported below: fails the test
            errors.append(exc)

    one = threading.Thread(target=write, args=(keys[:packed.PACK_MIN], True))
    one.start()
    assert first_in.wait(10)
    two = threading.Thread(target=write, args=(keys[packed.PACK_MIN:], False))
    two.start()
    two.join(0.5)
    assert two.is_alive()  # waiting for the pipeline's graph lock
    release.set()
    one.join(10)
    two.join(10)
    assert errors == []
    with client.session() as conn:
        assert drift(conn, pipeline) == []


def test_candidates_whose_ids_lie_far_apart_are_scored_packed(client, pipeline, superuser):
    """Vertex ids come from one identity shared by every pipeline and tenant (and an
    upsert spends one per row even when the row exists): a pipeline's candidates can lie
    2^40 ids apart. Their degrees are read from the packed blocks without an array over
    the whole range between them (it was np.zeros(2^40): the search failed)."""
    near = [f"a{i:03d}" for i in range(70)]
    far = [f"z{i:03d}" for i in range(5)]
    client.load_graph_records(pipeline, [("n", k, k, []) for k in near + ["hub", "h2", "s"]], [])
    sequence = "pg_get_serial_sequence('pgbraid.vertices', 'id')"
    before = superuser.execute(f"SELECT nextval({sequence})").fetchone()[0]
    superuser.execute(f"SELECT setval({sequence}, %s)", (before + 2**40,))
    try:
        client.load_graph_records(pipeline, [("n", k, k, []) for k in far], [])
    finally:
        superuser.execute(f"SELECT setval({sequence}, %s)", (before + 1,))
    edges = (star("hub", near + far) + star("h2", near[:3] + far[:2])
             + [("n", "s", "to", "n", "hub"), ("n", "s", "to", "n", "h2")])
    client.load_graph_records(pipeline, [], edges)
    with client.session() as conn:
        assert drift(conn, pipeline) == []
    for measure in ("jaccard", "cosine"):
        details = client.search(pipeline, "x", type="graph", params={
            "seed": "s", "mode": "similar", "edge_type": "to", "max_fanout": 10, "k": 5,
            "measure": measure}).trace.retrievers[0].details
        assert details["hubs"]["lists"].startswith("packed")
        expected = sorted((v.split(":", 1)[1], round(s, 6)) for v, s, _ in
                          Reference(edges).similar("n:s", {"to"}, measure=measure))
        expected = sorted(expected, key=lambda e: -e[1])[:5]
        assert [(e["key"], e["score"]) for e in details["entities"]] == expected
