"""BM25 at ~100k, ~300k and ~1M fragments: pgbraid, pg_textsearch and bm25s side by side.

One corpus (bench/corpus.py), built once through the bulk path (bench/bulk.py)
into its own embedded server under /tmp (PGBRAID_MILLION_DIR), where reruns
find it. Its three size classes are BM25 partitions: a search naming
classification c1 ranks over ~100k fragments, c1+c2 over ~300k, all three
over ~1M. pg_textsearch gets three tables with the same rows (title and
body of each fragment, through pgbraid's code-aware expansion) and a bm25
index each; bm25s gets pgbraid's own tokens of the same fragments.

Latency is measured interleaved: for each query, every system in turn (in a
rotating order), so drift on this shared machine hits them alike.
"""

from __future__ import annotations

import os
import time
from multiprocessing import get_context
from pathlib import Path

import numpy as np

import pgbraid
from pgbraid import pipelines

from . import bulk, corpus, plots
from .common import ROOT, console, percentiles, table
from .million_peers import Answers, Reference, TextSearch

DIR = Path(os.environ.get("PGBRAID_MILLION_DIR") or "/tmp/pgbraid-bench-1m")
PIPELINE = "bench-1m"
CLASSES = ("c1", "c2", "c3")
# GIN indexes over fragments are built once after the load (the same index, far
# faster than maintained row by row); their definitions are read from the catalog.
_DEFERRED = ("fragments_body_trgm", "fragments_title_trgm", "fragments_words_trgm",
             "fragments_word_set", "fragments_tsv")


def connect(**overrides) -> pgbraid.Client:
    DIR.mkdir(parents=True, exist_ok=True)
    return pgbraid.connect(data_dir=DIR / "pg", statement_timeout_ms=3_600_000, **overrides)


def _prepare_copy(args: tuple) -> list:
    pipeline, copy = args
    records = [{**d, "language": "en", "classification": [corpus.size_class(copy)]}
               for d in corpus.copy_of(_POOL, copy)]
    return bulk.prepared(pipeline, records)


_POOL: list[dict] = []


def _init_pool() -> None:
    _POOL.extend(corpus.sources())


def ensure(client: pgbraid.Client, workers: int = 3) -> str:
    """The corpus pipeline, built (or an interrupted build resumed) unless complete."""
    if PIPELINE not in {p.name for p in client.pipelines()}:
        # BM25 only (no tsvector column): what is measured, at half the build time.
        client.create_pipeline(PIPELINE, embedder="none", fulltext=False,
                               chunk_size=corpus.CHUNK_SIZE)
    if complete(client) == list(CLASSES):
        return PIPELINE
    with client.session() as conn:
        target = pipelines.get(conn, PIPELINE)
    _drop_indexes(client)
    start, done = time.perf_counter(), _copies_written(client, target.id)
    console.print(f"building {PIPELINE}: {done} of {corpus.COPIES['c3']} copies written before")
    with get_context("fork").Pool(workers, initializer=_init_pool) as pool:
        copies = pool.imap(_prepare_copy, [(target, c) for c in range(done, corpus.COPIES["c3"])])
        first = 0
        for name in CLASSES:
            begun, partition = _call_of(client, target.id, name)
            if name not in complete(client):
                batches = (next(copies) for _ in range(max(first, done), corpus.COPIES[name]))
                bulk.load(client._session, target, _progress(batches, name),
                          first_segment=begun, partitions=[partition] if partition else [])
                console.print(f"  {name} written, {time.perf_counter() - start:.0f} s")
            first = corpus.COPIES[name]
    _restore_indexes(client)
    with client._db.admin() as conn:
        conn.execute("ANALYZE pgbraid.fragments, pgbraid.versions, pgbraid.documents,"
                     " pgbraid.bm25_postings")
        conn.execute("UPDATE pgbraid.pipelines SET settings = settings || '{\"bench_complete\": true}'"
                     " WHERE id = %s", (target.id,))
    console.print(f"built {PIPELINE} in {time.perf_counter() - start:.0f} s")
    return PIPELINE


