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

Documents and queries go through the same expansion, so an identifier matches
itself exactly and its parts match the words it is made of.
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


def _member(member: str) -> list[str]:
    """A single identifier: itself, or its joined form and parts when compound."""
    if "_" not in member and not _CAMEL.search(member):
        return [member]
    parts = [p for piece in member.split("_") for p in _CAMEL_PART.findall(piece)]
    joined = member.replace("_", "")
    return [joined, *parts] if len(parts) > 1 else [joined]


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
# hump, a dotted member or a hyphenated number) are rewritten: no match of _CHUNK spans
# whitespace, so that gives what rewriting the whole text does, ~4x faster on prose,
# where most words are plain. (As a pattern, such a token is
# (?<!\S)\S*?(?:_|[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z0-9_]\.[A-Za-z_]|[A-Za-z0-9]-\d)\S*
# tests/test_ingest_rows.py checks expand_code against it.)
#
# Such a token is found by its rarest character (an underscore, a dot, a
# hyphen, a capital) with the rest looked around it: a search that starts at such a
# character runs at C speed, where the lazy \S*? above tried each alternative at every
# character. The candidate is the token around the match (expand_code).
_TRIGGER = re.compile(r"_|\.(?<=[A-Za-z0-9_]\.)(?=[A-Za-z_])|-(?<=[A-Za-z0-9]-)(?=\d)"
                      r"|[A-Z](?<=[a-z][A-Z])|[A-Z](?<=[A-Z][A-Z])(?=[a-z])")
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
