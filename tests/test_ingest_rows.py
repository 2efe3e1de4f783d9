"""What ingestion makes of a text before PostgreSQL analyses it."""

from __future__ import annotations

import gzip
import json
import random
import re

from pgbraid.ingest import tokens

from .conftest import shared

# The tokens tokens.expand_code rewrites, as one pattern (its first form: a sub() of it).
_CANDIDATE = re.compile(
    r"(?<!\S)\S*?(?:_|[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z0-9_]\.[A-Za-z_]|[A-Za-z0-9]-\d"
    r"|[A-Za-z][0-9])\S*")


def _expanded_as_before(text: str) -> str:
    return _CANDIDATE.sub(lambda m: tokens._CHUNK.sub(tokens._rewrite, m.group(0)), text)


def _texts(*path: str, field: str = "text", limit: int = 600):
    with gzip.open(shared(*path), "rt") as handle:
        for _, line in zip(range(limit), handle):
            yield json.loads(line)[field]


def test_code_expansion_rewrites_the_tokens_the_pattern_finds():
    texts = [*_texts("godot_docs", "godot_docs_rst.jsonl.gz"),
             *_texts("beir_scifact", "corpus.jsonl.gz"), *_texts("cisi", "corpus.jsonl.gz"),
             "CVE-2021-44228 a_b.c_d x.Y Input.is_action_pressed() (IL-6) e.g. ..a_ _ -1 A-1",
             "\u00a0snake_case\u2003camelCase\u3000HTTPServer\nend_ ", ""]
    with gzip.open(shared("cisa_kev", "known_exploited_vulnerabilities.json.gz"), "rt") as handle:
        texts += [json.dumps(v) for v in json.load(handle)["vulnerabilities"][:300]]
    rnd = random.Random(16)
    alphabet = "aZb_.-19 \n\t\u00a0\u2003xYQ.._--"
    texts += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30)))
              for _ in range(20_000)]
    changed = 0
    for text in texts:
        assert tokens.expand_code(text) == _expanded_as_before(text), text[:200]
        changed += tokens.expand_code(text) != text
    assert changed > 1000


def test_a_versioned_identifier_also_yields_its_stem():
    expand = tokens.expand_code
    assert expand("Apache Log4j2 flaw") == "Apache Log4j Log4j2 flaw"
    assert expand("python3.9 (covid19)") == "python python3.9 (covid covid19)"
    assert expand("SMBv1 WNR2000v5") == "SMB SMBv1 SM Bv 1 WNR2000 WNR2000v5"
    assert expand("Vector2.ZERO") == "Vector2.ZERO Vector Vector2 ZERO"
    # a "v" is a version's only after a capital or a digit, where it cannot be the name's
    assert expand("ipv6 HPV16") == "ipv ipv6 HPV HPV16"
    # a stem under three characters would match every gene, model or protocol of its letters
    for whole in ("p53", "IL6", "CD4", "TP53", "RV340", "x86"):
        assert expand(whole) == whole
    assert expand("IPv6") == "IPv6 I Pv 6"  # its camel parts, as before; no "IP"
