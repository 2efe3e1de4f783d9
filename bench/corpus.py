"""The million-fragment lexical corpus: real text, copied with its words perturbed.

The ~100k corpus of bench/lexical.py copies SciFact with its sentences
shuffled, so every copy has the same term statistics. This one draws from all
the prose at hand (SciFact, CISI, Cranfield, the Godot docs, CISA KEV) and
gives each copy its own "dialect": a seeded share of the vocabulary is
replaced, word by word, by a variant made for that copy (a vowel changed, a
suffix added or a letter dropped), and a few words of each document are
misspelled at random. So document frequencies spread out, new rare terms keep
appearing as the corpus grows (as in a real collection: Heaps' law), and the
lists of common words still grow with it.

Documents come in a fixed order (the same seed gives the same corpus), each
with a size class: the first ~103k fragments (4 copies) are ``c1``, the next
~205k ``c2``, the rest ``c3`` (39 copies in all). Fragments are passage-sized
(chunk_size 500: ~585 characters, ~85 tokens), as in MS MARCO, on which
pg_textsearch published its figures; the 100k corpus of bench/lexical.py
has ~1000-character fragments. A reader holding c1 sees a 100k index, c1 and c2 a
300k one, all three the million: one build serves the three sizes, through
pgbraid's BM25 partitions (one per classification set).
"""

from __future__ import annotations

import random
import re
from typing import Iterator

from .common import DATA, read_jsonl

# Copies (of ~25.7k fragments of ~500 characters each) up to the end of each size
# class, cumulative.
COPIES = {"c1": 4, "c2": 12, "c3": 39}
CHUNK_SIZE = 500
_WORD = re.compile(r"[A-Za-z]{4,}")
_VOWELS = "aeiou"


def sources() -> list[dict]:
    """The original documents: id, title, text, and sentences (SciFact) when known."""
    docs = []
    for d in read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz"):
        docs.append({"id": f"scifact/{d['_id']}", "title": d["title"], "text": d["text"]})
    for name in ("cranfield", "cisi"):
        for d in read_jsonl(DATA / name / "corpus.jsonl.gz"):
            docs.append({"id": f"{name}/{d['_id']}", "title": d.get("title") or "",
                         "text": d["text"]})
    for d in read_jsonl(DATA / "godot_docs" / "godot_docs_rst.jsonl.gz"):
        docs.append({"id": f"godot/{d['path']}", "title": d.get("title") or "", "text": d["text"]})
    import gzip
    import json

    with gzip.open(DATA / "cisa_kev" / "known_exploited_vulnerabilities.json.gz", "rt") as f:
        for v in json.load(f)["vulnerabilities"]:
            docs.append({"id": f"kev/{v['cveID']}", "title": v["vulnerabilityName"],
                         "text": f"{v['vendorProject']} {v['product']}. {v['shortDescription']} "
                                 f"{v['requiredAction']}"})
    return [d for d in docs if d["text"].strip()]  # two Cranfield abstracts are empty


def _variant(word: str, rng: random.Random) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        at = [i for i, c in enumerate(word) if c in _VOWELS]
        if at:
            i = rng.choice(at)
            return word[:i] + rng.choice(_VOWELS.replace(word[i], "")) + word[i + 1:]
    if choice == 1:
        return word + rng.choice(("ix", "on", "ar", "et", "um", "ol"))
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1:]


class Dialect:
    """One copy's word replacements: a seeded share of the vocabulary, decided per word."""

    def __init__(self, copy: int, share: float) -> None:
        self.copy, self.share = copy, share
        self.memo: dict[str, str] = {}

    def word(self, word: str) -> str:
        low = word.lower()
        found = self.memo.get(low)
        if found is None:
            rng = random.Random(f"{self.copy}/{low}")
            found = _variant(low, rng) if rng.random() < self.share else low
            self.memo[low] = found
        return word if found == low else found


def perturb(text: str, dialect: Dialect, rng: random.Random, typos: float = 0.005) -> str:
    def replace(match: re.Match) -> str:
        word = dialect.word(match.group(0))
        return _variant(word.lower(), rng) if rng.random() < typos else word

    return _WORD.sub(replace, text)


def documents(copies: int) -> Iterator[dict]:
    """Copies 0 .. copies - 1 of the sources, in order."""
    pool = sources()
    for copy in range(copies):
        yield from copy_of(pool, copy)


def copy_of(pool: list[dict], copy: int) -> Iterator[dict]:
    """Copy 0 is the originals; copy c >= 1 perturbs a share of words growing with c
    (up to 40 %), with sentences shuffled where a text has several (not Godot pages:
    their code blocks stay whole)."""
    rng = random.Random(copy)
    dialect = Dialect(copy, min(0.4, 0.05 + 0.01 * copy)) if copy else None
    for d in pool:
        if dialect is None:
            yield {"id": d["id"], "title": d["title"], "text": d["text"]}
            continue
        sentences = re.split(r"(?<=[.!?])\s+", d["text"]) if not d["id"].startswith(
            "godot/") else [d["text"]]
        rng.shuffle(sentences)
        yield {"id": f"{d['id']}~{copy}", "title": perturb(d["title"], dialect, rng),
               "text": perturb(" ".join(sentences), dialect, rng)}


def size_class(copy: int) -> str:
    """Copies 0-3 are c1 (~103k fragments), 4-11 c2 (~308k with c1), the rest c3."""
    return "c1" if copy < COPIES["c1"] else "c2" if copy < COPIES["c2"] else "c3"
