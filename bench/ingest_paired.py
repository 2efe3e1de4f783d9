"""Lexical ingestion, paired: another checkout's writer against this one's, in turns.

    python -m bench.ingest_paired [--base-src DIR | --base-ref main] [--rounds 3] [--docs N]

Each round ingests the same SciFact documents (``embedder none``) once with each
checkout, the order alternating round by round, every time into a fresh pipeline of
the bench server dropped afterwards. Each ingest runs in a process of its own whose
``pgbraid`` is that checkout's ``src`` (``--base-ref`` exports a git ref's ``src``
into a temporary folder), so the two never share a module. Both write to one server
(whose schema the newer migrations made) unless ``--base-dir`` gives the baseline a
server of its own, its schema made by the baseline's migrations: the way to compare a
migration (both servers run, each idle in the other's turns). What a server already
holds moves the figures as much as a change does: compare on two fresh folders. Per run: wall time,
the ingesting process's CPU, the bench server's CPU (during the ingest, and
including the 3 s after it, when autovacuum cleans up) and the load average.

Both must leave the same index: a digest of each pipeline's BM25 statistics, its
postings per term (in ordinal order, whatever the segments), its forward index,
fulltext tsvectors and fuzzy word sets, its fuzzy dictionary, its versions'
languages and the top 10 of bm25, fulltext and fuzzy for 60 SciFact test queries is
compared run by run. "locked writes": the wall time of the batches' write
transactions, which hold the pipeline's index lock (what a second process on the
pipeline waits for).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from .common import BENCH_DIR, ROOT, console, table

SETTLE = 3.0  # seconds after an ingest whose server CPU (autovacuum) still counts

_STATS = """
SELECT s.config, s.fragments, s.total_length FROM pgbraid.bm25_partition_stats s
JOIN pgbraid.bm25_partitions p ON p.id = s.partition_id WHERE p.pipeline_id = %s
ORDER BY 1
"""
_POSTINGS = """
SELECT term, ordinals, tfs, lengths FROM pgbraid.bm25_postings WHERE pipeline_id = %s
ORDER BY term, segment
"""
_FORWARD = """
SELECT bm25_ordinal, bm25_length, bm25_terms, bm25_tfs, tsv::text, language, ts_config::text,
       title, body, section, current, (to_jsonb(f) -> 'word_set')::text  -- (migration 028)
FROM pgbraid.fragments f WHERE pipeline_id = %s ORDER BY bm25_ordinal
"""
_VERSIONS = """
SELECT d.external_id, v.version, v.language, v.content_hash, d.current_version
FROM pgbraid.versions v JOIN pgbraid.documents d ON d.id = v.document_id
WHERE d.pipeline_id = %s ORDER BY 1, 2
"""


def digest(conn, pipeline_id: int) -> dict[str, str]:
    """What the ingest left, hashed part by part (postings merged across segments)."""
    import numpy as np

    def hashed(rows) -> str:
        return hashlib.sha256(repr(list(rows)).encode()).hexdigest()[:16]

    lists: dict[str, list] = {}
    with conn.cursor(binary=True) as cur:
        for term, ordinals, tfs, lengths in cur.execute(_POSTINGS, (pipeline_id,)):
            lists.setdefault(term, []).append((np.frombuffer(ordinals, "<i4"),
                                               np.frombuffer(tfs, "<u2"),
                                               np.frombuffer(lengths, "<u2")))
    postings = []
    for term in sorted(lists):
        ordinals, tfs, lengths = (np.concatenate([p[i] for p in lists[term]]) for i in range(3))
        order = np.argsort(ordinals, kind="stable")
        postings.append((term, ordinals[order].tolist(), tfs[order].tolist(),
                         lengths[order].tolist()))
    words = ("SELECT word FROM pgbraid.fuzzy_words WHERE pipeline_id = %s ORDER BY word"
             if conn.execute("SELECT to_regclass('pgbraid.fuzzy_words')").fetchone()[0]
             else "SELECT 1 WHERE %s IS NULL")
    return {"stats": hashed(conn.execute(_STATS, (pipeline_id,))),
            "dictionary": hashed(conn.execute(words, (pipeline_id,))),
            "postings": hashed(postings), "terms": str(len(postings)),
            "forward": hashed(conn.execute(_FORWARD, (pipeline_id,))),
            "versions": hashed(conn.execute(_VERSIONS, (pipeline_id,)))}


SEARCHES = 60  # SciFact test queries whose results (ids, scores) each type must give alike
TYPES = ("bm25", "fulltext", "fuzzy")


def searched(client, name: str) -> str:
    """The top 10 of each type for the first SciFact test queries, hashed."""
    from .lexical import scifact_queries

    results = []
    for _, text in scifact_queries()[0][:SEARCHES]:
        for kind in TYPES:
            hits = client.search(name, text[:200], type=kind, params={"k": 10}).hits
            # sorted: ties are broken by fragment ids, which are random (migration 011)
            results.append(sorted((h.document_id, round(h.score, 9)) for h in hits))
    return hashlib.sha256(repr(results).encode()).hexdigest()[:16]


def _timing_writes(held: list[float]) -> None:
    """Add the wall time of each batch's write transaction (under the lock) to held[0]."""
    from pgbraid.ingest import batches

    write = batches._write

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return write(*args, **kwargs)
        finally:
            held[0] += time.perf_counter() - started

    batches._write = timed


