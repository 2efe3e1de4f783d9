"""fuzzy over ~100k long fragments: the word method against the text method.

The corpus is bench/million.py's (bench/corpus.py through the bulk path), its
class c1: SciFact, Cranfield, CISI, Godot and KEV texts and three perturbed
copies, 102,825 fragments of ~580 characters. Build it with
``PGBRAID_MILLION_DIR=DIR python -m bench million --build`` (all three classes),
or only c1 as docs/benchmarks.md says; searches name classification c1.

Queries: three consecutive words of a SciFact title (words of three letters or
more), one word of five letters or more misspelled (bench/fuzzy.py's edits), 120
of them, seeded. A query is found when a fragment of its title's document (the
original or a perturbed copy) is among the 10 hits. Both methods answer each
query in turn, in a rotating order; the text method, which rescans each
candidate's text (tens of seconds a query at this size), runs on the first
TEXT_QUERIES only.
"""

from __future__ import annotations

import random
import re

from .common import DATA, console, percentiles, read_jsonl, table, timed

QUERIES = 120
TEXT_QUERIES = 6
_WORD = re.compile(r"^[A-Za-z][A-Za-z-]{2,}$")


def queries(n: int = QUERIES) -> list[tuple[str, str]]:
    """(query, SciFact document id) pairs."""
    from .fuzzy import _edit

    rng = random.Random(20261201)
    titles = [(d["_id"], d["title"].split())
              for d in read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz")]
    out = []
    while len(out) < n:
        doc, words = rng.choice(titles)
        starts = [i for i in range(len(words) - 2) if all(_WORD.match(w) for w in words[i:i + 3])]
        if not starts:
            continue
        window = words[(i := rng.choice(starts)):i + 3]
        long_enough = [j for j, w in enumerate(window) if len(w) >= 5]
        if not long_enough:
            continue
        j = rng.choice(long_enough)
        window[j] = _edit(window[j], rng, rng.choice(["delete", "insert", "substitute",
                                                      "transpose"]))
        out.append((" ".join(window), doc))
    return out


def run() -> None:
    from . import million

    with million.connect() as client:
        if million.PIPELINE not in {p.name for p in client.pipelines()}:
            console.print(f"[yellow]fuzzy at 100k skipped: no {million.PIPELINE} corpus in "
                          f"{million.DIR} (see bench/fuzzy_corpus.py)[/]")
            return
        methods = {"text": [], "words": []}
        traces = {"text": [], "words": []}
        found = {"text": [], "words": []}
        for i, (query, doc) in enumerate(queries()):
            order = ["words", "text"] if i % 2 else ["text", "words"]
            for method in order:
                if method == "text" and i >= TEXT_QUERIES:
                    continue
                holder = {}
                methods[method].append(timed(lambda: holder.setdefault("r", client.search(
                    million.PIPELINE, query, type="fuzzy", classification=["c1"],
                    params={"k": 10, "method": method}))))
                response = holder["r"]
                traces[method].append(response.trace.ms)
                found[method].append(any(h.document_id.split("~")[0] == f"scifact/{doc}"
                                         for h in response.hits))
        rows = []
        for method in (m for m in ("words", "text") if methods[m]):
            (p50, p95), (t50, t95) = percentiles(methods[method]), percentiles(traces[method])
            rows.append([method, len(methods[method]), f"{p50:.1f}", f"{p95:.1f}", f"{t50:.1f}",
                         f"{t95:.1f}", f"{sum(found[method]) / len(found[method]):.2f}"])
        paired = [(w, t) for w, t in zip(methods["words"], methods["text"])]
        table("fuzzy over the 100k corpus (class c1), 3-word queries with a typo",
              ["method", "queries", "API p50 ms", "API p95 ms", "trace p50 ms", "trace p95 ms",
               "source document in the top 10"], rows)
        console.print("paired, first queries (words ms, text ms): "
                      + ", ".join(f"{w:.0f}/{t:.0f}" for w, t in paired))
