"""Ingestion throughput: fragments/s, lexical and embedded, 1 and 2 processes, with peers.

Rows: SciFact (5,183 abstracts, title + text). Interleaved rounds, each on fresh
pipelines dropped after it (so the fragments table does not grow between rows):

- lexical (``embedder none``: tsvector, trigram, BM25 postings, versions,
  language), one process ingesting all of it; two processes ingesting half
  each into the same pipeline (writers serialise on its BM25 lock); two
  processes into a pipeline each. Processes load data and the language model,
  then start together; the time is from the start to the last one done.
- peer, same rows and same server: pg_textsearch 1.4 inserting row by row
  (one INSERT a row, one transaction) into a table with its bm25 index, and its bulk build (COPY, then CREATE
  INDEX), when the extension is installed on the bench server (skipped with
  a message otherwise).
- embedded (the default minilm embedder), on the first EMBEDDED_DOCS
  abstracts: the bare embedder on the texts ingestion embeds, against
  ingesting them, slice by slice, alternating which goes first; the ratio is
  what ingestion keeps of the model's speed.

Besides wall time, the CPU seconds of the ingesting processes and of the
server's processes (from /proc) are reported, since the machine is shared and
its load moves wall time.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import time
from pathlib import Path

from pgbraid.ingest.prepare import embedding_text

from . import plots
from .common import BENCH_DIR, DATA, connect, console, read_jsonl, table

EMBEDDED_DOCS = 512
EMBEDDED_SLICE = 128  # documents: two ingest batches, so embedding overlaps writing
TEXTSEARCH = DATA.parent / "vendor" / "pg_textsearch-1.4.0.tar.gz"
TICK = os.sysconf("SC_CLK_TCK")


def records() -> list[dict]:
    rows = read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz")
    return [{"id": d["_id"], "title": d["title"], "text": d["text"]} for d in rows]


# -- CPU accounting -------------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def server_cpu() -> float:
    """CPU seconds of the bench server: the postmaster, its reaped children, the live ones."""
    postmaster = int((BENCH_DIR / "pg" / "cluster" / "postmaster.pid").read_text().split()[0])
    own = _stat(postmaster)
    total = sum(int(v) for v in own[11:15]) / TICK if own else 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) and int(st[1]) == postmaster:
            total += (int(st[11]) + int(st[12])) / TICK
    return total


# -- lexical, in processes ------------------------------------------------------------

def _worker(pipeline: str, rows: list[dict], ready, go, out) -> None:
    from pgbraid.ingest import language

    client = connect()
    language._identifier()
    client.pipeline(pipeline)  # the pool is open, the pipeline read
    ready.set()
    go.wait()
    started, cpu = time.perf_counter(), time.process_time()
    report = client.ingest(pipeline, rows)
    out.put((started, time.perf_counter(), time.process_time() - cpu, report.fragments,
             len(report.failed)))


def lexical_run(client, rows: list[dict], processes: int, shared: bool) -> dict:
    ctx = mp.get_context("spawn")
    stamp = f"{os.getpid()}-{time.time_ns()}"
    names = [f"bench-ingest-{stamp}-{i}" for i in range(1 if shared else processes)]
    for name in names:
        client.create_pipeline(name, embedder="none")
    parts = [rows[i::processes] for i in range(processes)]
    out, go = ctx.Queue(), ctx.Event()
    readies, workers = [], []
    for i, part in enumerate(parts):
        ready = ctx.Event()
        workers.append(ctx.Process(target=_worker, args=(names[0 if shared else i], part, ready,
                                                         go, out)))
        readies.append(ready)
        workers[-1].start()
    for ready in readies:
        ready.wait(300)
    cpu0 = server_cpu()
    go.set()
    results = [out.get(timeout=3600) for _ in workers]
    for worker in workers:
        worker.join()
    server = server_cpu() - cpu0
    for name in names:
        client.delete_pipeline(name)
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    fragments = sum(r[3] for r in results)
    assert not any(r[4] for r in results), "documents failed"
    return {"wall": wall, "fragments": fragments, "rate": fragments / wall,
            "client_cpu": sum(r[2] for r in results), "server_cpu": server}


# -- pg_textsearch, the peer ----------------------------------------------------------

def build_textsearch() -> str | None:
    """Build pg_textsearch into the bench server's data dir (``pgbraid extension build``),
    restarting the server when its preload list changes; None, or why it cannot be."""
    from pgbraid.db import extensions
    from pgbraid.db.server import EmbeddedServer

    if shutil.which("gcc") is None or shutil.which("make") is None:
        return "no gcc or make to build it"
    if not TEXTSEARCH.exists():
        return f"{TEXTSEARCH} is missing"
    try:
        built = extensions.build(TEXTSEARCH, BENCH_DIR / "pg")
    except Exception as exc:  # a failed build is reported, the rest of the suite runs
        return f"the build failed: {str(exc).splitlines()[0]}"
    if built.restart_required:
        EmbeddedServer(BENCH_DIR / "pg").restart()
    return None


def textsearch_available(client) -> str | None:
    """None when pg_textsearch can be used on the bench server, else why not."""
    try:
        with client._db.admin() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
            conn.commit()
        return None
    except Exception as exc:  # not installed, or not in shared_preload_libraries
        return str(exc).split("\n")[0]


def textsearch_runs(client, rows: list[dict]) -> dict[str, float]:
    texts = [(r["id"], f"{r['title']}\n{r['text']}") for r in rows]
    out = {}
    with client._db.admin() as conn:
        conn.execute("DROP TABLE IF EXISTS bench_ts_rows, bench_ts_bulk")
        conn.execute("CREATE TABLE bench_ts_rows (id text, content text)")
        conn.execute("CREATE INDEX ON bench_ts_rows USING bm25 (content)"
                     " WITH (text_config = 'english', k1 = 0.9, b = 0.4)")
        conn.commit()
        cpu0, started = server_cpu(), time.perf_counter()
        with conn.cursor() as cur:
            for row in texts:  # one statement a row (one transaction: its best case)
                cur.execute("INSERT INTO bench_ts_rows VALUES (%s, %s)", row)
        conn.commit()
        out["rows"] = time.perf_counter() - started
        out["rows_cpu"] = server_cpu() - cpu0
        conn.execute("CREATE TABLE bench_ts_bulk (id text, content text)")
        conn.commit()
        cpu0, started = server_cpu(), time.perf_counter()
        with conn.cursor() as cur, cur.copy("COPY bench_ts_bulk FROM STDIN") as copy:
            for row in texts:
                copy.write_row(row)
        conn.execute("CREATE INDEX ON bench_ts_bulk USING bm25 (content)"
                     " WITH (text_config = 'english', k1 = 0.9, b = 0.4)")
        conn.commit()
        out["bulk"] = time.perf_counter() - started
        out["bulk_cpu"] = server_cpu() - cpu0
        conn.execute("DROP TABLE bench_ts_rows, bench_ts_bulk")
        conn.commit()
    return out


# -- embedded ---------------------------------------------------------------------------

def embedded_runs(client, rows: list[dict]) -> tuple[float, float, int, list[float]]:
    """(bare embedder seconds, ingest seconds, fragments, each slice's ratio) on the same
    rows, in slices of EMBEDDED_SLICE documents alternating which goes first, so the
    machine's drifting load falls on both alike."""
    from pgbraid.ingest.chunking import chunk

    name = f"bench-ingest-embedded-{os.getpid()}-{time.time_ns()}"
    client.create_pipeline(name)
    embedder = client.embedder("minilm")
    size = client.pipeline(name).chunk_size
    embedder.embed_documents(["warm up"] * 8)
    from pgbraid.ingest import language
    language._identifier()  # loaded once per process (~1 s): not the first slice's cost
    bare = ingest = 0.0
    fragments, ratios = 0, []
    for i in range(0, len(rows), EMBEDDED_SLICE):
        part = rows[i:i + EMBEDDED_SLICE]
        texts = [embedding_text(r["title"], c.text) for r in part
                 for c in chunk(r["text"], target=size)]
        timings = {}
        for step in (("bare", "ingest") if i // EMBEDDED_SLICE % 2 == 0 else ("ingest", "bare")):
            started = time.perf_counter()
            if step == "bare":
                embedder.embed_documents(texts)
            else:
                report = client.ingest(name, part)
                assert report.fragments == len(texts) and report.embedded == len(texts)
            timings[step] = time.perf_counter() - started
        bare, ingest = bare + timings["bare"], ingest + timings["ingest"]
        fragments += len(texts)
        ratios.append(timings["bare"] / timings["ingest"])
    client.delete_pipeline(name)
    return bare, ingest, fragments, ratios


# -- the suite ------------------------------------------------------------------------

def run(quick: bool = False, rounds: int | None = None, embedded_docs: int | None = None) -> None:
    """The lexical rows and peers in ``rounds`` (1 quick, else 2; 0: skipped), then the
    embedded pair on ``embedded_docs`` abstracts (0: skipped)."""
    rows = records()
    rounds = (1 if quick else 2) if rounds is None else rounds
    why_not = build_textsearch() if rounds else None  # it may restart the server: first
    client = connect()
    if rounds:
        lexical(client, rows, rounds, why_not or textsearch_available(client))
    if embedded_docs is None:
        embedded_docs = 2 * EMBEDDED_SLICE if quick else EMBEDDED_DOCS
    if embedded_docs:
        embedded(client, rows[:embedded_docs])


def lexical(client, rows: list[dict], rounds: int, why_not: str | None) -> None:
    """The lexical rows, and pg_textsearch's unless ``why_not`` says why it cannot run."""
    console.print(f"[bold]ingest[/bold]: SciFact {len(rows)} abstracts, {rounds} interleaved"
                  f" round(s), load average {os.getloadavg()[0]:.1f} at the start")
    kinds = [("1 process", 1, True), ("2 processes, one pipeline", 2, True),
             ("2 processes, a pipeline each", 2, False)]
    results: dict[str, list[dict]] = {k[0]: [] for k in kinds}
    peer: list[dict] = []
    for _ in range(rounds):
        for label, processes, shared in kinds:
            results[label].append(lexical_run(client, rows, processes, shared))
        if why_not is None:
            peer.append(textsearch_runs(client, rows))
    base = statistics.median(r["rate"] for r in results["1 process"])
    out = []
    for label, _, _ in kinds:
        runs = results[label]
        rate = statistics.median(r["rate"] for r in runs)
        fragments = runs[0]["fragments"]
        cpu = statistics.median((r["client_cpu"] + r["server_cpu"]) * 1000 / fragments for r in runs)
        out.append([f"pgbraid lexical, {label}", f"{statistics.median(r['wall'] for r in runs):.1f}",
                    f"{rate:.0f}", f"{rate / base:.2f}", f"{cpu:.2f}"])
    if why_not is None:
        for key, label in (("rows", "row by row into an indexed table"),
                           ("bulk", "COPY + CREATE INDEX")):
            wall = statistics.median(p[key] for p in peer)
            cpu = statistics.median(p[f"{key}_cpu"] for p in peer) * 1000 / len(rows)
            out.append([f"pg_textsearch 1.4, {label}", f"{wall:.1f}", f"{len(rows) / wall:.0f}",
                        f"{len(rows) / wall / base:.2f}", f"{cpu:.2f} (server)"])
    else:
        console.print(f"pg_textsearch peer skipped: {why_not}")
    columns = ["", "wall s", "fragments/s", "vs 1 process", "CPU ms/fragment"]
    table("SciFact lexical ingestion (pg_textsearch: one row per document)", columns, out)
    plots.save("ingest", "lexical", [dict(zip(columns, row)) for row in out],
               load=os.getloadavg()[0], rounds=rounds)
    console.print(f"load average {os.getloadavg()[0]:.1f} at the end")


def embedded(client, sample: list[dict]) -> None:
    bare, ingest, fragments, ratios = embedded_runs(client, sample)
    spread = f"slices {min(ratios):.2f}-{max(ratios):.2f}"
    plots.save("ingest", "embedded", {"bare_s": bare, "ingest_s": ingest, "fragments": fragments,
                                      "slice_ratios": ratios}, load=os.getloadavg()[0])
    table(f"Embedded ingestion, first {len(sample)} abstracts (minilm), in slices of"
          f" {EMBEDDED_SLICE} alternating which runs first",
          ["", "seconds", "fragments/s", "vs bare embedder"],
          [["bare embedder (embed_documents)", f"{bare:.1f}", f"{fragments / bare:.1f}", "1.00"],
           ["pgbraid ingest", f"{ingest:.1f}", f"{fragments / ingest:.1f}",
            f"{bare / ingest:.2f} ({spread})"]])
    console.print(f"load average {os.getloadavg()[0]:.1f} at the end")


def plot(results: dict) -> list[Path]:
    """Fragments/s per way of ingesting SciFact, from the suite's result file."""
    rows = plots.data(results, "lexical") or []
    values = {row[""]: float(row["fragments/s"]) for row in rows}
    if not values:
        return []
    return [plots.bars("ingest", "SciFact lexical ingestion", "fragments/s", values,
                       note="machine shared: see docs/benchmarks.md", digits=0)]


def main() -> None:
    """`python -m bench.ingest [--rounds N] [--embedded-docs N]`: the suite with its sizes
    chosen (``--embedded-docs 0``: lexical rows and peers only; ``--rounds 0``: the
    embedded pair only)."""
    parser = argparse.ArgumentParser(prog="bench.ingest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--embedded-docs", type=int, default=EMBEDDED_DOCS)
    args = parser.parse_args()
    from . import __main__ as suite, ingest  # not __main__'s copy: workers pickle by name

    ingest.run(rounds=args.rounds, embedded_docs=args.embedded_docs)
    suite.draw(ingest)


if __name__ == "__main__":
    main()
