"""fuzzy: misspelled company names -> the right company at rank 1, for fuzzy and auto;
then fuzzy over ~100k long fragments (bench/fuzzy_corpus.py).

auto runs on an embedded copy of the same names (its similarity leg needs
vectors); its figures are over the same generated queries as fuzzy's. The peer is
pg_trgm alone: the nearest name by trigram distance over a GiST index on a plain
table (no scope, no trace; its time is the statement's, measured by the client).
The four systems answer each query in turn (rotating order), so load drift hits
them alike.
"""

from __future__ import annotations

import csv
import random
import time
from contextlib import nullcontext

from . import fuzzy_corpus
from .common import DATA, connect, has_pipeline, percentiles, table, timed

PIPELINE = "bench-companies"
EMBEDDED = "bench-companies-embedded"
SAMPLES = 700


def _edit(name: str, rng: random.Random, kind: str) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    chars = list(name)
    positions = [i for i, c in enumerate(chars) if c.isalpha()]
    i = rng.choice(positions)
    if kind == "delete":
        del chars[i]
    elif kind == "insert":
        chars.insert(i, rng.choice(letters))
    elif kind == "substitute":
        chars[i] = rng.choice(letters.replace(chars[i].lower(), ""))
    elif kind == "transpose":
        j = min(i + 1, len(chars) - 1)
        chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


def misspell(name: str, rng: random.Random, kind: str) -> str:
    if kind == "a typo in two words":
        words = name.split()
        long_enough = [i for i, w in enumerate(words) if sum(c.isalpha() for c in w) >= 4]
        for i in rng.sample(long_enough, 2):
            words[i] = _edit(words[i], rng, rng.choice(["delete", "insert", "substitute",
                                                         "transpose"]))
        return " ".join(words)
    if kind == "two edits":
        return _edit(_edit(name, rng, rng.choice(["delete", "substitute"])), rng,
                     rng.choice(["insert", "transpose"]))
    if kind == "missing word":
        words = name.split()
        del words[rng.randrange(1, len(words))]  # keep the first, distinctive word
        return " ".join(words)
    return _edit(name, rng, kind)


def _eligible(row: dict, kind: str) -> bool:
    words = row["name"].split()
    if kind == "missing word":
        return len(words) >= 2
    if kind == "a typo in two words":
        return sum(sum(c.isalpha() for c in w) >= 4 for w in words) >= 2
    return True


def _ensure(client, name: str, rows: list[dict], embedder: str | None) -> None:
    if not has_pipeline(client, name):
        client.create_pipeline(name, **({"embedder": embedder} if embedder else {}))
        client.ingest(name, [{"id": r["symbols"].split()[0], "title": r["name"],
                              "text": r["name"]} for r in rows])


# (label, pipeline, type, params): fuzzy's default (auto: the text method on names),
# its word method forced, and auto on the embedded copy.
SYSTEMS = (("fuzzy", PIPELINE, "fuzzy", {}), ("fuzzy method=words", PIPELINE, "fuzzy",
                                             {"method": "words"}),
           ("auto", EMBEDDED, "auto", {}))
RAW = "raw pg_trgm KNN"


def run() -> None:
    names()
    fuzzy_corpus.run()


# The peer: pg_trgm alone, a GiST index over a plain table of the names, nearest by
# trigram distance (what fuzzy's text method is measured against).
_RAW_TABLE = """
CREATE SCHEMA IF NOT EXISTS bench_raw;
CREATE TABLE IF NOT EXISTS bench_raw.companies (name text NOT NULL);
CREATE INDEX IF NOT EXISTS companies_name_trgm ON bench_raw.companies USING gist (name gist_trgm_ops)
"""
_RAW_KNN = "SELECT name FROM bench_raw.companies ORDER BY name <-> %s LIMIT 1"


def _raw(client, rows: list[dict]):
    """The raw peer's search: the nearest name by pg_trgm's distance (<->), one connection."""
    with client._db.admin() as conn:
        conn.execute(_RAW_TABLE)
        if not conn.execute("SELECT 1 FROM bench_raw.companies LIMIT 1").fetchone():
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO bench_raw.companies VALUES (%s)", [(r["name"],) for r in rows])
            conn.execute("ANALYZE bench_raw.companies")
        conn.commit()
    def search(typed: str) -> tuple[str | None, float]:
        with client._db.admin() as conn:
            start = time.perf_counter()
            row = conn.execute(_RAW_KNN, (typed,)).fetchone()
            return (row[0] if row else None), (time.perf_counter() - start) * 1000
    return search


def _searcher(client, pipeline: str, kind_of_search: str, params: dict):
    """A system's search: (the top hit's text or None, the trace's ms)."""
    def search(typed: str) -> tuple[str | None, float]:
        response = client.search(pipeline, typed, type=kind_of_search, params={"k": 1, **params})
        return (response.hits[0].page_content if response.hits else None), response.trace.ms
    return search


KINDS = ["delete", "insert", "substitute", "transpose", "two edits", "missing word",
         "a typo in two words"]


def queries(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(kind of edit, the name misspelled, the name): SAMPLES of them, always the same."""
    rng = random.Random(20261130)
    candidates = [r for r in rows if len(r["name"]) >= 8]
    out = []
    for n in range(SAMPLES):
        kind = KINDS[n % len(KINDS)]
        row = rng.choice([r for r in candidates if _eligible(r, kind)])
        out.append((kind, misspell(row["name"], rng, kind), row["name"]))
    return out


def names(client=None) -> None:
    """The names table; on ``client``'s server (default: the bench server)."""
    with (DATA / "company_names" / "companies.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    kinds, asked = KINDS, queries(rows)
    with (connect() if client is None else nullcontext(client)) as client:
        _ensure(client, PIPELINE, rows, "none")
        _ensure(client, EMBEDDED, rows, None)
        systems = {label: _searcher(client, pipeline, kind_of_search, params)
                   for label, pipeline, kind_of_search, params in SYSTEMS}
        systems[RAW] = _raw(client, rows)
        labels = list(systems)
        right = {label: {k: [] for k in kinds} for label in labels}
        api = {label: [] for label in labels}
        trace = {label: [] for label in labels}
        for i, (kind, typed, name) in enumerate(asked):
            for label in labels[i % len(labels):] + labels[:i % len(labels)]:
                holder = {}
                api[label].append(timed(lambda: holder.setdefault("r", systems[label](typed))))
                top, ms = holder["r"]
                trace[label].append(ms)
                # Names are unique (case-insensitively): the top name identifies the company.
                right[label][kind].append(top is not None and top.lower() == name.lower())
        columns, lines = ["edit", "queries"], {k: [k, 0] for k in kinds + ["all"]}
        for label in labels:
            (p50, p95), (t50, t95) = percentiles(api[label]), percentiles(trace[label])
            timing = "statement" if label == RAW else "trace"
            columns.append(f"{label} accuracy@1 (API p50 {p50:.1f} / p95 {p95:.1f} ms;"
                           f" {timing} p50 {t50:.1f} / p95 {t95:.1f} ms)")
            everything = [x for v in right[label].values() for x in v]
            for kind, found in (*right[label].items(), ("all", everything)):
                lines[kind][1] = len(found)
                lines[kind].append(sum(found) / len(found))
        table("misspelled company names (5,608 names): the right company at rank 1",
              columns, list(lines.values()))
