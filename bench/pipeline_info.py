"""Paired latency of pipeline info (``client.pipeline``, ``client.pipelines``): this
checkout against another commit, in one process.

The base (``--base-ref``, checked out into a temporary worktree, imported as
``pgbraid_base``, bench/paired.py's ``load_base``) and this checkout each run on
their own embedded server and data directory (``PGBRAID_BENCH_DIR``/base and /new,
each given SciFact and a 7-document pipeline by the same ingest); every round times
each call on each side in turn, the order rotating by round. Both sides must report
the same counts: checked first. Principals: the local admin (no bound) and one
bounded to ``public`` (its counts go through the classification filter).

    python -m bench.pipeline_info --base-ref main [--rounds 6] [--calls 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from .common import BENCH_DIR, console, table
from .lexical import ensure_scifact
from .paired import load_base

SMALL = "bench-seven"
ROOT = Path(__file__).resolve().parents[1]


def _prepared(module, data: Path):
    client = module.connect(data_dir=data, statement_timeout_ms=300_000)
    ensure_scifact(client)
    if SMALL not in {p.name for p in client.pipelines()}:
        client.create_pipeline(SMALL, embedder="none")
        client.ingest(SMALL, [{"id": f"d{i}", "text": f"A short note, number {i}."}
                              for i in range(7)])
    return client


def _calls(client) -> dict:
    bounded = client.acting_as(dataclasses.replace(client.principal, classifications=("public",)))
    return {"info scifact (local)": lambda: client.pipeline("bench-scifact"),
            "info scifact (bounded)": lambda: bounded.pipeline("bench-scifact"),
            f"info {SMALL} (local)": lambda: client.pipeline(SMALL),
            "list (local)": client.pipelines,
            "list (bounded)": bounded.pipelines}


def _counts(calls: dict) -> list:
    return [(p.name, p.documents, p.versions, p.fragments)
            for name in ("list (local)", "list (bounded)") for p in calls[name]()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-ref", default="main")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    import pgbraid

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        args.base_ref], check=True, capture_output=True)
        try:
            base = load_base(tree / "src")
            sides = {"base": _prepared(base, BENCH_DIR / "base" / "pg"),
                     "new": _prepared(pgbraid, BENCH_DIR / "new" / "pg")}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False, capture_output=True)
        calls = {name: _calls(client) for name, client in sides.items()}
        assert _counts(calls["base"]) == _counts(calls["new"]), "the sides count differently"
        samples = {(s, c): [] for s in sides for c in calls["new"]}
        names = list(sides)
        for r in range(args.rounds):
            for call in calls["new"]:
                for side in names[r % 2:] + names[:r % 2]:
                    for _ in range(args.calls):
                        t = time.perf_counter()
                        calls[side][call]()
                        samples[side, call].append((time.perf_counter() - t) * 1000)
        console.print(f"load {Path('/proc/loadavg').read_text().strip()}, base {args.base_ref}")
        rows = []
        for call in calls["new"]:
            b, n = (statistics.median(samples[s, call]) for s in ("base", "new"))
            rows.append([call, b, n, b / n])
        table(f"pipeline info p50 ms, {args.rounds} rounds x {args.calls} calls",
              ["call", "base", "new", "base/new"], rows)
        for client in sides.values():
            client.close()


if __name__ == "__main__":
    main()
