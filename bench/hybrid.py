"""Fusion side by side: bm25, similarity, hybrid (RRF and score fusion) and auto.

SciFact (test) twice — one fragment per abstract (as BEIR and the reference
figures) and default chunking — then CISI and Cranfield with default chunking,
each as one embedded pipeline; every system is evaluated at document level
(best fragment per document, 100 documents per query) with ir-measures. Cranfield's relevance
codes (1 best .. 4, -1 none) become gains 4..1 and 0.
"""

from __future__ import annotations

import time

from pgbraid.evaluation import evaluate, read_qrels

from . import plots
from .common import DATA, console, connect, has_pipeline, read_jsonl, table
from .vector import PIPELINE as SCIFACT, ensure_pipeline as ensure_scifact

SCIFACT_WHOLE = "bench-scifact-whole"

COLLECTIONS = {
    "SciFact, one fragment per abstract": (SCIFACT_WHOLE, "beir_scifact", "qrels/test.tsv"),
    "SciFact": (SCIFACT, "beir_scifact", "qrels/test.tsv"),
    "CISI": ("bench-cisi-vec", "cisi", "qrels.tsv"),
    "Cranfield": ("bench-cranfield-vec", "cranfield", "qrels.tsv"),
}

SYSTEMS = {
    "bm25": {"type": "bm25"},
    "similarity": {"type": "similarity"},
    "hybrid RRF k=60 (default)": {"type": "hybrid"},
    "hybrid RRF k=20": {"type": "hybrid", "params": {"rrf_k": 20}},
    "hybrid min-max": {"type": "hybrid", "params": {"fusion": "min-max"}},
    "auto": {"type": "auto"},
}


def ensure(client, name: str, folder: str) -> None:
    if name == SCIFACT:
        ensure_scifact(client)
        return
    if has_pipeline(client, name):
        return
    # The whole-abstract SciFact pipeline is set up as BEIR evaluates it (and as the
    # reference figures were measured): one fragment per abstract, the model reading
    # its first 256 tokens.
    client.create_pipeline(name, chunk_size=20_000 if name == SCIFACT_WHOLE else 1000)
    start = time.perf_counter()
    records = [{"id": d["_id"], "title": d.get("title") or "", "text": d["text"] or d.get("title") or "-"}
               for d in read_jsonl(DATA / folder / "corpus.jsonl.gz")]
    report = client.ingest(name, [r for r in records if r["text"].strip()])
    console.print(f"embedded {folder}: {report.embedded} fragments in {time.perf_counter() - start:.0f} s")


def judgments(folder: str, qrels_file: str) -> dict[str, dict[str, int]]:
    qrels = read_qrels(DATA / folder / qrels_file)
    if folder == "cranfield":
        return {q: {d: (5 - code if 1 <= code <= 4 else 0) for d, code in docs.items()}
                for q, docs in qrels.items()}
    return qrels


KEV = "bench-kev-vec"


def identifiers(client) -> None:
    """Every CVE id of the KEV catalog as a query: is its record first?"""
    import gzip
    import json

    with gzip.open(DATA / "cisa_kev" / "known_exploited_vulnerabilities.json.gz", "rt") as handle:
        records = json.load(handle)["vulnerabilities"]
    if not has_pipeline(client, KEV):
        client.create_pipeline(KEV)
        client.ingest(KEV, [{"id": v["cveID"], "title": f"{v['cveID']} {v['vendorProject']} {v['product']}",
                             "text": f"{v['vulnerabilityName']}. {v['shortDescription']}"} for v in records])
    rows = []
    for kind in ("similarity", "bm25", "hybrid", "auto"):
        first = sum(client.search(KEV, v["cveID"], type=kind, params={"k": 1}).hits[0].document_id
                    == v["cveID"] for v in records)
        rows.append([kind, first, len(records), first / len(records)])
    absent = client.search(KEV, "CVE-2099-99999", type="auto", params={"k": 3})
    legs = {e.retriever: e.hits for e in absent.trace.retrievers}
    table("CISA KEV: a CVE id as the query, its record at rank 1",
          ["type", "rank 1", "queries", "share"], rows)
    console.print(f"  absent id CVE-2099-99999 with auto: legs {legs}; similarity alone returns "
                  f"{len(client.search(KEV, 'CVE-2099-99999', type='similarity', params={'k': 3}).hits)} near-misses")


def run(*, quick: bool = False) -> None:
    with connect() as client:
        identifiers(client)
        for label, (pipeline, folder, qrels_file) in COLLECTIONS.items():
            if quick and not label.startswith("SciFact"):
                continue
            ensure(client, pipeline, folder)
            qrels = judgments(folder, qrels_file)
            queries = [(str(q["_id"]), q["text"]) for q in read_jsonl(DATA / folder / "queries.jsonl")
                       if str(q["_id"]) in qrels]
            rows = []
            for name, request in SYSTEMS.items():
                run_ = {}
                for qid, text in queries:
                    params = {"k": 100, **request.get("params", {})}
                    response = client.search(pipeline, text, type=request["type"], group_by="document",
                                             params=params)
                    run_[qid] = {h.document_id: 100.0 - h.rank for h in response.hits}
                m = evaluate(qrels, run_)
                rows.append([name, m["nDCG@10"], m["R@100"]])
            table(f"{label} ({len(queries)} judged queries): nDCG@10 and recall@100",
                  ["system", "nDCG@10", "R@100"], rows)
            plots.save("hybrid", f"relevance/{label}",
                       {name: {"nDCG@10": n, "R@100": r} for name, n, r in rows},
                       queries=len(queries))


def plot(results: dict) -> list:
    """nDCG@10 per strategy (bars) per collection (groups)."""
    measured = {label: plots.data(results, f"relevance/{label}") for label in COLLECTIONS}
    measured = {label: systems for label, systems in measured.items() if systems}
    if not measured:
        return []
    names = list(dict.fromkeys(name for systems in measured.values() for name in systems))
    series = {name: [systems.get(name, {}).get("nDCG@10") for systems in measured.values()]
              for name in names}
    short = {"SciFact, one fragment per abstract": "SciFact\n(whole abstracts)",
             "SciFact": "SciFact\n(~1,000-char fragments)"}
    groups = [short.get(label, label) for label in measured]
    return [plots.grouped("ndcg-per-strategy", "nDCG@10 per strategy and collection",
                          groups, series, "nDCG@10")]