def _copies_written(client: pgbraid.Client, pipeline_id: int) -> int:
    """Copies are written in order, one transaction each: the first one missing."""
    with client.session() as conn:
        row = conn.execute(
            "SELECT max(coalesce(substring(external_id FROM '~([0-9]+)$')::int, 0))"
            " FROM pgbraid.documents WHERE pipeline_id = %s", (pipeline_id,)).fetchone()
    return 0 if row[0] is None else row[0] + 1


def _call_of(client: pgbraid.Client, pipeline_id: int, name: str) -> tuple[int | None, int | None]:
    """Where a class's ingest call began (its partition's first segment) and its partition."""
    with client.session() as conn:
        row = conn.execute(
            "SELECT p.id, (SELECT min(s.segment) FROM pgbraid.bm25_segments s"
            " WHERE s.partition_id = p.id) FROM pgbraid.bm25_partitions p"
            " WHERE p.pipeline_id = %s AND p.classifications = %s::text[]",
            (pipeline_id, [name])).fetchone()
    return (row[1], row[0]) if row else (None, None)


def _progress(batches, name: str):
    for i, batch in enumerate(batches):
        yield batch
        console.print(f"  {name}: batch {i + 1} ({len(batch):,} documents) written")


def _drop_indexes(client: pgbraid.Client) -> None:
    """Drop the deferred indexes, their definitions kept in DIR (a resumed build restores
    what an interrupted one dropped)."""
    import json

    saved = DIR / "deferred-indexes.json"
    with client._db.admin() as conn:
        rows = conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgbraid'"
                            " AND indexname = ANY(%s)", (list(_DEFERRED),)).fetchall()
        known = json.loads(saved.read_text()) if saved.exists() else []
        saved.write_text(json.dumps(sorted(set(known) | {d for _, d in rows}), indent=1))
        for name, _ in rows:
            conn.execute(f'DROP INDEX pgbraid."{name}"')


