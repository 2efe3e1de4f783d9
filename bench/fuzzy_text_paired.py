"""fuzzy's text method before and after migration 053, paired on one server: the body
trigram index over every text with REF's statement, against 053's index (text up to 256
bytes, and a btree of the long fragments) with this checkout's statement.

    PGBRAID_BENCH_DIR=... python -m bench.fuzzy_text_paired [--peer main] [--rounds 2]

The schema's own body index is replaced inside a transaction (rolled back) by each
side's in turn, the order rotating by round; each side then sends its statement for
every query on the same connection under the tenant's row-level security, pg_trgm's
thresholds at 0.5 and at 0.3 (what a short list widens to). This checkout's side also
asks, as the strategy does for ``method=text``, whether the scope holds long text (a
round trip of its own there; auto asks in the round trip it takes anyway). Queries: misspelled company
names (bench/fuzzy.py's) on the names pipeline, and 3-word SciFact queries with a typo
(bench/fuzzy_corpus.py's) on a SciFact pipeline. Hits (fragment ids and scores to 5
decimals) must be the same on both sides. Times are the statement's, as the client sees.
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import psycopg

from pgbraid import pipelines
from pgbraid.scope import Scope
from pgbraid.strategies import fuzzy, fuzzy_words

from . import fuzzy as names_bench
from . import fuzzy_corpus
from .common import DATA, connect, console, has_pipeline, percentiles, table
from .fuzzy_paired import _load, _show
from .ingest import records
from .ingest_gin import BODY

SCIFACT = "bench-fuzzy-text-scifact"
SIDES = {"before": list(BODY)[0], "053": list(BODY)[1]}
_CLASSES = ("SELECT array_agg(DISTINCT c) FROM pgbraid.fragments f, unnest(f.classifications) c"
            " WHERE f.pipeline_id = %s")


def _queries(count: int) -> dict[str, list[str]]:
    with (DATA / "company_names" / "companies.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    names_bench._ensure(connect(), names_bench.PIPELINE, rows, "none")
    typed = [q for _, q, _ in names_bench.queries(rows)][:count]
    return {names_bench.PIPELINE: typed, SCIFACT: [q for q, _ in fuzzy_corpus.queries(count)]}


def _scope(client, name: str) -> Scope:
    with client._db.admin() as conn:
        pipeline = pipelines.get(conn, name)
        classes = conn.execute(_CLASSES, (pipeline.id,)).fetchone()[0]
    return Scope(pipeline.id, tuple(classes))


def _side(client, conn, side: str, statement, work: dict) -> dict:
    """One side's turn: its index made, every query sent at both thresholds."""
    out = {}
    with conn.transaction():
        for ddl in BODY[SIDES[side]]:
            conn.execute(ddl)
        client._db._enter(conn, client.tenant)
        for name, (scope, queries) in work.items():
            for threshold in (0.5, 0.3):
                for query in queries:
                    fuzzy_words.set_thresholds(conn, threshold)
                    started = time.perf_counter()
                    rows = conn.execute(*statement(conn, query, scope, threshold)).fetchall()
                    ms = (time.perf_counter() - started) * 1000
                    out[(name, threshold, query)] = (ms, [(r[0], round(r[-1], 5)) for r in rows])
        raise psycopg.Rollback()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.fuzzy_text_paired")
    parser.add_argument("--peer", default="main", help="the commit whose statement runs before")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    peer = _load("pgbraid.strategies._peer_fuzzy", _show(args.peer, "src/pgbraid/strategies/fuzzy.py"),
                 f"{args.peer}:fuzzy.py")
    def ours(conn, query, scope, threshold):  # what the strategy sends for method=text
        _, long = fuzzy._shape(conn, "text", scope)
        return fuzzy.statement(query, scope, 10, threshold, False, long=long)

    statements = {"before": lambda conn, query, scope, threshold: peer.statement(
        query, scope, 10, threshold, False), "053": ours}
    client = connect()
    if not has_pipeline(client, SCIFACT):
        client.create_pipeline(SCIFACT, embedder="none")
        client.ingest(SCIFACT, records())
    queries = _queries(args.queries)
    work = {name: (_scope(client, name), q) for name, q in queries.items()}
    load = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in (list(SIDES) if r % 2 == 0 else list(SIDES)[::-1]):
            with client._db.admin() as conn:
                runs[side].append(_side(client, conn, side, statements[side], work))
    keys = list(runs["before"][0])
    differ = [k for k in keys if len({repr(run[k][1]) for s in SIDES for run in runs[s]}) > 1]
    rows = []
    for name in work:
        for threshold in (0.5, 0.3):
            line = ["names" if name == names_bench.PIPELINE else "SciFact", threshold]
            for side in SIDES:
                ms = [run[k][0] for run in runs[side] for k in keys if k[:2] == (name, threshold)]
                line += [f"{p:.2f}" for p in percentiles(ms)]
            rows.append(line)
    table(f"fuzzy text method statement, ms, {args.queries} queries a corpus x {args.rounds}"
          f" rounds; before = {args.peer}'s statement and index; load {load:.1f} ->"
          f" {os.getloadavg()[0]:.1f}",
          ["corpus", "threshold", "before p50", "before p95", "053 p50", "053 p95"], rows)
    console.print(f"queries whose hits differ between sides or rounds: {len(differ)} of {len(keys)}")


if __name__ == "__main__":
    main()
