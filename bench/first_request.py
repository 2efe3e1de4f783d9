"""The first search of a fresh ``pgbraid serve`` process against its warm searches.

A real ``python -m pgbraid serve --no-auth`` process (as tests/serving.py starts
it) over the bench's embedded server, on a small pipeline; each round starts a new
process, waits for /readyz, times its first search, then ``--warm`` more. With
``--base-src`` (another checkout's ``src``) the base and this checkout's processes
alternate, order rotating by round, on the same data. ``--type similarity`` searches
a pipeline with the default embedder instead (the query is embedded: what a process
that has not loaded the embedder pays on its first search).

    python -m bench.first_request [--base-src ../wt-base/src] [--rounds 4] [--warm 10]
                                  [--type similarity]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .common import BENCH_DIR, connect, console, has_pipeline, table

SRC = Path(__file__).resolve().parents[1] / "src"
QUERY = "gravity waves on small planets"
PIPELINES = {"default": ("bench-first-request", "none"),
             "similarity": ("bench-first-request-minilm", "minilm")}
"""--type -> (pipeline, its embedder); "default" sends no type (the server's default)."""


def ensure_pipeline(pipeline: str, embedder: str) -> None:
    with connect() as client:
        if not has_pipeline(client, pipeline):
            client.create_pipeline(pipeline, embedder=embedder)
            client.ingest(pipeline, [{"id": f"d{i}", "title": f"Note {i}",
                                      "text": f"Small planets have gravity waves number {i}."}
                                     for i in range(7)])


def body(kind: str) -> dict:
    return {"query": QUERY} if kind == "default" else {"query": QUERY, "type": kind}


def _port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_process(src: Path, warm: int, kind: str = "default") -> tuple[float, float, float]:
    """(seconds to ready, first search ms, median warm search ms) of a new process."""
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(src), "PGBRAID_DATA_DIR": str(BENCH_DIR / "pg")}
    env.pop("PGBRAID_DSN", None)
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "pgbraid", "serve", "--no-auth",
                                "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            while True:
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.perf_counter() - started > 60:
                    raise RuntimeError(f"serve from {src} did not become ready")
                time.sleep(0.05)
            ready = time.perf_counter() - started
            times = []
            for _ in range(warm + 1):
                t = time.perf_counter()
                response = http.post(f"/pipelines/{PIPELINES[kind][0]}/search",
                                     json=body(kind))
                times.append((time.perf_counter() - t) * 1000)
                response.raise_for_status()
    finally:
        process.terminate()
        process.wait(30)
    return ready, times[0], statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-src", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--type", choices=sorted(PIPELINES), default="default")
    args = parser.parse_args()
    ensure_pipeline(*PIPELINES[args.type])
    sides = {"new": SRC}
    if args.base_src:
        sides["base"] = args.base_src.resolve()
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            results[name].append(one_process(sides[name], args.warm, args.type))
    console.print(f"load {Path('/proc/loadavg').read_text().strip()}")
    rows = [[name, statistics.median(x[0] for x in runs), statistics.median(x[1] for x in runs),
             statistics.median(x[2] for x in runs), " ".join(f"{x[1]:.0f}" for x in runs)]
            for name, runs in results.items()]
    table(f"first {args.type} search of a new serve process, {args.rounds} rounds",
          ["side", "ready s (p50)", "first ms (p50)", "warm ms (p50)", "first ms each"], rows)


if __name__ == "__main__":
    main()
