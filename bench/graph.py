"""Graph speed: pgbraid's engine vs Apache AGE vs a plain-Python reference, on ATT&CK
and on a 1M-edge power-law graph, in one run.

Each seed is asked of every engine in turn (interleaved, so drift on the shared
machine hits all alike); the reference answers from the edge list in memory
(its adjacency built once, not timed). "same" counts the seeds where the engine's
entities equal the reference's (similar: the top 10 keys and scores; neighbours:
every vertex reached and its hops), "age = native" where both engines gave the
same entities. AGE is built from ../shared/vendor into the bench server's data dir
when gcc and make exist; without it the AGE columns say n/a.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
import time

import numpy as np

from pgbraid.db import extensions
from pgbraid.strategies.graph.reference import Reference

from . import plots
from .common import BENCH_DIR, DATA, ROOT, console, connect, has_pipeline, percentiles, table

ATTACK = "bench-attack"
SYNTHETIC = "bench-graph-1m"
AGE_SOURCE = ROOT.parent / "shared" / "vendor" / "apache-age-PG18-1.8.0.tar.gz"


def ensure_attack(client) -> None:
    if has_pipeline(client, ATTACK):
        return
    nodes = {}
    with gzip.open(DATA / "mitre_attack" / "nodes.jsonl.gz", "rt") as handle:
        for line in handle:
            n = json.loads(line)
            if not n["revoked"] and not n["deprecated"] and n["attack_id"]:
                nodes[n["attack_id"]] = n
    edges = set()
    with gzip.open(DATA / "mitre_attack" / "edges.tsv.gz", "rt") as handle:
        for r in csv.DictReader(handle, delimiter="\t"):
            s, t = r["source_attack_id"], r["target_attack_id"]
            if r["revoked"] == "false" and r["deprecated"] == "false" and s in nodes and t in nodes and s != t:
                edges.add((nodes[s]["kind"], s, r["relationship_type"], nodes[t]["kind"], t))
    client.create_pipeline(ATTACK, embedder="none")
    client.load_graph_records(ATTACK, [(n["kind"], k, n["name"], []) for k, n in nodes.items()],
                              sorted(edges))


def ensure_synthetic(client, vertices: int = 100_000, edges: int = 1_000_000) -> None:
    """Sources uniform, targets Zipf-distributed: a few hubs with tens of thousands of edges."""
    if has_pipeline(client, SYNTHETIC):
        return
    rng = np.random.default_rng(1)
    src = rng.integers(0, vertices, edges * 2)
    dst = (rng.zipf(1.6, edges * 2) - 1) % vertices
    pairs = np.unique(np.stack([src, dst], axis=1)[src != dst], axis=0)
    pairs = pairs[rng.permutation(len(pairs))[:edges]]
    client.create_pipeline(SYNTHETIC, embedder="none")
    client.load_graph_records(SYNTHETIC, [("node", str(i), f"node {i}", []) for i in range(vertices)],
                              [("node", str(a), "links", "node", str(b)) for a, b in pairs])
    console.print(f"synthetic graph: {vertices:,} vertices, {len(pairs):,} edges; "
                  f"largest in-degree {np.bincount(pairs[:, 1]).max():,}")


def age_ready() -> bool:
    """AGE built into the bench server's data dir (cached), or False where it cannot be."""
    if shutil.which("gcc") is None or shutil.which("make") is None or not AGE_SOURCE.exists():
        return False
    built = extensions.build(AGE_SOURCE, BENCH_DIR / "pg")
    if built.restart_required:
        from pgbraid.db.server import EmbeddedServer

        EmbeddedServer(BENCH_DIR / "pg").restart()
    return True


def graph_of(client, pipeline: str) -> tuple[Reference, dict[str, int]]:
    """The pipeline's edges for the reference, and its vertex ids (the walk's tie-break)."""
    with client.session() as conn:
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (pipeline,)).fetchone()[0]
        ids = {f"{t}:{k}": i for i, t, k in conn.execute(
            "SELECT id, type, key FROM pgbraid.vertices WHERE pipeline_id = %s", (pid,))}
        keys = {i: k for k, i in ids.items()}
        edges = [(*keys[s].split(":", 1), t, *keys[d].split(":", 1), w) for s, t, d, w in conn.execute(
            "SELECT src, type, dst, weight FROM pgbraid.edges WHERE pipeline_id = %s", (pid,))]
    return Reference(edges), ids


