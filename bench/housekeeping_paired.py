"""Small ingest calls, paired: what housekeeping after the commit (housekeeping.py: its own
transaction under ``lock_timeout``) costs a call, against another checkout.

    python -m bench.housekeeping_paired [--base-ref main | --base-src DIR] [--rounds 4]
        [--calls 8] [--docs 10]

Each round runs, in turn (the order alternating by round), one process per checkout whose
``pgbraid`` is that checkout's ``src``; each creates a lexical pipeline on the bench server,
makes ``--calls`` ingest calls of ``--docs`` new SciFact documents each (every call ends
with its fulltext GIN merge), times the after-commit step alone 50 times
(``Client._after_writing``), and drops the pipeline. Per side: the median wall ms a call,
the bench server's CPU-ms a call and the step's median ms, with the load average of
each run; then new / base by round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import BENCH_DIR, ROOT, console, table
from .ingest_paired import export_ref

STEPS = 50


def worker(calls: int, docs: int, name: str) -> None:
    from .common import connect
    from .ingest import records, server_cpu

    rows = records()[:calls * docs]
    with connect() as client:
        client.create_pipeline(name, embedder="none")
        client.ingest(name, [{"id": "warm", "text": "a first call, not timed"}])
        walls, cpu = [], server_cpu()
        for i in range(calls):
            began = time.perf_counter()
            report = client.ingest(name, rows[i * docs:(i + 1) * docs])
            walls.append(time.perf_counter() - began)
            assert report.added == docs and not getattr(report, "warnings", None), report
        cpu = server_cpu() - cpu
        steps = []
        for _ in range(STEPS):  # the after-commit step alone (its list is empty by now)
            began = time.perf_counter()
            client._after_writing(docs)
            steps.append(time.perf_counter() - began)
        client.delete_pipeline(name)
    print(json.dumps({"wall_ms": 1000 * statistics.median(walls),
                      "server_cpu_ms": 1000 * cpu / calls,
                      "step_ms": 1000 * statistics.median(steps), "load": os.getloadavg()[0]}))


def run_one(src: Path, calls: int, docs: int, name: str) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}", PGBRAID_BENCH_DIR=str(BENCH_DIR))
    done = subprocess.run([sys.executable, "-m", "bench.housekeeping_paired", "--worker",
                           "--calls", str(calls), "--docs", str(docs), "--name", name],
                          env=env, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.housekeeping_paired")
    parser.add_argument("--base-src", type=Path, help="the baseline checkout's src folder")
    parser.add_argument("--base-ref", default="main", help="or a git ref to export (main)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="hk-paired", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.calls, args.docs, args.name)
        return
    sides = {"base": args.base_src or export_ref(args.base_ref), "new": ROOT / "src"}
    run_one(sides["new"], 1, 1, "hk-warm")  # the server started, migrations applied
    console.print(f"[bold]housekeeping paired[/bold]: {args.calls} calls of {args.docs} "
                  f"documents, {args.rounds} rounds; base {sides['base']}")
    runs: dict[str, list[dict]] = {"base": [], "new": []}
    for i in range(args.rounds):
        for side in (("base", "new") if i % 2 == 0 else ("new", "base")):
            result = run_one(sides[side], args.calls, args.docs, f"hk-{side}-{i}")
            runs[side].append(result)
            console.print(f"round {i + 1} {side}: {result['wall_ms']:.1f} ms a call, server "
                          f"{result['server_cpu_ms']:.1f} CPU-ms a call, step "
                          f"{result['step_ms']:.2f} ms, load {result['load']:.1f}")
    rows = [[side, f"{statistics.median(r['wall_ms'] for r in rs):.1f}",
             f"{statistics.median(r['server_cpu_ms'] for r in rs):.1f}",
             f"{statistics.median(r['step_ms'] for r in rs):.2f}",
             f"{min(r['load'] for r in rs):.1f}-{max(r['load'] for r in rs):.1f}"]
            for side, rs in runs.items()]
    table("Small ingest calls, paired (medians of rounds)",
          ["", "wall ms a call", "server CPU-ms a call", "after-commit step ms", "load avg"], rows)
    for key in ("wall_ms", "server_cpu_ms", "step_ms"):
        ratios = sorted(n[key] / b[key] for b, n in zip(runs["base"], runs["new"]))
        console.print(f"new / base, {key} by round: median {statistics.median(ratios):.3f}"
                      f" (range {ratios[0]:.2f}-{ratios[-1]:.2f})")


if __name__ == "__main__":
    main()
