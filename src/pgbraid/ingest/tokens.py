"""Code-aware expansion of text before PostgreSQL tokenizes it for BM25.

PostgreSQL's parser splits ``is_action_pressed`` into words and loses the
identifier, reads ``Input.is_action_pressed`` as the host ``input.is``, and
splits ``CVE-2021-44228`` into ``cve``, ``-2021``, ``-44228``. Each compound
chunk is therefore rewritten as its whole form plus its parts, in shapes the
parser keeps atomic::

    screen_size              -> screensize screen size
    AnimatedSprite2D         -> AnimatedSprite2D Animated Sprite 2D
    Input.is_action_pressed  -> Input.isactionpressed Input isactionpressed is action pressed
    CVE-2021-44228           -> CVE202144228 CVE-2021-44228
    Log4j2                   -> Log4j Log4j2

Documents and queries go through the same expansion, so an identifier matches
itself exactly and its parts match the words it is made of.

An identifier that ends in a version number after a letter (``Log4j2``,
``python3``, ``Vector2``, ``SMBv1``) also yields its unversioned stem, as Elasticsearch's
word_delimiter_graph with preserve_original lets ``Log4j`` find ``Log4j2``:
PostgreSQL keeps ``log4j2`` as one lexeme. The stem comes first, so the
identifier stays joined to what follows it (``python3.9`` -> ``python
python3.9``). Only a stem of ``MIN_STEM`` characters or more: ``p53``, ``IL6``,
``CD4``, ``TP53`` name genes and proteins whose one- or two-letter stems would
match every such name of the corpus (docs/benchmarks.md, "Lexical").

Only BM25 reads the expanded text (``Prepared.bm25_text``, the query in
strategies/bm25.py): fulltext's tsvector and tsquery keep PostgreSQL's own
words, so ``Log4j`` does not find ``Log4j2`` there. Fulltext ANDs every word
and matches quoted phrases by position: a stem inserted before an identifier
would part it from the word before it (``"apache log4j2"``), and expanding its
query would turn ``-Log4j2`` into ``-Log4j Log4j2`` for websearch_to_tsquery.
It is ``auto``'s exact leg over identifiers; bm25, which weighs the stem by its
idf, and fuzzy find the near match.
"""

from __future__ import annotations

import re

_CHUNK = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:-\d+)+(?![\w-])"                       # CVE-2021-44228, T1059-001
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"          # identifiers, dotted
)
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+[A-Za-z]*")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z][A-Z][a-z]")
MAX_CHUNK = 100
MIN_STEM = 3
# A stem, then its version: a number after a letter (Log4j2), or after a "v" that follows
# a capital or a digit (SMBv1, WNR2000v5; not ipv6 or HPV16, where the v is the name's).
_VERSIONED = re.compile(r"([A-Za-z][A-Za-z0-9]*[A-Z0-9])v[0-9]+"
                        r"|([A-Za-z][A-Za-z0-9]*[A-Za-z])[0-9]+")


def _unversioned(word: str) -> list[str]:
    """``word``'s stem when it is a version-suffixed identifier with a stem long enough."""
    versioned = _VERSIONED.fullmatch(word)
    stem = versioned and (versioned.group(1) or versioned.group(2))
    return [stem] if stem and len(stem) >= MIN_STEM else []


def _member(member: str) -> list[str]:
    """A single identifier: itself, or its joined form and parts when compound."""
    if "_" not in member and not _CAMEL.search(member):
        return [*_unversioned(member), member]
    parts = [p for piece in member.split("_") for p in _CAMEL_PART.findall(piece)]
    joined = member.replace("_", "")
    return [*_unversioned(joined), joined, *(parts if len(parts) > 1 else ())]


def _rewrite(match: re.Match[str]) -> str:
    chunk = match.group(0)
    if len(chunk) > MAX_CHUNK:
        return chunk
    if "-" in chunk and chunk[0].isalpha() and chunk[-1].isdigit():
        return f"{chunk.replace('-', '')} {chunk}"
    members = chunk.split(".")
    if len(members) == 1:
        return " ".join(_member(chunk))
    out = [".".join(m.replace("_", "") for m in members)]
    for member in members:
        out.extend(_member(member))
    return " ".join(out)


# Only whitespace-delimited tokens that may hold a compound chunk (an underscore, a camel
# hump, a dotted member, a hyphenated number or a digit after a letter) are rewritten: no
# match of _CHUNK spans whitespace, so that gives what rewriting the whole text does, ~4x
# faster on prose, where most words are plain. (As a pattern, such a token is
# (?<!\S)\S*?(?:_|[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z0-9_]\.[A-Za-z_]|[A-Za-z0-9]-\d
#               |[A-Za-z][0-9])\S*
# tests/test_ingest_rows.py checks expand_code against it.)
#
# Such a token is found by its rarest character (an underscore, a dot, a
# hyphen, a capital, a digit) with the rest looked around it: a search that starts at such a
# character runs at C speed, where the lazy \S*? above tried each alternative at every
# character. The candidate is the token around the match (expand_code).
_TRIGGER = re.compile(r"_|\.(?<=[A-Za-z0-9_]\.)(?=[A-Za-z_])|-(?<=[A-Za-z0-9]-)(?=\d)"
                      r"|[A-Z](?<=[a-z][A-Z])|[A-Z](?<=[A-Z][A-Z])(?=[a-z])"
                      r"|[0-9](?<=[A-Za-z][0-9])")
_REST = re.compile(r"\S*")


def expand_code(text: str) -> str:
    """The text with each such token's chunks rewritten (2.5x faster than a sub() of
    the pattern above)."""
    out: list[str] = []
    done = 0  # the text before it is written out; a token boundary
    for trigger in _TRIGGER.finditer(text):
        start = trigger.start()
        if start < done:  # in the token just rewritten
            continue
        while start > done and not text[start - 1].isspace():  # str.isspace is re's \s
            start -= 1
        end = _REST.match(text, start).end()
        out.append(text[done:start])
        out.append(_CHUNK.sub(_rewrite, text[start:end]))
        done = end
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)