def _entities(details: dict) -> list[tuple]:
    return [(e["type"], e["key"], e["score"], e.get("hops"), json.dumps(e["evidence"], sort_keys=True))
            for e in details["entities"]]


def _reference_answer(ref: Reference, ids: dict, seed: str, params: dict):
    types = set(params.get("edge_types") or [params["edge_type"]])  # the cases name them
    if params["mode"] == "similar":
        return [(v.split(":", 1)[1], round(s, 6)) for v, s, _ in ref.similar(
            seed, types, neighbour_type=params.get("neighbour_type"))[:params.get("k", 10)]]
    reached = ref.neighbours(seed, types, ids=ids, hops=params.get("hops", 2),
                             cap=params.get("max_fanout", 100))
    first = sorted(reached.items(), key=lambda kv: (kv[1], kv[0].split(":", 1)[1]))
    return dict(first[:params["k"]])  # the engines' order before k


def _engine_answer(details: dict, params: dict):
    if params["mode"] == "similar":
        return [(e["key"], e["score"]) for e in details["entities"]]
    return {f"{e['type']}:{e['key']}": e["hops"] for e in details["entities"]}


def case(client, pipeline: str, seeds: list[str], vtype: str, params: dict, ref: Reference,
         ids: dict, engines: tuple[str, ...]) -> dict:
    """Every seed asked of every engine and of the reference, interleaved."""
    times = {e: [] for e in (*engines, "reference")}
    same = {e: 0 for e in engines}
    agree, reached, capped, certified = 0, [], 0, 0
    for seed in seeds[:2]:  # warm caches and prepared statements
        for engine in engines:
            client.search(pipeline, "x", type="graph", params={**params, "seed": seed, "engine": engine})
    for seed in seeds:
        found = {}
        for engine in engines:
            started = time.perf_counter()
            response = client.search(pipeline, "x", type="graph",
                                     params={**params, "seed": seed, "engine": engine})
            times[engine].append((time.perf_counter() - started) * 1000)
            found[engine] = response.trace.retrievers[0].details
        started = time.perf_counter()
        expected = _reference_answer(ref, ids, f"{vtype}:{seed}", params)
        times["reference"].append((time.perf_counter() - started) * 1000)
        details = found[engines[0]]
        for engine in engines:
            same[engine] += _engine_answer(found[engine], params) == expected
        agree += len(engines) == 2 and _entities(found["pgbraid"]) == _entities(found["age"])
        reached.append(details.get("reached", len(details["entities"])))
        capped += bool(details.get("capped"))
        certified += details.get("hubs", {}).get("certified_exact", params["mode"] == "similar")
    return {"times": times, "same": same, "agree": agree, "n": len(seeds),
            "reached": float(np.mean(reached)), "capped": capped,
            "certified": f"{certified}/{len(seeds)}" if params["mode"] == "similar" else "n/a"}


def _row(label: str, result: dict, engines: tuple[str, ...]) -> list:
    row = _cells(label, result, engines)
    console.print(" | ".join(str(c) for c in row))  # as it comes: a long run shows progress
    return row


def _cells(label: str, result: dict, engines: tuple[str, ...]) -> list:
    row = [label, result["n"]]
    for engine in ("pgbraid", "age", "reference"):
        if engine in result["times"]:
            p50, p95 = percentiles(result["times"][engine])
            row += [f"{p50:,.1f}", f"{p95:,.1f}"]
        else:
            row += ["n/a", "n/a"]
    native = percentiles(result["times"]["pgbraid"])[0]
    row.append(f"{percentiles(result['times']['age'])[0] / native:,.1f}×" if "age" in engines else "n/a")
    row += [f"{result['same']['pgbraid']}/{result['n']}",
            f"{result['same']['age']}/{result['n']}" if "age" in engines else "n/a",
            f"{result['agree']}/{result['n']}" if "age" in engines else "n/a",
            f"{result['reached']:,.0f}", f"{result['capped']}/{result['n']}", result["certified"]]
    return row