def _restore_indexes(client: pgbraid.Client) -> None:
    import json

    saved = DIR / "deferred-indexes.json"
    with client._db.admin() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for definition in json.loads(saved.read_text()) if saved.exists() else []:
            conn.execute(definition.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
    saved.unlink(missing_ok=True)


# -- measuring ------------------------------------------------------------------

QUICK_ROUNDS = 3
SIZES = {"100k": CLASSES[:1], "300k": CLASSES[:2], "1m": CLASSES}
VENDOR = Path(os.environ.get("PGBRAID_SHARED_VENDOR") or ROOT.parent / "shared" / "vendor")
SYSTEMS = ("pgbraid bm25 (block-max)", "pgbraid bm25 (every posting)", "pg_textsearch",
           "bm25s (in memory)", "pgbraid bm25 (default: auto)")


def complete(client: pgbraid.Client) -> list[str]:
    """The size classes written in full: all once the build finished; before, each
    class whose successor's partition exists (its ingest call, merges included, ended)."""
    with client.session() as conn:
        if PIPELINE not in {p.name for p in client.pipelines()}:
            return []
        target = pipelines.get(conn, PIPELINE)
        if target.settings.get("bench_complete"):
            return list(CLASSES)
        held = {tuple(r[0]) for r in conn.execute(
            "SELECT classifications FROM pgbraid.bm25_partitions WHERE pipeline_id = %s",
            (target.id,))}
    return [c for c, after in zip(CLASSES, CLASSES[1:]) if (after,) in held]


def run(*, sizes: tuple[str, ...] = tuple(SIZES), build: bool = False, quick: bool = False
        ) -> dict:
    """Measure the sizes whose classes are complete; build (or resume) first if asked.
    ``quick``: pgbraid's default and pg_textsearch only, exactness against bm25s's
    answers kept from an earlier run (bm25s indexes 1M fragments in ~400 s: it does
    only when they are missing), so 1M takes a few minutes."""
    from .lexical import code_chunks, query_tokens, scifact_queries

    results: dict = {}
    with connect(postings_cache_mb=6144) as client:
        if build:
            ensure(client)
        done = complete(client)
        sizes = tuple(s for s in sizes if set(SIZES[s]) <= set(done))
        with client.session() as conn:
            pid = pipelines.get(conn, PIPELINE).id
        peer = TextSearch(DIR / "pts", VENDOR)
        if peer.reason:
            console.print(f"[yellow]pg_textsearch skipped: {peer.reason}[/]")
        sets = {"SciFact queries": [t for _, t in scifact_queries()[0]],
                "30-token code chunks": code_chunks()}
        tokens = {t: query_tokens(client, t) for texts in sets.values() for t in texts}
        for size in sizes:
            classes = list(SIZES[size])
            smaller = [s for s in SIZES if len(SIZES[s]) < len(classes)]
            base = (smaller[-1], list(SIZES[smaller[-1]])) if smaller else None
            with client.session() as conn:
                rows = peer.ensure(size, conn, pid, classes, base) if not peer.reason else None
                reference = _reference(conn, pid, classes, size, sets, tokens, quick)
            for set_name, texts in sets.items():
                before = os.getloadavg()[0]
                results[(size, set_name)] = _measure(client, peer, reference, size, classes,
                                                     texts, tokens, quick)
                results[(size, set_name)]["load average"] = [before, os.getloadavg()[0]]
                results[(size, set_name)]["fragments"] = reference.fragments
                results[(size, set_name)]["pg_textsearch rows"] = rows
                _print(size, set_name, results[(size, set_name)])
            del reference
        peer.close()
    if not quick:  # a quick run's figures lack the forced paths and bm25s's latency
        _save(results)
    return results


def _reference(conn, pid: int, classes: list[str], size: str, sets: dict, tokens: dict,
               quick: bool):
    """bm25s over the size's fragments, or (quick) its answers kept in DIR."""
    if not quick:
        return Reference(conn, pid, classes)
    answers = Answers(DIR / f"bm25s-answers-{size}.json", conn, pid, classes)
    missing = answers.missing([t for texts in sets.values() for t in texts])
    if missing:
        console.print(f"  bm25s answers for {len(missing)} queries missing: indexing {size}")
        answers.fill(Reference(conn, pid, classes), tokens, missing)
    return answers


def _measure(client, peer, reference, size: str, classes: list[str], texts: list[str],
             tokens: dict[str, list[str]], quick: bool = False) -> dict:
    def pgbraid_search(pruning):
        return lambda t: client.search(PIPELINE, t, type="bm25", classification=classes,
                                       params={"k": 10, "pruning": pruning})

    systems = {SYSTEMS[4]: pgbraid_search("auto")}
    if not quick:  # block-max and every posting forced, bm25s timed
        systems.update({SYSTEMS[0]: pgbraid_search("blockmax"),
                        SYSTEMS[1]: pgbraid_search("none"),
                        SYSTEMS[3]: lambda t: reference.top(tokens[t])})
    if not peer.reason:
        systems[SYSTEMS[2]] = lambda t: peer.search(size, t)
    for name, search in systems.items():  # warm: caches, shared buffers, prepared statements
        for text in texts if name != SYSTEMS[3] else texts[:5]:
            search(text)
    names = list(systems)
    samples: dict[str, list[float]] = {name: [] for name in names}
    answers: dict[str, list] = {name: [] for name in names}
    # Interleaved, the order rotating per query; quick runs take QUICK_ROUNDS passes
    # (two systems only: more samples in the same few minutes).
    for turn in range(QUICK_ROUNDS if quick else 1):
        for i, text in enumerate(texts):
            for name in names[(i + turn) % len(names):] + names[:(i + turn) % len(names)]:
                start = time.perf_counter()
                answer = systems[name](text)
                samples[name].append((time.perf_counter() - start) * 1000)
                if turn == 0:
                    answers[name].append(answer)
    if quick:
        answers[SYSTEMS[3]] = [reference.top(t) for t in texts]
    return {"latency": {n: percentiles(s) for n, s in samples.items()},
            **_exactness(answers, len(texts))}


def _exactness(answers: dict, count: int) -> dict:
    """pgbraid's top 10 (the default's; and block-max's, forced) against bm25s on the
    same tokens (scores), block-max against every posting (fragments and scores),
    pg_textsearch against bm25s (ordinals)."""
    reference, default = answers[SYSTEMS[3]], answers[SYSTEMS[4]]

    def exact(mine: list) -> int:
        return sum(len(a.hits) == len(r) and np.allclose([h.score for h in a.hits],
                                                         [s for _, s in r], atol=1e-3)
                   for a, r in zip(mine, reference))

    scored = [a.trace.retrievers[0].details for a in default]
    out = {"exact vs bm25s": exact(default), "queries": count,
           "postings scored share (default)": float(np.median(
               [d["postings_scored"] / d["postings"] for d in scored if d["postings"]]))}
    if SYSTEMS[0] in answers:
        blockmax, every = answers[SYSTEMS[0]], answers[SYSTEMS[1]]
        out["exact vs bm25s (block-max)"] = exact(blockmax)
        out["block-max == every posting == default"] = sum(
            [(h.fragment_id, h.score) for h in a.hits] ==
            [(h.fragment_id, h.score) for h in b.hits] ==
            [(h.fragment_id, h.score) for h in c.hits]
            for a, b, c in zip(blockmax, every, default))
    if SYSTEMS[2] in answers:
        out["pg_textsearch top-10 overlap with bm25s"] = float(np.mean(
            [len({o for o, _ in p} & {o for o, _ in r}) / max(len(r), 1)
             for p, r in zip(answers[SYSTEMS[2]], reference)]))
    return out


def _print(size: str, set_name: str, result: dict) -> None:
    latency = result["latency"]
    peer = latency.get(SYSTEMS[2])
    bm25s = latency.get(SYSTEMS[3])
    rows = [[name, p50, p95, p50 / peer[0] if peer else "-", p95 / peer[1] if peer else "-",
             p50 / bm25s[0] if bm25s else "-"] for name, (p50, p95) in latency.items()]
    table(f"{size} ({result['fragments']:,} fragments): {set_name} ({result['queries']}), ms, "
          "interleaved", ["system", "p50", "p95", "p50 / pg_textsearch", "p95 / pg_textsearch",
                          "p50 / bm25s"], rows)
    console.print("  " + ", ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}"
                                   for k, v in result.items() if k != "latency"))


