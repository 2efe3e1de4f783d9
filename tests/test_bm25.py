"""bm25: parity with bm25s, the long code-chunk query, diagnostics, and index upkeep."""

from __future__ import annotations

import json

import bm25s
import numpy as np
import pytest

import pgbraid
from pgbraid import FieldMap, InvalidRequest, NotEnabled
from pgbraid.ingest import bm25_index
from pgbraid.ingest.tokens import expand_code

from .conftest import shared
from .test_formats import KEV, KEV_FIELDS
from .test_fulltext import PLAYER_PAGE, godot  # noqa: F401  (module fixture)

PROCESS_BODY = '''func _process(delta):
    var velocity = Vector2.ZERO # The player's movement vector.
    if Input.is_action_pressed("move_right"):
        velocity.x += 1
    if Input.is_action_pressed("move_left"):
        velocity.x -= 1
    if Input.is_action_pressed("move_down"):
        velocity.y += 1
    if Input.is_action_pressed("move_up"):
        velocity.y -= 1

    if velocity.length() > 0:
        velocity = velocity.normalized() * speed
        $AnimatedSprite2D.play()
    else:
        $AnimatedSprite2D.stop()

    position += velocity * delta
    position = position.clamp(Vector2.ZERO, screen_size)'''


@pytest.fixture(scope="module")
def cranfield(data_dir, server):
    with pgbraid.connect(data_dir=data_dir) as client:
        if "cranfield" not in {p.name for p in client.pipelines()}:
            client.create_pipeline("cranfield", embedder="none")
            report = client.ingest("cranfield", [shared("cranfield", "corpus.jsonl.gz")],
                                   fields=FieldMap(id="_id"))
            assert report.added == 1400 - 2 and len(report.failed) == 2  # two empty abstracts
    return "cranfield"


def _corpus_tokens(client, pipeline):
    with client.session() as conn:
        rows = conn.execute(
            "SELECT f.bm25_ordinal, f.bm25_terms, f.bm25_tfs FROM pgbraid.fragments f"
            " JOIN pgbraid.pipelines p ON p.id = f.pipeline_id WHERE p.name = %s AND f.current"
            " ORDER BY f.bm25_ordinal", (pipeline,)).fetchall()
    ordinals = [r[0] for r in rows]
    tokens = [[t for t, n in zip(terms, tfs) for _ in range(n)] for _, terms, tfs in rows]
    return ordinals, tokens


def _query_tokens(client, config, query):
    with client.session() as conn:
        return [lexeme for lexeme, n in conn.execute(
            "SELECT lexeme, array_length(positions, 1) FROM unnest(to_tsvector(%s::regconfig, %s))",
            (config, expand_code(query))) for _ in range(n)]


@pytest.mark.parametrize(("inline", "pruning"), [(2048, "none"), (0, "none"), (0, "maxscore"),
                                                (2048, "blockmax"), (0, "blockmax")],
                         ids=["inline-lists", "cached-lists", "maxscore", "blockmax-inline",
                              "blockmax-cached"])
def test_scores_and_top10_equal_bm25s_on_cranfield(client, cranfield, inline, pruning,
                                                   monkeypatch):
    from pgbraid.strategies import bm25

    monkeypatch.setattr(bm25, "INLINE_POSTINGS", inline)
    ordinals, tokens = _corpus_tokens(client, cranfield)
    reference = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    reference.index(tokens, show_progress=False)
    position = {ordinal: i for i, ordinal in enumerate(ordinals)}
    with client.session() as conn:
        ordinal_of = dict(conn.execute(
            "SELECT f.id, f.bm25_ordinal FROM pgbraid.fragments f JOIN pgbraid.pipelines p"
            " ON p.id = f.pipeline_id WHERE p.name = %s AND f.current", (cranfield,)).fetchall())
    queries = [json.loads(line) for line in shared("cranfield", "queries.jsonl").open()]
    assert len(queries) == 225
    for query in queries:
        response = client.search(cranfield, query["text"], type="bm25",
                                 params={"k": 10, "pruning": pruning})
        config = response.trace.retrievers[0].details["config"]
        expected = reference.get_scores(_query_tokens(client, config, query["text"]))
        ours = [h.score for h in response.hits]
        best = np.sort(expected)[::-1][:10]
        np.testing.assert_allclose(ours, best[: len(ours)], atol=1e-4, err_msg=query["text"])
        for hit in response.hits:  # same fragments at the same ranks (up to exact ties)
            assert expected[position[ordinal_of[hit.fragment_id]]] == pytest.approx(hit.score, abs=1e-4)


