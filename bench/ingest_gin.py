"""What the fragments' indexes cost a batch, and GIN settings for it: one batch of SciFact
written with ``writer.write_new`` into a pipeline already holding documents, in a
transaction rolled back each time, its backend's CPU and the WAL it wrote measured.

    python -m bench.ingest_gin [--rounds 3] [--indexes | --body]

By default: each GIN setting of ``SETTINGS``, the pending lists merged before and after
the write (the merge counted apart). With ``--indexes``: each index on fragments
dropped in turn inside the transaction (its marginal cost), then every GIN index. With
``--body``: the body trigram index as migration 053 makes it (short text only, and a
btree of the long fragments) against the one before it (every text), each made inside
the transaction whatever the server's schema. With ``--toast``: the wide columns
stored uncompressed against pglz.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from pgbraid import pipelines
from pgbraid.ingest import bm25_index, language, preparing, writer
from pgbraid.ingest.readers import FieldMap, items

from .common import connect, table
from .ingest import records
from .ingest_phases import pcpu

MERGE = """
SELECT count(gin_clean_pending_list(i.indexrelid)) FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE a.amname = 'gin' AND i.indrelid = 'pgbraid.fragments'::regclass
"""
_INDEXES = """
SELECT c.relname::text, a.amname = 'gin' FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid = 'pgbraid.fragments'::regclass AND NOT i.indisunique ORDER BY 1
"""
GIN = ("fragments_tsv", "fragments_body_trgm", "fragments_title_trgm", "fragments_word_set",
       "fragments_metadata")
SETTINGS = {
    "none": [],
    "work_mem 64MB": ["SET LOCAL work_mem = '64MB'"],
    "pending limit 1GB": ["SET LOCAL gin_pending_list_limit = '1GB'"],
    "pending limit 1GB, maintenance_work_mem 256MB": [
        "SET LOCAL gin_pending_list_limit = '1GB'", "SET LOCAL maintenance_work_mem = '256MB'"],
    "fastupdate off": [f"ALTER INDEX pgbraid.{i} SET (fastupdate = off)" for i in GIN],
    "toast_tuple_target 8160": ["ALTER TABLE pgbraid.fragments SET (toast_tuple_target = 8160)"],
}
# The wide columns stored without pglz (lz4 is not in the embedded server's build).
_WIDE = ("body", "tsv", "bm25_terms", "bm25_tfs", "word_set")
TOAST = {
    "none": [],
    "wide columns uncompressed (STORAGE EXTERNAL)": [
        "ALTER TABLE pgbraid.fragments " + ", ".join(
            f"ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in _WIDE)],
}
_BODY = ("DROP INDEX IF EXISTS pgbraid.fragments_body_trgm",
         "DROP INDEX IF EXISTS pgbraid.fragments_body_long")
_WHOLE = ("CREATE INDEX fragments_body_trgm ON pgbraid.fragments USING gin"
          " (pipeline_id, body gin_trgm_ops) WHERE current AND NOT quarantined AND key_id IS NULL")
BODY = {
    "body trigram: every text (before 053)": [*_BODY, _WHOLE],
    "body trigram: <= 256 bytes + long btree (053)": [
        *_BODY, _WHOLE + " AND octet_length(body) <= 256",
        "CREATE INDEX fragments_body_long ON pgbraid.fragments (pipeline_id) WHERE current"
        " AND NOT quarantined AND key_id IS NULL AND octet_length(body) > 256"],
}


def write_once(client, pipeline, batch, statements: list[str]) -> tuple[float, float, float]:
    """Server CPU of the write, of merging what it left pending, and its WAL bytes."""
    with client._db.admin() as conn:
        conn.execute(MERGE)
        try:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
                client._db._enter(conn, client.tenant)
                bm25_index.lock(conn, pipeline.id)
                keys = {bm25_index.partition_key(p.classifications) for p in batch}
                ids = bm25_index.partitions(conn, pipeline.id, keys)
                pid = conn.info.backend_pid
                start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
                before = pcpu(pid)
                writer.write_new(conn, pipeline, batch, bm25_index.Pending(),
                                 lambda p: ids[bm25_index.partition_key(p.classifications)])
                written = pcpu(pid)
                conn.execute("RESET ROLE")
                conn.execute(MERGE)
                merged = pcpu(pid)
                wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)",
                                   (start,)).fetchone()[0]
                raise _Rollback((written - before, merged - written, float(wal)))
        except _Rollback as done:
            return done.args[0]


class _Rollback(Exception):
    pass


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.ingest_gin")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--indexes", action="store_true")
    parser.add_argument("--body", action="store_true", help="053's body trigram index or not")
    parser.add_argument("--toast", action="store_true", help="the wide columns uncompressed")
    args = parser.parse_args()
    rows, client = records(), connect()
    name = f"bench-gin-{time.time_ns()}"
    client.create_pipeline(name, embedder="none")
    language._identifier()
    client.ingest(name, rows[:2500])
    with client._session() as conn:
        pipeline = pipelines.get(conn, name)
    batch = preparing.prepare_batch(client._session, pipeline,
                                    list(items(rows[2500:4548], FieldMap())), None).items
    variants = dict(BODY if args.body else TOAST if args.toast else SETTINGS)
    if args.indexes:
        with client._db.admin() as conn:
            found = conn.execute(_INDEXES).fetchall()
        variants = {"none": [], **{f"without {i}": [f"DROP INDEX pgbraid.{i}"] for i, _ in found},
                    "without any GIN index": [f"DROP INDEX pgbraid.{i}" for i, gin in found if gin]}
    runs: dict[str, list] = {v: [] for v in variants}
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        for v in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            runs[v].append(write_once(client, pipeline, batch, variants[v]))
    client.delete_pipeline(name)
    n = sum(len(p.pieces) for p in batch)
    out = [[v] + [f"{1000 * statistics.median(x[i] for x in runs[v]) / n:.3f}" for i in (0, 1)]
           + [f"{1000 * statistics.median(x[0] + x[1] for x in runs[v]) / n:.3f}",
              f"{min(x[2] for x in runs[v]) / n / 1024:.1f}"] for v in variants]
    table(f"One batch of {n} SciFact fragments, server CPU-ms a fragment (medians of"
          f" {args.rounds}), load {load:.1f} -> {os.getloadavg()[0]:.1f}",
          ["variant", "write", "merge after", "total", "WAL kB/frag"], out)


if __name__ == "__main__":
    main()
