"""Shared bench helpers: data paths, a persistent bench server, timing and tables."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable

from rich.console import Console
from rich.table import Table

import pgbraid

console = Console(highlight=False)
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PGBRAID_SHARED_DATA") or ROOT.parent / "shared" / "data")
BENCH_DIR = Path(os.environ.get("PGBRAID_BENCH_DIR") or "/tmp/pgbraid-bench")


def connect(**overrides) -> pgbraid.Client:
    """A client on the bench's own embedded server (kept between runs to reuse corpora)."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    return pgbraid.connect(data_dir=BENCH_DIR / "pg", statement_timeout_ms=300_000, **overrides)


def has_pipeline(client: pgbraid.Client, name: str) -> bool:
    return name in {p.name for p in client.pipelines()}


def read_jsonl(path: Path) -> Iterable[dict]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered), p95


def table(title: str, columns: list[str], rows: list[list[object]]) -> None:
    out = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        out.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
    console.print(out)
