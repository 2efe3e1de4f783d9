"""pg_trgm's ``similarity`` in Python, for ASCII strings: the same value, bit for bit.

pg_trgm (contrib/pg_trgm/trgm_op.c, ``generate_trgm`` and ``cnt_sml``) splits a string
into words of alphanumeric characters, lower-cases each, pads it with two spaces in
front and one behind, and takes every three consecutive characters; the similarity
of two strings is the number of trigrams they share over the number in either, in
single precision (``DIVUNION``). For ASCII text those steps need no locale and no
hashing (a trigram holding a multibyte character is stored as part of a CRC, which
this module does not copy), so ``trigrams`` answers None for anything else and the
caller asks the server.

Rounding: the quotient of two small integers computed in double precision and then
rounded to single is the correctly rounded single-precision quotient (53 >= 2 * 24 + 2;
Figueroa, "When is double rounding innocuous?", 1995), which is what the C division
of two ``float4`` gives.
"""

from __future__ import annotations

import re
import struct

_WORD = re.compile(r"[a-z0-9]+")
_SINGLE = struct.Struct("f")


def trigrams(text: str) -> frozenset[str] | None:
    """The string's trigram set as pg_trgm makes it, or None when it is not ASCII."""
    if not text.isascii():
        return None
    out: set[str] = set()
    for word in _WORD.findall(text.lower()):
        padded = f"  {word} "
        out.update(padded[i:i + 3] for i in range(len(padded) - 2))
    return frozenset(out)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """pg_trgm's similarity of two trigram sets (a ``float4``, as a float)."""
    if not a or not b:
        return 0.0
    common = len(a & b)
    return _SINGLE.unpack(_SINGLE.pack(common / (len(a) + len(b) - common)))[0]
