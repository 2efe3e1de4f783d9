"""Graph speed: `similar` and 2-hop `neighbours` on ATT&CK and on a 1M-edge power-law graph."""

from __future__ import annotations

import csv
import gzip
import json

import numpy as np

from .common import DATA, console, connect, has_pipeline, percentiles, table, timed

ATTACK = "bench-attack"
SYNTHETIC = "bench-graph-1m"


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
    # a large load: generous statement timeout for this client only
    client.load_graph_records(SYNTHETIC, [("node", str(i), f"node {i}", []) for i in range(vertices)],
                              [("node", str(a), "links", "node", str(b)) for a, b in pairs])
    console.print(f"synthetic graph: {vertices:,} vertices, {len(pairs):,} edges; "
                  f"largest in-degree {np.bincount(pairs[:, 1]).max():,}")


def measure(client, pipeline: str, seeds: list[str], params: dict) -> tuple[float, float, float]:
    for seed in seeds[:3]:
        client.search(pipeline, "x", type="graph", params={**params, "seed": seed})
    reached = []

    def once(seed):
        response = client.search(pipeline, "x", type="graph", params={**params, "seed": seed})
        details = response.trace.retrievers[0].details
        reached.append(details.get("reached", len(details["entities"])))

    p50, p95 = percentiles([timed(lambda s=s: once(s)) for s in seeds])
    return p50, p95, float(np.mean(reached))


def run(*, quick: bool = False) -> None:
    with connect() as client:
        ensure_attack(client)
        with client.session() as conn:
            groups = [r[0] for r in conn.execute(
                "SELECT v.key FROM pgbraid.vertices v JOIN pgbraid.pipelines p ON p.id = v.pipeline_id"
                " WHERE p.name = %s AND v.type = 'group' ORDER BY v.key LIMIT 40", (ATTACK,))]
            software = [r[0] for r in conn.execute(
                "SELECT v.key FROM pgbraid.vertices v JOIN pgbraid.pipelines p ON p.id = v.pipeline_id"
                " WHERE p.name = %s AND v.type = 'software' ORDER BY v.key LIMIT 40", (ATTACK,))]
        rows = [
            ["ATT&CK similar (group -uses-> technique, jaccard)",
             *measure(client, ATTACK, groups, {"mode": "similar", "edge_type": "uses",
                                               "neighbour_type": "technique", "k": 10})],
            ["ATT&CK 2-hop neighbours of software (uses)",
             *measure(client, ATTACK, software, {"mode": "neighbours", "edge_types": ["uses"],
                                                 "hops": 2, "k": 1000})],
        ]
        if not quick:
            ensure_synthetic(client)
            seeds = [str(i) for i in range(0, 100_000, 2_500)]
            hubs = [str(i) for i in range(5)]
            rows += [
                ["1M edges: similar (jaccard), max_fanout 10000 (default)",
                 *measure(client, SYNTHETIC, seeds[:10], {"mode": "similar", "edge_type": "links", "k": 10})],
                ["1M edges: similar (jaccard), max_fanout 100",
                 *measure(client, SYNTHETIC, seeds, {"mode": "similar", "edge_type": "links", "k": 10,
                                                     "max_fanout": 100})],
                ["1M edges: 2-hop neighbours, max_fanout 100 (default)",
                 *measure(client, SYNTHETIC, seeds, {"mode": "neighbours", "hops": 2, "k": 1000})],
                ["1M edges: 2-hop from hubs, max_fanout 100",
                 *measure(client, SYNTHETIC, hubs, {"mode": "neighbours", "hops": 2, "k": 1000})],
                ["1M edges: 2-hop from hubs, max_fanout 5000",
                 *measure(client, SYNTHETIC, hubs, {"mode": "neighbours", "hops": 2, "k": 1000,
                                                    "max_fanout": 5000})],
            ]
        table("graph latency (ms) and entities reached", ["query", "p50", "p95", "entities"], rows)
