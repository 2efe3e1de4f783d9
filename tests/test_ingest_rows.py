"""The values fragments.insert hands COPY as text read back as what they stand for."""

from __future__ import annotations

from pgbraid.encryption import distinct_words
from pgbraid.ingest.fragments import array_literal

from .conftest import shared

AWKWARD = [(), ("public",), ("a,b", 'say "hi"', "back\\slash", "{braces}", " padded ", "NULL",
                "ünïcode", "")]


def test_array_literals_read_back_as_the_lists(client):
    with client._db.admin() as conn:
        for values in AWKWARD:
            literal = array_literal(values)
            back = conn.execute("SELECT %s::text[]", (literal,)).fetchone()[0]
            assert back == list(values), literal
            # and through COPY's text format, as fragments.insert sends it
            conn.execute("CREATE TEMPORARY TABLE IF NOT EXISTS rows_in (c text[])")
            conn.execute("TRUNCATE rows_in")
            with conn.cursor().copy("COPY rows_in (c) FROM STDIN") as copy:
                copy.write_row([literal])
            assert conn.execute("SELECT c FROM rows_in").fetchone()[0] == list(values)


def _distinct_words_as_before(*texts: str | None) -> str:
    words = {w.strip(".,;:!?()[]{}<>\"'`*=#|~").lower() for t in texts if t for w in t.split()}
    words.discard("")
    return " ".join(sorted(words))


def test_distinct_words_are_each_word_stripped_then_lowered():
    import gzip
    import json

    texts = ["İstanbul'S (İZMIR) ΣΊΣΥΦΟΣ. straße STRASSE «Ǆ»", '"quoted" [x] {y} ...', "", None,
             "tab\there\u00a0nbsp\u2003em Ⅻ ⅻ ǅungla"]
    with gzip.open(shared("beir_scifact", "corpus.jsonl.gz"), "rt") as handle:
        for i, line in zip(range(400), handle):
            record = json.loads(line)
            texts.append(record["title"] + "\n" + record["text"])
    for text in texts:
        assert distinct_words("Title", None, text) == _distinct_words_as_before("Title", None, text)
