"""Postings packed for a batch or a merge (bm25_merge.pack): numpy over all terms at
once, checked against the per-term construction it replaced, on random postings."""

from __future__ import annotations

import random

import numpy as np

from pgbraid.ingest import bm25_merge


def _reference(postings: list[tuple[str, int, int, int]]) -> dict[str, list]:
    """Term by term: terms in code point order, each list sorted by ordinal."""
    lists: dict[str, list[tuple[int, int, int]]] = {}
    for term, ordinal, tf, length in postings:
        lists.setdefault(term, []).append((ordinal, tf, length))
    out: dict[str, list] = {"terms": [], "counts": [], "ordinals": [], "tfs": [], "lengths": []}
    for term in sorted(lists):
        rows = sorted(lists[term])
        out["terms"].append(term)
        out["counts"].append(len(rows))
        for name, column, dtype in (("ordinals", 0, "<i4"), ("tfs", 1, "<u2"),
                                    ("lengths", 2, "<u2")):
            out[name].append(np.asarray([r[column] for r in rows], dtype=dtype).tobytes())
    return out


def test_pack_equals_the_per_term_construction():
    rng = random.Random(7)
    # Code point order differs from a locale's: capitals, accents, digits, symbols.
    vocabulary = ["zeta", "Zeta", "éclair", "eclair", "a", "ab", "a-b", "10", "9", "_x", "ω",
                  "straße", "strasse"] + [f"w{i}" for i in range(200)]
    postings = []
    for ordinal in rng.sample(range(10_000), 300):  # each fragment holds a term once
        for term in rng.sample(vocabulary, rng.randint(0, 40)):
            postings.append((term, ordinal, rng.randint(1, 65_535), rng.randint(1, 65_535)))
    rng.shuffle(postings)
    terms = list(bm25_merge.numbered(p[0] for p in postings))
    ids = {term: i for i, term in enumerate(terms)}
    packed = bm25_merge.pack(
        terms, np.asarray([ids[p[0]] for p in postings], dtype=np.int64),
        np.asarray([p[1] for p in postings], dtype="<i4"),
        np.asarray([p[2] for p in postings], dtype="<u2"),
        np.asarray([p[3] for p in postings], dtype="<u2"))
    assert packed == _reference(postings)
    assert packed["terms"][:3] == ["10", "9", "Zeta"]


def test_a_term_left_with_no_posting_is_not_written():
    packed = bm25_merge.pack(["kept", "gone"], np.zeros(2, dtype=np.int64),
                             np.asarray([5, 3], dtype="<i4"), np.ones(2, dtype="<u2"),
                             np.ones(2, dtype="<u2"))
    assert packed["terms"] == ["kept"] and packed["counts"] == [2]
    assert np.frombuffer(packed["ordinals"][0], "<i4").tolist() == [3, 5]
