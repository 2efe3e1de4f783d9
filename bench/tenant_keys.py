"""What migration 048's tenant-bound keys cost, paired in one server and one process.

    python -m bench.tenant_keys [--rounds 3] [--docs N] [--queries 60]

``bench.ingest_paired`` compares two checkouts' code on one server, so both run on
whichever schema the server has: it cannot price a migration. Here the schema
alternates instead. Each round ingests the same SciFact documents (``embedder none``)
into a fresh pipeline twice, once with 048's guards and once with them taken off
(the foreign keys and unique keys of 047, without the restrictive pipeline policies
and the extra unique keys), the order alternating round by round, and then runs the same
bm25 / fulltext / fuzzy queries on each. Per run: wall time, the client's and the
bench server's CPU, the load average; per query type, the median latency. The guards
are put back at the end (and on any error): the bench server stays migrated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from .common import connect, console, table
from .ingest import records, server_cpu
from .ingest_paired import TYPES
from .lexical import scifact_queries

# 047's foreign keys (as on main before 048), by the name 048 kept.
_OLD_KEYS = {
    ("versions", "versions_document_id_fkey"): "(document_id) REFERENCES pgbraid.documents (id)",
    ("fragments", "fragments_version_id_fkey"): "(version_id) REFERENCES pgbraid.versions (id)",
    ("edges", "edges_src_fkey"): "(src) REFERENCES pgbraid.vertices (id)",
    ("edges", "edges_dst_fkey"): "(dst) REFERENCES pgbraid.vertices (id)",
    ("bm25_segments", "bm25_segments_partition_id_fkey"):
        "(partition_id) REFERENCES pgbraid.bm25_partitions (id)",
    ("bm25_partition_stats", "bm25_partition_stats_partition_id_fkey"):
        "(partition_id) REFERENCES pgbraid.bm25_partitions (id)",
    ("bm25_dead", "bm25_dead_partition_id_fkey"):
        "(partition_id) REFERENCES pgbraid.bm25_partitions (id)",
    ("bm25_dead", "bm25_dead_pipeline_id_segment_fkey"):
        "(pipeline_id, segment) REFERENCES pgbraid.bm25_segments (pipeline_id, segment)",
    ("bm25_postings", "bm25_postings_pipeline_id_segment_fkey"):
        "(pipeline_id, segment) REFERENCES pgbraid.bm25_segments (pipeline_id, segment)",
    ("embeddings", "embeddings_fragment_id_fkey"): "(fragment_id) REFERENCES pgbraid.fragments (id)",
}
_NEW_UNIQUE = (("documents", "documents_tenant_key"), ("versions", "versions_tenant_key"),
               ("fragments", "fragments_tenant_key"), ("vertices", "vertices_tenant_key"),
               ("bm25_partitions", "bm25_partitions_tenant_key"),
               ("bm25_segments", "bm25_segments_tenant_key"))
_OLD_UNIQUE = {
    ("versions", "versions_document_id_version_key"): "UNIQUE (document_id, version)",
    ("fragments", "fragments_version_id_ordinal_key"): "UNIQUE (version_id, ordinal)",
    ("bm25_dead", "bm25_dead_pkey"): "PRIMARY KEY (partition_id, ordinal)",
}
_TO_PIPELINES = """
SELECT t.relname, k.conname FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = 'pgbraid' AND k.contype = 'f' AND k.confrelid = 'pgbraid.pipelines'::regclass
"""
_POLICED = """
SELECT c.relname, p.polname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgbraid' AND p.polname IN ('pipeline_inserted', 'pipeline_updated')
"""


def _guards_off(conn) -> None:
    """The schema as before 048, but for the column privileges (no runtime cost)."""
    from psycopg import sql

    def ident(name: str) -> sql.Composable:
        return sql.Identifier("pgbraid", name)

    for table_name, policy in conn.execute(_POLICED).fetchall():
        conn.execute(sql.SQL("DROP POLICY {} ON {}").format(sql.Identifier(policy), ident(table_name)))
    for table_name, name in conn.execute(_TO_PIPELINES).fetchall():
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} FOREIGN KEY"
                             " (pipeline_id) REFERENCES pgbraid.pipelines (id) ON DELETE CASCADE")
                     .format(ident(table_name), sql.Identifier(name), sql.Identifier(name)))
    for (table_name, name), definition in _OLD_KEYS.items():
        if conn.execute("SELECT to_regclass(%s)", (f"pgbraid.{table_name}",)).fetchone()[0]:
            conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} FOREIGN KEY "
                                 + definition + " ON DELETE CASCADE").format(
                ident(table_name), sql.Identifier(name), sql.Identifier(name)))
    for (table_name, name), definition in _OLD_UNIQUE.items():
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} " + definition)
                     .format(ident(table_name), sql.Identifier(name), sql.Identifier(name)))
    for table_name, name in _NEW_UNIQUE:
        conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
            ident(table_name), sql.Identifier(name)))
    conn.execute("ALTER TABLE pgbraid.pipelines DROP CONSTRAINT pipelines_tenant_id_id_key")
    conn.execute("ALTER TABLE pgbraid.age_graphs DROP CONSTRAINT age_graphs_graph_check")


def _guards_on(conn) -> None:
    """048 again, as written (its grants end as they were)."""
    from importlib import resources

    conn.execute((resources.files("pgbraid.db") / "migrations" / "048_tenant_bound_keys.sql")
                 .read_text())


def _guarded(conn) -> bool:
    return bool(conn.execute("SELECT count(*) FROM pg_policy WHERE polname = 'pipeline_inserted'"
                             ).fetchone()[0])


def _run(client, rows, queries, guarded: bool) -> dict:
    with client._db.admin() as conn:
        if _guarded(conn) != guarded:
            (_guards_on if guarded else _guards_off)(conn)
    name = f"bench-tenant-keys-{os.getpid()}-{time.time_ns()}"
    client.create_pipeline(name, embedder="none")
    load = os.getloadavg()[0]
    server, cpu, started = server_cpu(), time.process_time(), time.perf_counter()
    report = client.ingest(name, rows)
    out = {"wall": time.perf_counter() - started, "client_cpu": time.process_time() - cpu,
           "server_cpu": server_cpu() - server, "load": load, "failed": len(report.failed)}
    for kind in TYPES:
        samples = []
        for text in queries:
            begun = time.perf_counter()
            client.search(name, text, type=kind, params={"k": 10})
            samples.append((time.perf_counter() - begun) * 1000)
        out[kind] = statistics.median(samples)
    client.delete_pipeline(name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.tenant_keys")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    from pgbraid.ingest import language

    rows = records()[:args.docs]
    # 60 characters: fuzzy compares the whole query with every word (SciFact's claims)
    queries = [text[:60] for _, text in scifact_queries()[0][:args.queries]]
    client = connect()
    language._identifier()
    runs: dict[bool, list[dict]] = {True: [], False: []}
    try:
        _run(client, rows[:200], queries[:5], True)  # warm-up, not counted
        for r in range(args.rounds):
            for guarded in ((True, False) if r % 2 == 0 else (False, True)):
                runs[guarded].append(_run(client, rows, queries, guarded))
                console.print(f"round {r + 1} {'048' if guarded else 'no guards'}: "
                              f"{runs[guarded][-1]}")
    finally:
        with client._db.admin() as conn:
            if not _guarded(conn):
                _guards_on(conn)
        client.close()
    columns = ["schema", "docs/s (median)", "client CPU s", "server CPU s",
               *(f"{k} p50 ms" for k in TYPES), "load"]
    out = []
    for guarded, label in ((False, "before 048"), (True, "048")):
        done = runs[guarded]
        out.append([label, statistics.median(args.docs / d["wall"] for d in done),
                    statistics.median(d["client_cpu"] for d in done),
                    statistics.median(d["server_cpu"] for d in done),
                    *(statistics.median(d[k] for d in done) for k in TYPES),
                    " ".join(f"{d['load']:.1f}" for d in done)])
    table(f"tenant-bound keys, {args.docs} SciFact docs, {args.rounds} rounds", columns, out)


if __name__ == "__main__":
    main()