def test_pruning_ranks_exactly_like_scoring_every_posting(client, cranfield):
    """MaxScore engages on most Cranfield queries; neither it nor block-max (nor auto)
    ever changes a rank, a score or the matched terms."""
    queries = [json.loads(line)["text"] for line in shared("cranfield", "queries.jsonl").open()]
    pruned = 0
    for query in queries:
        results = []
        for pruning in ("maxscore", "none", "blockmax", "auto"):
            response = client.search(cranfield, query, type="bm25",
                                     params={"k": 30, "pruning": pruning})
            results.append([(h.fragment_id, h.score, h.matched_terms) for h in response.hits])
            details = response.trace.retrievers[0].details
            pruned += pruning == "maxscore" and not details["exhaustive"]
        assert results[0] == results[1] == results[2] == results[3], query
    assert pruned > len(queries) // 2
    with pytest.raises(InvalidRequest, match="pruning"):
        client.search(cranfield, "wing", type="bm25", params={"pruning": "wand"})


def test_long_code_chunk_finds_the_page_where_fulltext_finds_nothing(client, godot):  # noqa: F811
    bm25 = client.search(godot, PROCESS_BODY, type="bm25", params={"k": 3})
    assert PLAYER_PAGE in [h.document_id for h in bm25.hits]
    assert bm25.hits[0].document_id == PLAYER_PAGE
    assert {"animatedsprite2d", "isactionpress", "veloc"} <= set(bm25.hits[0].matched_terms)
    grouped = client.search(godot, PROCESS_BODY, type="search", params={"k": 3}, group_by="document")
    assert grouped.hits[0].document_id == PLAYER_PAGE

    fulltext = client.search(godot, PROCESS_BODY, type="fulltext", params={"k": 3})
    details = fulltext.trace.retrievers[0].details
    assert len(fulltext.hits) <= 1
    if not fulltext.hits:
        assert details["restricting_tokens"] or details["best_partial"]["tokens_matched"] < len(details["tokens"])


def test_diagnostics_name_terms_with_df_and_idf(client, godot):  # noqa: F811
    response = client.search(godot, "AnimatedSprite2D quaternionslerp", type="bm25", params={"k": 2})
    details = response.trace.retrievers[0].details
    terms = {t["term"]: t for t in details["terms"]}
    assert terms["quaternionslerp"]["df"] == 0 and terms["quaternionslerp"]["idf"] == 0.0
    assert terms["animatedsprite2d"]["df"] > 0 and terms["animatedsprite2d"]["idf"] > 0
    assert details["k1"] == 0.9 and details["b"] == 0.4 and details["documents"] > 5000
    for hit in response.hits:
        assert "animatedsprite2d" in hit.matched_terms and "quaternionslerp" not in hit.matched_terms
        assert set(hit.matched_terms) <= set(terms)


def test_code_identifiers_match_their_parts(client, pipeline):
    client.ingest(pipeline, [{"id": "code", "text": "Call is_action_pressed on the AnimatedSprite2D."},
                             {"id": "prose", "text": "The action was pressed by an animated sprite."}])
    exact = client.search(pipeline, "is_action_pressed", type="bm25", params={"k": 2})
    assert exact.hits[0].document_id == "code"
    parts = client.search(pipeline, "animated sprite", type="bm25", params={"k": 2})
    assert {h.document_id for h in parts.hits} == {"code", "prose"}


def test_an_unversioned_name_finds_its_versions_in_kev(client, pipeline):
    client.ingest(pipeline, [KEV], fields=KEV_FIELDS)  # its records say "Log4j2", never "Log4j"
    hits = client.search(pipeline, "Log4j", type="bm25", params={"k": 3}).hits
    assert "CVE-2021-44228" in [h.document_id for h in hits]
    # fulltext keeps PostgreSQL's words (log4j2); tokens.py says why
    assert client.search(pipeline, "Log4j", type="fulltext").hits == ()
    exact = client.search(pipeline, "Log4j2", type="fulltext", params={"k": 3}).hits
    assert "CVE-2021-44228" in [h.document_id for h in exact]


