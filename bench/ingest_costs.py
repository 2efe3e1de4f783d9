"""What each part of a fragment row costs the server, in isolation: `python -m bench.ingest_costs`

Needs the SciFact fragments of a lexical pipeline on the bench server (``--pipeline``,
default ``keep``: created by ingesting SciFact when missing). Its rows are copied
into a scratch schema, then inserted again in 11 statements (as ingestion's
batches do) into an unindexed copy of ``pgbraid.fragments`` with one index at a
time, all of them, and the GIN indexes under other settings (fastupdate off, a
64 MB pending list, work_mem 64 MB), and each step's backend CPU read from /proc.
The text-search functions are timed alone over the same rows. Nothing here runs
under row-level security or as the application role: it prices the indexes, not
the product.
"""

from __future__ import annotations

import argparse
import os
import time

from .common import connect, console, table
from .ingest import records

TICK = os.sysconf("SC_CLK_TCK")
INDEXES = {
    "primary key (id)": "CREATE UNIQUE INDEX ON x.f (id)",
    "unique (version_id, ordinal)": "CREATE UNIQUE INDEX ON x.f (version_id, ordinal)",
    "metadata jsonb GIN": "CREATE INDEX ON x.f USING gin (metadata jsonb_path_ops)"
                          " WHERE current AND NOT quarantined",
    "btree (pipeline_id, document_id)": "CREATE INDEX ON x.f (pipeline_id, document_id)"
                                        " WHERE current AND NOT quarantined",
    "btree (version_id)": "CREATE INDEX ON x.f (version_id)",
    "unique (pipeline_id, bm25_ordinal)": "CREATE UNIQUE INDEX ON x.f (pipeline_id, bm25_ordinal)",
    "tsv GIN": "CREATE INDEX ON x.f USING gin (pipeline_id, tsv) {with}"
               " WHERE current AND NOT quarantined",
    "body trigram GIN": "CREATE INDEX ON x.f USING gin (pipeline_id, body gin_trgm_ops) {with}"
                        " WHERE current AND NOT quarantined AND key_id IS NULL",
    "word_set GIN (fuzzy's words)": "CREATE INDEX ON x.f USING gin (word_set) WHERE NOT quarantined",
    "title trigram GIN": "CREATE INDEX ON x.f USING gin (pipeline_id, title gin_trgm_ops) {with}"
                         " WHERE current AND NOT quarantined AND key_id IS NULL",
}
GIN = ("tsv GIN", "body trigram GIN", "title trigram GIN", "word_set GIN (fuzzy's words)")
GIN_SETTINGS = {
    "default (fastupdate, 4 MB pending list)": ("", ""),
    "fastupdate off": ("WITH (fastupdate = off)", ""),
    "64 MB pending list": ("WITH (gin_pending_list_limit = 65536)", ""),
    "64 MB pending list, work_mem 64 MB": ("WITH (gin_pending_list_limit = 65536)",
                                           "SET work_mem = '64MB'"),
}
FUNCTIONS = {
    "to_tsvector(body)": "SELECT sum(length(to_tsvector(ts_config, body))) FROM x.src",
    "show_trgm(body) (trigram extraction)": "SELECT sum(cardinality(show_trgm(body))) FROM x.src",
    "show_trgm(title)": "SELECT sum(cardinality(show_trgm(title))) FROM x.src",
    "forward index from a tsvector (unnest, array_agg)":
        "SELECT count(*) FROM x.src, LATERAL (SELECT sum(array_length(positions, 1)),"
        " array_agg(lexeme ORDER BY lexeme), array_agg(array_length(positions, 1)"
        " ORDER BY lexeme) FROM unnest(tsv)) b",
}


