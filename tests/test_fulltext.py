"""fulltext over real documents: ranking, the JSON body, and the zero-row explanation."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pgbraid import FieldMap, NotEnabled
from pgbraid.cli import app
from pgbraid.strategies.fulltext import tokens_of

from .conftest import shared

PLAYER_PAGE = "getting_started/first_2d_game/03.coding_the_player.rst"


@pytest.fixture(scope="module")
def godot(data_dir, server):
    import pgbraid

    with pgbraid.connect(data_dir=data_dir) as client:
        if "godot" not in {p.name for p in client.pipelines()}:
            client.create_pipeline("godot", embedder="none")
            report = client.ingest("godot", [shared("godot_docs", "godot_docs_rst.jsonl.gz")],
                                   fields=FieldMap(id="path"))
            assert report.added == 405 and not report.failed
    return "godot"


def test_player_page_is_in_the_top_3_and_json_carries_the_fields(godot, env):
    result = CliRunner().invoke(app, ["search", godot, "AnimatedSprite2D play animation",
                                      "--type", "fulltext", "--k", "5", "--json"], env=env)
    assert result.exit_code == 0, result.stdout
    body = json.loads(result.stdout)
    top3 = [hit["document_id"] for hit in body["hits"][:3]]
    assert PLAYER_PAGE in top3
    hit = body["hits"][0]
    for key in ("document_id", "fragment_id", "version", "title", "page_content", "score", "rank"):
        assert key in hit
    assert [h["rank"] for h in body["hits"]] == list(range(1, len(body["hits"]) + 1))
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    (entry,) = body["trace"]["retrievers"]
    assert entry["retriever"] == "fulltext" and entry["status"] == "ran"
    assert entry["hits"] == len(body["hits"]) and entry["ms"] > 0
    assert entry["details"]["tokens"] == ["animatedsprite2d", "play", "anim"]


def test_long_code_chunk_explains_which_tokens_over_restrict(client, godot):
    snippet = ("func _process(delta): var velocity = Vector2.ZERO "
               "if Input.is_action_pressed(\"move_right\"): velocity.x += 1 "
               "$AnimatedSprite2D.play() position = position.clamp(Vector2.ZERO, screen_size) "
               "quaternionslerp")
    response = client.search(godot, snippet, type="fulltext", params={"k": 5})
    assert response.hits == ()
    details = response.trace.retrievers[0].details
    assert details["rows"] == 0
    assert details["restricting_tokens"] == ["quaternionslerp"]
    assert details["token_document_frequency"]["quaternionslerp"] == 0
    assert details["token_document_frequency"]["veloc"] > 0
    assert "quaternionslerp" in details["explanation"]


def test_tokens_that_exist_but_never_together_are_named(client, godot):
    # Both words occur in the corpus, never in one fragment.
    response = client.search(godot, "screen_size quaternion", type="fulltext", params={"k": 3})
    details = response.trace.retrievers[0].details
    assert response.hits == () and details["rows"] == 0
    assert all(n > 0 for n in details["token_document_frequency"].values())
    assert details["restricting_tokens"]  # dropping one of them lets rows through
    assert details["best_partial"]["of"] == len(details["tokens"])


def test_only_stop_words_is_an_empty_result_with_a_reason(client, godot):
    response = client.search(godot, "the and of", type="fulltext", params={"k": 3})
    assert response.hits == ()
    assert "no searchable words" in response.trace.retrievers[0].details["explanation"]


def test_websearch_syntax_quotes_and_negation(client, godot):
    phrase = client.search(godot, '"screen size"', type="fulltext", params={"k": 3})
    assert "<->" in phrase.trace.retrievers[0].details["tsquery"]
    negated = client.search(godot, "AnimatedSprite2D -animation", type="fulltext", params={"k": 20})
    assert all("animation" not in h.page_content.lower() for h in negated.hits)


def test_group_by_document_returns_each_document_once(client, godot):
    response = client.search(godot, "AnimatedSprite2D", type="fulltext", params={"k": 5}, group_by="document")
    ids = [h.document_id for h in response.hits]
    assert len(ids) == len(set(ids)) == 5


def test_pipeline_without_fulltext_answers_not_enabled(client):
    client.create_pipeline("no-fts", fulltext=False, embedder="none")
    with pytest.raises(NotEnabled):
        client.search("no-fts", "anything", type="fulltext")


def test_tokens_of_reads_lexemes_with_quotes():
    assert tokens_of("'it''s' & 'play':* & !'anim'") == ["it's", "play", "anim"]