def test_an_expired_version_stops_counting(client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "xylophone practice"}, {"id": "b", "text": "drum practice"}])
    client.ingest(pipeline, [{"id": "a", "text": "marimba practice"}])
    assert client.search(pipeline, "xylophone", type="bm25").hits == ()
    details = client.search(pipeline, "practice marimba", type="bm25").trace.retrievers[0].details
    df = {t["term"]: t["df"] for t in details["terms"]}
    assert df == {"practic": 2, "marimba": 1} and details["documents"] == 2
    (hit,) = client.search(pipeline, "marimba", type="bm25").hits
    assert (hit.document_id, hit.version) == ("a", 2)


def test_many_segments_merge_and_drop_dead_postings(client, pipeline):
    """Each call's segment loses half its fragments to the next call (a new version of
    "shared"): dead-heavy segments are rewritten at once, so no expired posting stays."""
    for i in range(bm25_index.MERGE_FACTOR + 2):
        client.ingest(pipeline, [{"id": f"d{i}", "text": f"common word {i} unique{i}"},
                                 {"id": "shared", "text": f"shared text revision {i}"}])
    with client.session() as conn:
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (pipeline,)).fetchone()[0]
        segments = conn.execute("SELECT count(*) FROM pgbraid.bm25_segments WHERE pipeline_id = %s",
                                (pid,)).fetchone()[0]
        stored = conn.execute("SELECT sum(postings) FROM pgbraid.bm25_postings"
                              " WHERE pipeline_id = %s AND term = 'revis'", (pid,)).fetchone()[0]
        dead = conn.execute("SELECT count(*) FROM pgbraid.bm25_dead WHERE pipeline_id = %s",
                            (pid,)).fetchone()[0]
        assert segments < bm25_index.MERGE_FACTOR and stored == 1 and dead == 0
        bm25_index.merge_tiers(conn, pid, everything=True)
        assert conn.execute("SELECT count(*) FROM pgbraid.bm25_segments WHERE pipeline_id = %s",
                            (pid,)).fetchone()[0] == 1
    hits = client.search(pipeline, "common shared", type="bm25", params={"k": 20}).hits
    assert len(hits) == bm25_index.MERGE_FACTOR + 3
    assert [h.version for h in hits if h.document_id == "shared"] == [bm25_index.MERGE_FACTOR + 2]


def test_scope_applies_before_the_top_k(client, pipeline):
    docs = [{"id": f"n{i}", "text": "needle " * 5, "metadata": {"keep": False}} for i in range(50)]
    docs.append({"id": "kept", "text": "needle in a long haystack of many words", "metadata": {"keep": True}})
    client.ingest(pipeline, docs)
    (hit,) = client.search(pipeline, "needle", type="bm25", params={"k": 5}, filters={"keep": True}).hits
    assert hit.document_id == "kept"


@pytest.mark.parametrize("query", ["the of and", "!!! ???", "—"])
def test_stop_words_or_punctuation_is_empty_with_a_reason(client, godot, query):  # noqa: F811
    response = client.search(godot, query, type="bm25")
    assert response.hits == ()
    assert "no searchable words" in response.trace.retrievers[0].details["explanation"]


def test_long_and_foreign_queries(client, godot):  # noqa: F811
    assert client.search(godot, "position " * 1100, type="bm25").hits  # ~10 kB
    with pytest.raises(InvalidRequest, match="limit"):
        client.search(godot, "position " * 1200, type="bm25")
    assert client.search(godot, "Привет мир 日本語 テキスト", type="bm25").hits == ()
    with pytest.raises(InvalidRequest):
        client.search(godot, "velocity\x00", type="bm25")
    with pytest.raises(InvalidRequest):
        client.search(godot, "velocity", type="bm25", params={"b": 1.5})


def test_pg_search_gate_and_relational_send_nothing():
    """An unreachable server: a disabled gate and the no-op must answer without it."""
    with pgbraid.connect(dsn="host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x") as client:
        with pytest.raises(NotEnabled, match="PGBRAID_PGSEARCH"):
            client.search("any", "metal fabrication", type="bm25", params={"engine": "pg_search"})
        response = client.search("any", "metal fabrication", type="relational")
        assert response.hits == () and response.trace.retrievers[0].status == "ran"
        with pytest.raises(InvalidRequest):
            client.search("any", "x", type="fuzzy", params={"threshold": 2})
        with pytest.raises(NotEnabled, match="PGBRAID_AGE"):
            client.search("any", "x", type="graph", params={"seed": "G0016", "engine": "age"})
        assert client._db._pool is None  # no connection was ever opened


