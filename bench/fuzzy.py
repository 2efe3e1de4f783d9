"""fuzzy: misspelled company names -> the right company at rank 1."""

from __future__ import annotations

import csv
import random

from .common import DATA, connect, has_pipeline, percentiles, table, timed

PIPELINE = "bench-companies"
SAMPLES = 600


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
    if kind == "two edits":
        return _edit(_edit(name, rng, rng.choice(["delete", "substitute"])), rng,
                     rng.choice(["insert", "transpose"]))
    if kind == "missing word":
        words = name.split()
        del words[rng.randrange(1, len(words))]  # keep the first, distinctive word
        return " ".join(words)
    return _edit(name, rng, kind)


def run() -> None:
    with (DATA / "company_names" / "companies.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    with connect() as client:
        if not has_pipeline(client, PIPELINE):
            client.create_pipeline(PIPELINE, embedder="none")
            client.ingest(PIPELINE, [{"id": r["symbols"].split()[0], "title": r["name"],
                                      "text": r["name"]} for r in rows])
        rng = random.Random(20261130)
        kinds = ["delete", "insert", "substitute", "transpose", "two edits", "missing word"]
        candidates = [r for r in rows if len(r["name"]) >= 8]
        results: dict[str, list[bool]] = {k: [] for k in kinds}
        latencies: list[float] = []
        for n in range(SAMPLES):
            kind = kinds[n % len(kinds)]
            row = rng.choice([r for r in candidates if len(r["name"].split()) >= 2]
                             if kind == "missing word" else candidates)
            typed = misspell(row["name"], rng, kind)
            holder = {}
            latencies.append(timed(lambda: holder.setdefault(
                "r", client.search(PIPELINE, typed, type="fuzzy", params={"k": 1}))))
            hits = holder["r"].hits
            # Names are unique (case-insensitively), so the top name identifies the company.
            results[kind].append(bool(hits) and hits[0].page_content.lower() == row["name"].lower())
        p50, p95 = percentiles(latencies)
        lines = [[k, len(v), sum(v) / len(v)] for k, v in results.items()]
        everything = [x for v in results.values() for x in v]
        lines.append(["all", len(everything), sum(everything) / len(everything)])
        table(f"fuzzy: misspelled company names (5,608 names), rank-1 accuracy; "
              f"latency p50 {p50:.1f} ms, p95 {p95:.1f} ms", ["edit", "queries", "accuracy@1"], lines)
