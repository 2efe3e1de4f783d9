"""The text-search analysis of a batch (fragments.analyse): reading BM25's figures off
the fulltext vector, when the code expansion left a piece's text as it was, gives
exactly what analysing its BM25 text again gives."""

from __future__ import annotations

import copy

from pgbraid import pipelines
from pgbraid.ingest import fragments
from pgbraid.ingest.prepare import prepare
from pgbraid.ingest.readers import SourceDocument

TEXTS = [
    ("Cats and dogs of the", "The cats run; cats, cats and more cats of the town."),
    (None, "No title at all: the body alone, with a word or two twice, twice."),
    ("", "An empty title."),
    ("Repeated", " ".join(["word"] * 300) + " and the end"),  # past to_tsvector's 255
    (" ".join(["spam"] * 200), " ".join(["spam"] * 100)),  # 255 only together
    (" ".join(["eggs"] * 254), "eggs"),  # exactly 255 together: `||` keeps them
    ("A tag <b", 'class="x"> spans the break'),  # a tag is one token across whitespace
    ("state-of-", "the-art hyphenation, foo@example.com and https://example.com/x y"),
    ("Code", "call getUserName() on my_object.field_name"),  # expanded: two passes
    ("Zahlen und Wörter", "Die Häuser stehen am Fluss, die Häuser sind alt."),
    ("Long", "lorem ipsum dolor sit amet " * 700),  # past _ONE_PASS_CHARS
]


def _analysed(conn, pipeline, prepared, one_pass):
    batch = copy.deepcopy(prepared)
    saved = fragments._one_pass
    fragments._one_pass = one_pass
    try:
        fragments.analyse(conn, pipeline, batch)
    finally:
        fragments._one_pass = saved
    return [(piece.tsv, piece.bm25, piece.forward) for p in batch for piece in p.pieces]


def test_one_pass_gives_what_two_passes_give(client, pipeline):
    with client._session() as conn:
        target = pipelines.get(conn, pipeline)
        docs = [SourceDocument(id=str(i), title=title, text=text)
                for i, (title, text) in enumerate(TEXTS)]
        prepared = [prepare(d, target) for d in docs]
        used = [fragments._one_pass(target, p, piece) for p in prepared for piece in p.pieces]
        assert sum(used) >= 7 and not all(used)  # both ways are exercised
        two = _analysed(conn, target, prepared, lambda *_: False)
        one = _analysed(conn, target, prepared, fragments._one_pass)
    assert one == two
    # The vectors over 255 positions were analysed again (not read off): still equal.
    assert any(bm25[2] and max(bm25[2]) == 255 for _, bm25, _ in one)