def test_pg_search_when_installed_and_opted_in(data_dir, server, monkeypatch):
    monkeypatch.setenv("PGBRAID_PGSEARCH", "1")
    with pgbraid.connect(data_dir=data_dir) as client:
        client.pipelines()
        if "pg_search" not in client._db.extensions:
            pytest.skip("pg_search is not installed on this server")
        client.create_pipeline("pdb", embedder="none")
        client.ingest("pdb", [{"id": "1", "text": "metal fabrication services"}])
        response = client.search("pdb", "metal fabrication", type="bm25")
        assert response.trace.retrievers[0].details["engine"] == "pg_search"
        assert response.hits[0].document_id == "1"


def _bm25(client, pipeline, query, k=10):
    response = client.search(pipeline, query, type="bm25", params={"k": k})
    return [(h.document_id, h.version, round(h.score, 5)) for h in response.hits], \
        response.trace.retrievers[0].details


def test_cached_postings_are_reused_and_never_stale(client, pipeline, data_dir, monkeypatch):
    from pgbraid.strategies import bm25

    monkeypatch.setattr(bm25, "INLINE_POSTINGS", 0)  # every list through the cache
    client.ingest(pipeline, [{"id": f"d{i}", "text": f"practice makes perfect {i} " + "scales " * (i % 4)}
                             for i in range(40)])
    first, details = _bm25(client, pipeline, "practice scales")
    assert details["postings_fetched"] == details["postings"] > 0
    again, details = _bm25(client, pipeline, "practice scales")
    assert again == first and details["postings_fetched"] == 0  # served from memory
    # New versions, new fragments and merged segments: the cache must not show the old ones.
    client.ingest(pipeline, [{"id": "d3", "text": "scales scales scales only"},
                             {"id": "new", "text": "practice scales practice"}])
    for i in range(bm25_index.MERGE_FACTOR):
        client.ingest(pipeline, [{"id": f"extra{i}", "text": f"practice {i}"}])
    cached, _ = _bm25(client, pipeline, "practice scales", k=60)
    with pgbraid.connect(data_dir=data_dir, postings_cache_mb=0) as uncached_client:
        uncached, details = _bm25(uncached_client, pipeline, "practice scales", k=60)
    assert cached == uncached and details["postings_fetched"] == details["postings"]
    assert ("d3", 2) in {(d, v) for d, v, _ in cached} and ("d3", 1) not in {(d, v) for d, v, _ in cached}


def test_postings_cache_stays_within_its_budget():
    from pgbraid.strategies.bm25_postings import Postings, PostingsCache

    def postings(n):
        return Postings(np.arange(n, dtype="<i4"), np.ones(n, "<u2"), np.full(n, 10, "<u2"))

    cache = PostingsCache(max_bytes=postings(1000).nbytes * 3)
    for segment in range(10):
        cache.put((1, None, segment, "term"), postings(1000))
        assert cache.size_bytes <= cache.max_bytes
    assert cache.get((1, None, 9, "term")) is not None and cache.get((1, None, 0, "term")) is None
    cache.put((1, None, 99, "huge"), postings(10_000))  # larger than the budget: not kept
    assert cache.get((1, None, 99, "huge")) is None
    impacts = postings(3).impacts(0.9, 0.4, 10.0)
    np.testing.assert_allclose(impacts, 1 / (1 + 0.9), rtol=1e-6)  # dl == avgdl


def test_a_monolingual_pipeline_tokenizes_queries_in_its_language(client, pipeline, data_dir):
    german = "Die Geschwindigkeit des Spielers wird jede Sekunde berechnet"
    client.ingest(pipeline, [{"id": "en", "text": "The player's speed is computed every second."}])
    for strategy in ("bm25", "fulltext", "bm25"):  # the second bm25 runs on what the first learnt
        details = client.search(pipeline, german, type=strategy).trace.retrievers[0].details
        assert details["config"] == "english", strategy
    client.ingest(pipeline, [{"id": "de", "text": german, "language": "de"}])
    for strategy in ("bm25", "fulltext"):  # a second language: detection again, at once
        response = client.search(pipeline, german, type=strategy)
        assert response.trace.retrievers[0].details["config"] == "german", strategy
        assert response.hits[0].document_id == "de"
    with pgbraid.connect(data_dir=data_dir) as fresh:  # a process that never saw the pipeline
        details = fresh.search(pipeline, german, type="bm25").trace.retrievers[0].details
        assert details["config"] == "german"
