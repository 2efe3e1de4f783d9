"""Highlights: passages of the hit's own fragment, escaped, matched words in <mark>."""

from __future__ import annotations

import html
import re
import uuid

import pytest

import pgbraid
from pgbraid import InvalidRequest

ROTATE = ("Operators must rotate the database credentials every month. "
          "Use <script>alert(1)</script> & never \ue000forge\ue001 marks.")
LONG = "\n\n".join(
    [f"Paragraph {i} speaks of harbour cranes and ropes, nothing else of note here." * 3
     for i in range(6)] + ["The lighthouse keeper logs every storm in the ledger."])


@pytest.fixture(scope="module")
def notes(data_dir, server):
    name = f"hl-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir) as admin:
        admin.create_pipeline(name, chunk_size=300)
        admin.ingest(name, [
            {"id": "rot", "title": "Credentials", "text": ROTATE},
            {"id": "long", "title": "Harbour", "text": LONG},
            {"id": "code", "text": "Call AnimatedSprite2D.play() to start the walk animation."},
            {"id": "title-only", "title": "Lighthouse", "text": "Nothing matches in here."}])
    return name


def plain(passage: str) -> str:
    return html.unescape(passage.replace("<mark>", "").replace("</mark>", ""))


def marked(passages) -> set[str]:
    return {m.lower() for p in passages for m in re.findall(r"<mark>(.*?)</mark>", p)}


@pytest.mark.parametrize("type_", ["fulltext", "bm25"])
def test_matched_words_are_marked_and_the_text_escaped(client, notes, type_):
    (hit,) = [h for h in client.search(notes, "rotate credentials", type=type_,
                                       params={"highlight": True}).hits if h.document_id == "rot"]
    assert marked(hit.highlights) == {"rotate", "credentials"}
    joined = " ".join(hit.highlights)
    assert "<script>" not in joined and "&amp;" in joined
    assert "forge" in joined and "\ue000" not in joined  # private marks cannot be forged
    for passage in hit.highlights:  # nothing but <mark> looks like a tag
        assert re.sub(r"</?mark>", "", passage).count("<") == 0


def test_passages_come_from_the_hits_own_fragment(client, notes):
    for type_ in ("fulltext", "bm25", "hybrid"):
        hits = client.search(notes, "lighthouse storm ledger", type=type_,
                             params={"highlight": True, "k": 10}).hits
        by_fragment = {h.fragment_id: h for h in hits}
        keeper = [h for h in hits if "lighthouse keeper" in h.page_content]
        assert keeper and all(h.highlights for h in keeper), type_
        for hit in by_fragment.values():
            for passage in hit.highlights or ():
                words = plain(passage).split()
                assert " ".join(words) in " ".join(hit.page_content.split()), (type_, passage)


def test_a_match_in_the_title_only_has_no_passage(client, notes):
    hit = next(h for h in client.search(notes, "lighthouse", type="fulltext",
                                        params={"highlight": True, "k": 10}).hits
               if h.document_id == "title-only")
    assert hit.highlights == ()


def test_bm25_marks_its_matched_terms(client, notes):
    (hit,) = [h for h in client.search(notes, "AnimatedSprite2D walk", type="bm25",
                                       params={"highlight": True}).hits if h.document_id == "code"]
    assert "walk" in hit.matched_terms
    assert {"walk", "animatedsprite2d.play"} & marked(hit.highlights)


def test_fused_hits_are_marked_by_their_lexical_legs(client, notes):
    response = client.search(notes, "rotate credentials", type="hybrid",
                             params={"highlight": True, "k": 10})
    for hit in response.hits:
        lexical = {f.strategy for f in hit.found_by} & {"bm25", "fulltext"}
        if lexical and hit.document_id == "rot":
            assert marked(hit.highlights) == {"rotate", "credentials"}
        if not lexical:  # found by similarity alone: nothing was matched
            assert hit.highlights == ()
    assert any(not ({f.strategy for f in h.found_by} & {"bm25"}) for h in response.hits)


def test_highlights_only_when_asked_and_only_where_words_match(client, notes):
    assert all(h.highlights is None for h in client.search(notes, "rotate", type="bm25").hits)
    with pytest.raises(InvalidRequest, match="unknown parameter highlight"):
        client.search(notes, "rotate", type="similarity", params={"highlight": True})
    with pytest.raises(InvalidRequest, match="true or false"):
        client.search(notes, "rotate", type="bm25", params={"highlight": "yes"})
    with pytest.raises(InvalidRequest, match="leg_params.bm25"):
        client.search(notes, "rotate", type="hybrid",
                      params={"leg_params": {"bm25": {"highlight": True}}})


GENERICS = "A List<String> or Map<K, V> keyed by id; if a<b swap, call <init> on <b>builder</b> first."


@pytest.mark.parametrize("type_", ["fulltext", "bm25"])
def test_angle_brackets_of_code_are_kept_and_escaped(client, type_):
    """The text-search parser reads ``<String>`` as an XML tag, and ts_headline used to
    drop it: a passage keeps the fragment's own text, escaped like the rest."""
    name = f"hl-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": "generic", "text": GENERICS}])
    (hit,) = client.search(name, "keyed swap builder", type=type_,
                           params={"highlight": True}).hits
    joined = " ".join(hit.highlights)
    assert "List&lt;String&gt;" in joined and "Map&lt;K, V&gt;" in joined
    assert "a&lt;b" in joined and "&lt;init&gt;" in joined
    text = " ".join(plain(p) for p in hit.highlights)
    for code in ("List<String>", "Map<K, V>", "a<b", "<init>", "<b>builder</b>"):
        assert code in text, (code, hit.highlights)
    assert marked(hit.highlights) == {"keyed", "swap", "builder"}
    for passage in hit.highlights:
        assert re.sub(r"</?mark>", "", passage).count("<") == 0
