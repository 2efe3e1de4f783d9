"""Paired latency: this checkout's bm25 against another commit's, in one process.

The machine's speed drifts by up to 1.5x within minutes and other work loads
the CPU, so figures from separate runs cannot be compared. Here the baseline
package (another checkout's ``src``, imported as ``pgbraid_base``) and this
one run side by side, each on its own embedded server and data directory,
and every query is timed on each engine in turn, the order rotating from one
query to the next. Both corpora must have been built by the same ingest
sequence (``bench lexical``'s ``ensure_scifact`` / ``ensure_big``), so the
engines must also return the same hits with the same scores: checked first.

    python -m bench.paired --base-src ../wt-base/src --base-data DIR --new-data DIR \
        [--also NAME=DIR ...] [--rounds 3] [--ingest] [--skip-search]

``--also`` adds more data directories served by this checkout (say, a copy of
the baseline's directory after this checkout's migrations ran on it).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pgbraid

from .common import percentiles, table
from .lexical import BIG, SCIFACT, code_chunks, scifact_docs, scifact_queries

_MIGRATION = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


def load_base(src: Path) -> Any:
    """The pgbraid package under ``src``, imported as ``pgbraid_base``."""
    root = src.resolve() / "pgbraid"
    spec = importlib.util.spec_from_file_location(
        "pgbraid_base", root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["pgbraid_base"] = module
    spec.loader.exec_module(module)
    # Its migrations module finds its .sql files by the name "pgbraid.db", which is
    # this checkout's: point it at its own folder, so it never applies ours.
    migrations = importlib.import_module("pgbraid_base.db.migrations")
    folder = root / "db" / "migrations"
    migrations.migration_files = lambda: sorted(
        (int(m.group(1)), p.name, p.read_text(encoding="utf-8"))
        for p in folder.iterdir() if (m := _MIGRATION.match(p.name)))
    return module


def _schema(client) -> int:
    with client.db.admin() as conn:
        return conn.execute("SELECT max(version) FROM pgbraid.schema_migrations").fetchone()[0]


def _answer(client, pipeline: str, strategy: str, text: str) -> list[tuple]:
    hits = client.search(pipeline, text, type=strategy, params={"k": 10}).hits
    return [(h.document_id, h.version, round(h.score, 6)) for h in hits]


def check_same(engines: dict[str, Any], pipeline: str, strategy: str, texts: list[str]) -> int:
    """Queries on which every engine returns what the first does (ties may reorder)."""
    same = 0
    for text in texts:
        answers = [_answer(c, pipeline, strategy, text) for c in engines.values()]
        same += all(sorted(a) == sorted(answers[0]) for a in answers[1:])
    return same


def paired(engines: dict[str, Any], pipeline: str, strategy: str, texts: list[str],
           rounds: int) -> dict[str, list[float]]:
    """ms per query per engine; each query runs on every engine in turn, the
    starting engine rotating, after one untimed pass each (warm posting caches)."""
    names = list(engines)
    search: dict[str, Callable[[str], object]] = {
        n: (lambda t, c=engines[n]: c.search(pipeline, t, type=strategy, params={"k": 10}))
        for n in names}
    for name in names:
        for text in texts:
            search[name](text)
    samples: dict[str, list[float]] = {n: [] for n in names}
    turn = 0
    for _ in range(rounds):
        for text in texts:
            order = names[turn % len(names):] + names[:turn % len(names)]
            turn += 1
            for name in order:
                start = time.perf_counter()
                search[name](text)
                samples[name].append((time.perf_counter() - start) * 1000)
    return samples


def report(title: str, samples: dict[str, list[float]]) -> list[list[object]]:
    names = list(samples)
    base = samples[names[0]]
    rows = []
    for name in names:
        p50, p95 = percentiles(samples[name])
        ratios = [new / old for new, old in zip(samples[name], base)]
        rows.append([name, p50, p95, p50 / percentiles(base)[0], statistics.median(ratios)])
    table(title, ["engine", "p50 ms", "p95 ms", "p50 / baseline p50", "median paired ratio"], rows)
    return rows


def ingest_paired(engines: dict[str, Any], docs: list[dict], per_call: int,
                  rounds: int) -> dict[str, list[float]]:
    """Seconds to ingest ``docs`` (``per_call`` a call) into a new pipeline, per engine,
    the engines taking turns; each pipeline is deleted afterwards."""
    names = list(engines)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for turn in range(rounds):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            client, pipeline = engines[name], f"paired-ingest-{turn}"
            client.create_pipeline(pipeline, embedder="none", chunk_size=20_000)
            start = time.perf_counter()
            for at in range(0, len(docs), per_call):
                client.ingest(pipeline, docs[at:at + per_call])
            samples[name].append(time.perf_counter() - start)
            client.delete_pipeline(pipeline)
    return samples


def _engines(args: argparse.Namespace) -> dict[str, Any]:
    base = load_base(args.base_src)
    engines = {args.base_name: base.connect(data_dir=args.base_data, statement_timeout_ms=300_000),
               "this checkout": pgbraid.connect(data_dir=args.new_data, statement_timeout_ms=300_000)}
    for entry in args.also:
        name, _, folder = entry.partition("=")
        engines[name] = pgbraid.connect(data_dir=Path(folder), statement_timeout_ms=300_000)
    print("schema versions:", {name: _schema(client) for name, client in engines.items()})
    return engines


def search_tables(engines: dict[str, Any], rounds: int) -> None:
    queries = [t for _, t in scifact_queries()[0]]
    chunks = code_chunks()
    plan = [(SCIFACT, "bm25", "SciFact queries", queries, rounds),
            (SCIFACT, "bm25", "30-token code chunks", chunks, 3 * rounds),
            (BIG, "bm25", "SciFact queries", queries, rounds),
            (BIG, "bm25", "30-token code chunks", chunks, 3 * rounds),
            # AND semantics: most SciFact claims match nothing, and explaining why
            # reads every fragment holding any token (seconds at 100k): 5k here.
            (SCIFACT, "fulltext", "SciFact queries", queries[:100], 1)]
    for pipeline, strategy, label, texts, times in plan:
        same = check_same(engines, pipeline, strategy, texts)
        samples = paired(engines, pipeline, strategy, texts, times)
        report(f"{pipeline}, {strategy}, {label} ({len(texts)} x {times}): "
               f"same answers {same}/{len(texts)}", samples)


def ingest_tables(engines: dict[str, Any], rounds: int) -> None:
    docs = [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in scifact_docs()]
    for count, per_call in ((2000, 2000), (300, 10)):
        samples = ingest_paired(engines, docs[:count], per_call, rounds)
        base = statistics.median(next(iter(samples.values())))
        table(f"ingest {count} SciFact abstracts, {per_call} a call ({rounds} rounds)",
              ["engine", "median s", "per document ms", "/ baseline"],
              [[n, statistics.median(v), 1000 * statistics.median(v) / count,
                statistics.median(v) / base] for n, v in samples.items()])


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.paired")
    parser.add_argument("--base-src", type=Path, required=True)
    parser.add_argument("--base-data", type=Path, required=True)
    parser.add_argument("--new-data", type=Path, required=True)
    parser.add_argument("--also", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-name", default="baseline")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--ingest", action="store_true",
                        help="also time ingestion (new pipelines, deleted afterwards)")
    args = parser.parse_args()
    engines = _engines(args)
    if not args.skip_search:
        search_tables(engines, args.rounds)
    if args.ingest:
        ingest_tables(engines, args.rounds)
    for client in engines.values():
        client.close()


if __name__ == "__main__":
    main()