COLUMNS = ["query", "seeds", "native p50", "native p95", "AGE p50", "AGE p95", "Python p50",
           "Python p95", "AGE / native", "native = ref", "AGE = ref", "AGE = native", "entities", "capped",
           "certified exact"]


def attack_cases(client, engines) -> list[list]:
    ensure_attack(client)
    ref, ids = graph_of(client, ATTACK)
    groups = sorted(k.split(":", 1)[1] for k in ids if k.startswith("group:"))[:40]
    software = sorted(k.split(":", 1)[1] for k in ids if k.startswith("software:"))[:40]
    similar = {"mode": "similar", "edge_type": "uses", "neighbour_type": "technique", "k": 10}
    walk = {"mode": "neighbours", "edge_types": ["uses"], "hops": 2, "k": 1000,
            "max_fanout": 100_000}
    return [
        _row("ATT&CK similar (group -uses-> technique, jaccard)",
             case(client, ATTACK, groups, "group", similar, ref, ids, engines), engines),
        _row("ATT&CK 2-hop neighbours of software (uses, uncapped)",
             case(client, ATTACK, software, "software", walk, ref, ids, engines), engines),
    ]


def synthetic_cases(client, engines) -> list[list]:
    ensure_synthetic(client)
    ref, ids = graph_of(client, SYNTHETIC)
    seeds = [str(i) for i in range(2_500, 100_000, 5_000)]  # 20, none of them a hub
    hubs = [str(i) for i in range(5)]
    similar = {"mode": "similar", "edge_type": "links", "k": 10}
    walk = {"mode": "neighbours", "edge_types": ["links"], "hops": 2, "k": 1000}
    native = ("pgbraid",)
    rows = [
        _row("1M edges: similar (jaccard), defaults (hubs: > 1,000 edges; certified)",
             case(client, SYNTHETIC, seeds, "node", similar, ref, ids, native), native),
        _row("1M edges: similar (jaccard), hub_budget 0 (hubs skipped, as before 022)",
             case(client, SYNTHETIC, seeds, "node", {**similar, "hub_budget": 0}, ref, ids,
                  native), native),
        _row("1M edges: 2-hop neighbours, defaults (max_fanout 100)",
             case(client, SYNTHETIC, seeds, "node", walk, ref, ids, native), native),
        _row("1M edges: 2-hop from the 5 biggest hubs, max_fanout 100",
             case(client, SYNTHETIC, hubs, "node", walk, ref, ids, native), native),
        _row("1M edges: 2-hop from the 5 biggest hubs, max_fanout 5,000",
             case(client, SYNTHETIC, hubs, "node", {**walk, "max_fanout": 5_000}, ref, ids,
                  native), native),
    ]
    if len(engines) > 1:  # AGE at 1M edges takes seconds a question: 5 seeds, paired
        rows += [
            _row("1M edges: similar (jaccard), defaults, native vs AGE (first 5 seeds)",
                 case(client, SYNTHETIC, seeds[:5], "node", similar, ref, ids, engines), engines),
            _row("1M edges: 2-hop neighbours, defaults, native vs AGE (first 5 seeds)",
                 case(client, SYNTHETIC, seeds[:5], "node", walk, ref, ids, engines), engines),
        ]
    return rows


def run(*, quick: bool = False) -> None:
    with_age = age_ready()
    engines = ("pgbraid", "age") if with_age else ("pgbraid",)
    if not with_age:
        console.print("Apache AGE cannot be built here (gcc, make or the vendored source missing)")
    with connect(age=with_age) as client:
        rows = attack_cases(client, engines)
        if not quick:
            rows += synthetic_cases(client, engines)
    table("graph latency (ms), agreement with the plain-Python reference, entities reached",
          COLUMNS, rows)
    plots.save("graph", "latency", [dict(zip(COLUMNS, row)) for row in rows],
               machine="2 cores shared with other work", age=with_age)