def _cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _insert(conn, pid: int, indexes: list[str], with_: str = "", setting: str = "") -> tuple:
    """(insert CPU, pending-list cleanup CPU) of the rows into a fresh copy with indexes."""
    conn.execute("RESET work_mem")
    conn.execute("DROP TABLE IF EXISTS x.f")
    conn.execute("CREATE TABLE x.f (LIKE x.src) WITH (autovacuum_enabled = off)")
    for name in indexes:
        conn.execute(INDEXES[name].format(**{"with": with_}))
    if setting:
        conn.execute(setting)
    cpu = _cpu(pid)
    for part in range(11):
        conn.execute("INSERT INTO x.f SELECT * FROM x.src WHERE bm25_ordinal %% 11 = %s", (part,))
    inserted, cpu = _cpu(pid) - cpu, _cpu(pid)
    for (index,) in conn.execute("SELECT indexrelid::regclass::text FROM pg_index"
                                 " JOIN pg_class c ON c.oid = indexrelid JOIN pg_am a"
                                 " ON a.oid = c.relam WHERE indrelid = 'x.f'::regclass"
                                 " AND a.amname = 'gin'").fetchall():
        conn.execute("SELECT gin_clean_pending_list(%s::regclass)", (index,))
    return inserted, _cpu(pid) - cpu


def run(pipeline: str, rounds: int) -> None:
    client = connect()
    if pipeline not in {p.name for p in client.pipelines()}:
        client.create_pipeline(pipeline, embedder="none")
        client.ingest(pipeline, records())
    with client._db.admin() as conn:
        conn.autocommit = True
        pid = conn.info.backend_pid
        conn.execute("CREATE SCHEMA IF NOT EXISTS x")
        conn.execute("DROP TABLE IF EXISTS x.src")
        conn.execute("CREATE TABLE x.src AS SELECT f.* FROM pgbraid.fragments f JOIN"
                     " pgbraid.pipelines p ON p.id = f.pipeline_id WHERE p.name = %s", (pipeline,))
        rows = conn.execute("SELECT count(*) FROM x.src").fetchone()[0]
        console.print(f"[bold]ingest costs[/bold]: {rows} fragment rows, {rounds} rounds, load"
                      f" average {os.getloadavg()[0]:.1f}")
        cases = {"heap only, no index": []} | {name: [name] for name in INDEXES} \
            | {"all of them": list(INDEXES)}
        seen: dict[str, list[float]] = {name: [] for name in cases}
        gin: dict[str, list[tuple]] = {name: [] for name in GIN_SETTINGS}
        functions: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
        for _ in range(rounds):
            for name, indexes in cases.items():
                seen[name].append(sum(_insert(conn, pid, indexes)))
            for name, (with_, setting) in GIN_SETTINGS.items():
                gin[name].append(_insert(conn, pid, list(GIN), with_, setting))
            for name, statement in FUNCTIONS.items():
                cpu = _cpu(pid)
                conn.execute(statement).fetchall()
                functions[name].append(_cpu(pid) - cpu)
        conn.execute("DROP SCHEMA x CASCADE")
    heap = min(seen["heap only, no index"])
    table("Inserting the rows (backend CPU, best of rounds; an index: its cost over the heap)",
          ["", "CPU s", "ms / fragment"],
          [[name, f"{min(v):.2f}", f"{1000 * (min(v) - (0 if name.startswith('heap') else heap)) / rows:.3f}"]
           for name, v in seen.items()])
    table("The three GIN indexes under other settings (insert + cleaning the pending lists)",
          ["", "insert CPU s", "cleanup CPU s", "ms / fragment"],
          [[name, f"{min(i for i, _ in v):.2f}", f"{min(c for _, c in v):.2f}",
            f"{1000 * min(i + c for i, c in v) / rows:.3f}"] for name, v in gin.items()])
    table("Text-search functions alone", ["", "CPU s", "ms / fragment"],
          [[name, f"{min(v):.2f}", f"{1000 * min(v) / rows:.3f}"] for name, v in functions.items()])
    console.print(f"load average {os.getloadavg()[0]:.1f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.ingest_costs")
    parser.add_argument("--pipeline", default="keep")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()
    run(args.pipeline, args.rounds)
    console.print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