def worker(docs: int) -> None:
    """One ingest into a fresh pipeline (run with the checkout's src first on sys.path)."""
    import pgbraid
    from pgbraid.ingest import language

    from .common import connect
    from .ingest import records, server_cpu

    held = [0.0]
    _timing_writes(held)
    rows = records()[:docs]
    client = connect()
    language._identifier()
    name = f"bench-paired-ingest-{os.getpid()}-{time.time_ns()}"
    client.create_pipeline(name, embedder="none")
    load = os.getloadavg()[0]
    server, cpu, started = server_cpu(), time.process_time(), time.perf_counter()
    report = client.ingest(name, rows)
    wall, cpu, during = (time.perf_counter() - started, time.process_time() - cpu,
                         server_cpu() - server)
    time.sleep(SETTLE)
    after = server_cpu() - server
    with client._db.admin() as conn:
        pipeline = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s",
                                (name,)).fetchone()[0]
        parts = digest(conn, pipeline)
    parts["searches"] = searched(client, name)
    client.delete_pipeline(name)
    print(json.dumps({"wall": wall, "locked": held[0], "client_cpu": cpu, "server_cpu": during,
                      "server_cpu_settled": after, "fragments": report.fragments,
                      "failed": len(report.failed), "load": load, "digest": parts,
                      "package": str(Path(pgbraid.__file__).parent)}))


def export_ref(ref: str) -> Path:
    """A git ref's ``src``, exported into a temporary folder."""
    out = Path(tempfile.mkdtemp(prefix="pgbraid-base-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out / "src"


def run_one(src: Path, docs: int, bench_dir: Path = BENCH_DIR) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}",
               PGBRAID_BENCH_DIR=str(bench_dir))
    done = subprocess.run([sys.executable, "-m", "bench.ingest_paired", "--worker",
                           "--docs", str(docs)], env=env, check=True, capture_output=True,
                          text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.ingest_paired")
    parser.add_argument("--base-src", type=Path, help="the baseline checkout's src folder")
    parser.add_argument("--base-ref", default="main", help="or a git ref to export (main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", type=int, default=5183)
    parser.add_argument("--base-dir", type=Path, help="the baseline's own bench server"
                        " (its schema migrated by the baseline: to compare migrations)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.docs)
        return
    sides = {"base": args.base_src or export_ref(args.base_ref), "new": ROOT / "src"}
    dirs = {"base": args.base_dir or BENCH_DIR, "new": BENCH_DIR}
    for side in sides:  # the servers started, migrations applied
        run_one(sides[side], 10, dirs[side])
    console.print(f"[bold]ingest paired[/bold]: SciFact, first {args.docs} documents,"
                  f" {args.rounds} rounds; base {sides['base']}; load average"
                  f" {os.getloadavg()[0]:.1f}")
    runs: dict[str, list[dict]] = {"base": [], "new": []}
    for i in range(args.rounds):
        for side in (("base", "new") if i % 2 == 0 else ("new", "base")):
            result = run_one(sides[side], args.docs, dirs[side])
            assert not result["failed"], f"{side}: documents failed"
            runs[side].append(result)
            console.print(f"round {i + 1} {side}: {result['wall']:.1f} s wall,"
                          f" {result['fragments'] / result['wall']:.0f} fragments/s, writes"
                          f" under the lock {result['locked']:.1f} s, client"
                          f" {result['client_cpu']:.1f} s + server {result['server_cpu']:.1f}"
                          f" s CPU (settled {result['server_cpu_settled']:.1f}), load"
                          f" {result['load']:.1f}")
        if runs["base"][-1]["digest"] != runs["new"][-1]["digest"]:
            console.print(f"[red]indexes differ[/red]: {runs['base'][-1]['digest']}"
                          f" vs {runs['new'][-1]['digest']}")
    report(runs)


def report(runs: dict[str, list[dict]]) -> None:
    rows = []
    for side, results in runs.items():
        fragments = results[0]["fragments"]

        def med(key: str) -> float:
            return statistics.median(r[key] for r in results)

        rows.append([side, f"{med('wall'):.1f}", f"{fragments / med('wall'):.0f}",
                     f"{med('locked'):.1f}",
                     f"{1000 * med('client_cpu') / fragments:.2f}",
                     f"{1000 * med('server_cpu') / fragments:.2f}",
                     f"{1000 * statistics.median(r['client_cpu'] + r['server_cpu_settled'] for r in results) / fragments:.2f}",
                     f"{med('load'):.1f}"])
    table("Lexical ingestion, paired (medians)",
          ["", "wall s", "fragments/s", "locked writes s", "client CPU-ms/frag", "server CPU-ms/frag",
           "total CPU-ms/frag (incl. settle)", "load avg"], rows)
    same = all(b["digest"] == n["digest"] for b, n in zip(runs["base"], runs["new"]))
    console.print(f"indexes identical in every round: {same}")


if __name__ == "__main__":
    main()