def _save(results: dict) -> None:
    """Into bench/results/million.json (bench/plots.py), one entry per size and query set."""
    for (size, set_name), result in results.items():
        plots.save("million", f"{size} / {set_name}", result, unit="ms")


def plot(results: dict) -> list[Path]:
    """p50 and p95 against fragments, per query set and system: docs/plots/bm25_scaling.png."""
    rows = [{"set": key.split(" / ", 1)[1], **entry["data"]} for key, entry in results.items()]
    sets = sorted({r["set"] for r in rows}, reverse=True)
    plt = plots._pyplot()
    figure, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4.5), squeeze=False)
    for axis, set_name in zip(axes[0], sets):
        mine = sorted((r for r in rows if r["set"] == set_name), key=lambda r: r["fragments"])
        for name in SYSTEMS:
            points = [(r["fragments"], *r["latency"][name]) for r in mine if name in r["latency"]]
            if not points:
                continue
            x, p50, p95 = zip(*points)
            axis.plot(x, p50, marker="o", color=plots.colour(name), label=f"{name} p50")
            axis.plot(x, p95, marker="x", linestyle="--", color=plots.colour(name),
                      label=f"{name} p95")
        axis.set(xscale="log", yscale="log", xlabel="fragments", ylabel="ms",
                 title=f"bm25 top 10: {set_name}")
        axis.legend(fontsize=7)
    figure.suptitle(plots.NOTE, fontsize=8)
    figure.tight_layout()
    plots.PLOTS.mkdir(parents=True, exist_ok=True)
    out = plots.PLOTS / "bm25_scaling.png"
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return [out]
