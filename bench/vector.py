"""Vector strategies: embedding throughput, relevance, HNSW recall, latency at ~100k fragments.

- throughput: the bare model on a sample of SciFact fragments vs ingesting the
  same documents into a fresh pipeline (embedding overlapped with writes);
- relevance: similarity nDCG@10 on SciFact test, next to exact numpy cosine
  over the same stored vectors and the published all-MiniLM-L6-v2 figure;
- recall@10 of the HNSW index vs exact search, without and with a metadata
  filter that keeps 5% of fragments (iterative scans);
- latency at ~100k fragments: SciFact's vectors plus noisy copies inserted
  directly (embedding 100k fragments would take hours on 2 cores), query
  embedding time shown apart, and exact numpy search in the same run.
"""

from __future__ import annotations

import time

import numpy as np

import pgbraid
from pgbraid.evaluation import evaluate, read_qrels
from pgbraid.ingest.chunking import chunk
from pgbraid.ingest.prepare import embedding_text

from . import plots
from .common import DATA, console, connect, has_pipeline, percentiles, read_jsonl, table, timed

PIPELINE = "bench-scifact-vec"
SYNTHETIC = "bench-vec-100k"
THROUGHPUT_DOCS = 400


def scifact_records() -> list[dict]:
    return [{"id": d["_id"], "title": d["title"], "text": d["text"],
             "metadata": {"bucket": int(d["_id"]) % 20}}
            for d in read_jsonl(DATA / "beir_scifact" / "corpus.jsonl.gz")]


def throughput(client) -> None:
    records = scifact_records()[:THROUGHPUT_DOCS]
    texts = [embedding_text(r["title"], c.text) for r in records for c in chunk(r["text"], target=1000)]
    model = pgbraid.embedders.get("minilm")
    model.embed_documents(texts[:32])
    bare = timed(lambda: model.embed_documents(texts)) / 1000
    name = f"bench-throughput-{int(time.time())}"
    client.create_pipeline(name)
    start = time.perf_counter()
    report = client.ingest(name, records)
    ingest = time.perf_counter() - start
    client.delete_pipeline(name)
    table(f"embedding throughput, {THROUGHPUT_DOCS} SciFact abstracts ({len(texts)} fragments)",
          ["path", "seconds", "fragments/s", "vs bare model"],
          [["bare model (ONNX, batches of 32, sorted by length)", bare, len(texts) / bare, 1.0],
           ["pgbraid ingest (chunk, embed, write, index)", ingest, report.embedded / ingest,
            (report.embedded / ingest) / (len(texts) / bare)]])
    plots.save("vector", "throughput", {"bare model (ONNX, batches of 32)": len(texts) / bare,
                                        "pgbraid ingest (chunk, embed, write, index)":
                                            report.embedded / ingest},
               unit="fragments/s", documents=len(records), fragments=len(texts))


def plot(results: dict) -> list:
    """Ingestion throughput with the default embedder against the bare model."""
    entry = results.get("throughput")
    if not entry:
        return []
    return [plots.bars("ingest-throughput",
                       f"Ingestion with the default embedder (minilm), {entry['documents']} "
                       f"SciFact abstracts, {entry['fragments']} fragments",
                       entry["unit"], entry["data"])]


def ensure_pipeline(client) -> str:
    if not has_pipeline(client, PIPELINE):
        client.create_pipeline(PIPELINE)
        start = time.perf_counter()
        report = client.ingest(PIPELINE, scifact_records())
        console.print(f"embedded SciFact: {report.embedded} fragments in "
                      f"{time.perf_counter() - start:.0f} s")
    return PIPELINE


def stored_vectors(client, pipeline: str) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    with client.session() as conn:
        rows = conn.execute(
            "SELECT d.external_id, f.id, e.embedding, (f.metadata->>'bucket')::int"
            " FROM pgbraid.embeddings e JOIN pgbraid.fragments f ON f.id = e.fragment_id"
            " JOIN pgbraid.documents d ON d.id = f.document_id JOIN pgbraid.pipelines p"
            " ON p.id = e.pipeline_id WHERE p.name = %s AND e.current ORDER BY f.id",
            (pipeline,)).fetchall()
    vectors = np.vstack([r[2].to_numpy() for r in rows]).astype(np.float32)
    return [r[0] for r in rows], [r[1] for r in rows], vectors, np.asarray([r[3] for r in rows])


def relevance_and_recall(client) -> None:
    qrels = read_qrels(DATA / "beir_scifact" / "qrels" / "test.tsv")
    queries = [(q["_id"], q["text"]) for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")
               if q["_id"] in qrels]
    docs, fragment_ids, vectors, buckets = stored_vectors(client, PIPELINE)
    model = pgbraid.embedders.get("minilm")
    run, exact_run, recalls, filtered = {}, {}, [], []
    for qid, text in queries:
        response = client.search(PIPELINE, text, type="similarity", group_by="document",
                                 params={"k": 100})
        run[qid] = {h.document_id: 100.0 - h.rank for h in response.hits}
        q = model.embed_query(text)
        order = np.argsort(-(vectors @ q))
        seen: dict[str, float] = {}
        for i in order:
            if docs[i] not in seen:
                seen[docs[i]] = 100.0 - len(seen)
            if len(seen) == 100:
                break
        exact_run[qid] = seen
        ann = client.search(PIPELINE, text, type="similarity", params={"k": 10})
        truth = {fragment_ids[i] for i in order[:10]}
        recalls.append(len(truth & {h.fragment_id for h in ann.hits}) / 10)
        kept = order[buckets[order] == 0][:10]
        ann = client.search(PIPELINE, text, type="similarity", filters={"bucket": 0}, params={"k": 10})
        filtered.append((len({fragment_ids[i] for i in kept} & {h.fragment_id for h in ann.hits})
                         / max(len(kept), 1), len(ann.hits)))
    m, e = evaluate(qrels, run), evaluate(qrels, exact_run)
    table("SciFact test: similarity (all-MiniLM-L6-v2 int8, ~1,000-character fragments, best per document)",
          ["system", "nDCG@10", "R@100"],
          [["pgbraid similarity (HNSW, cosine)", m["nDCG@10"], m["R@100"]],
           ["exact numpy cosine, same vectors", e["nDCG@10"], e["R@100"]],
           ["published all-MiniLM-L6-v2 (MTEB)", "~0.645", "-"]])
    table(f"HNSW recall@10 vs exact search ({len(vectors):,} fragments, {len(queries)} queries)",
          ["search", "recall@10", "hits returned (of 10)"],
          [["no filter", float(np.mean(recalls)), 10.0],
           ["filter keeping 5% (bucket = 0)", float(np.mean([r for r, _ in filtered])),
            float(np.mean([n for _, n in filtered]))]])


def ensure_synthetic(client, target: int = 100_000) -> str:
    if has_pipeline(client, SYNTHETIC):
        return SYNTHETIC
    docs, _, vectors, _ = stored_vectors(client, PIPELINE)
    client.create_pipeline(SYNTHETIC)
    rng = np.random.default_rng(11)
    info = client.pipeline(SYNTHETIC)
    with client.session() as conn:
        pid = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s", (SYNTHETIC,)).fetchone()[0]
    with client._db.admin() as admin:
        from pgbraid.strategies.vector import store as vector_indexes

        vector_indexes.drop_indexes(admin, pid)  # bulk load first, build the HNSW indexes after
    per_doc = 1000
    for start in range(0, target, per_doc):
        block = vectors[rng.integers(0, len(vectors), per_doc)]
        block = block + rng.normal(scale=0.02, size=block.shape).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        with client.session() as conn:
            doc = conn.execute("INSERT INTO pgbraid.documents (pipeline_id, external_id, current_version)"
                               " VALUES (%s, %s, 1) RETURNING id", (pid, f"synthetic-{start}")).fetchone()[0]
            version = conn.execute(
                "INSERT INTO pgbraid.versions (pipeline_id, document_id, version, body, content_hash,"
                " classifications) VALUES (%s, %s, 1, 'synthetic', 'x', '{public}') RETURNING id",
                (pid, doc)).fetchone()[0]
            conn.execute(
                "WITH f AS (INSERT INTO pgbraid.fragments (pipeline_id, document_id, version_id, ordinal,"
                " body, language, ts_config, classifications)"
                " SELECT %(p)s, %(d)s, %(v)s, n, 'synthetic fragment ' || n, 'english', 'english', '{public}'"
                " FROM generate_series(0, %(n)s - 1) AS n RETURNING id, ordinal)"
                " INSERT INTO pgbraid.embeddings (fragment_id, pipeline_id, embedding)"
                " SELECT f.id, %(p)s, (%(vectors)s::vector[])[f.ordinal + 1] FROM f",
                {"p": pid, "d": doc, "v": version, "n": per_doc, "vectors": list(block)})
    start = time.perf_counter()
    with client._db.admin() as admin:
        admin.execute("SET maintenance_work_mem = '1GB'")
        vector_indexes.create_indexes(admin, pid, info.dimension)
        admin.execute("ANALYZE pgbraid.embeddings, pgbraid.fragments")
    console.print(f"built {target:,} synthetic fragments; three HNSW indexes in "
                  f"{time.perf_counter() - start:.0f} s")
    return SYNTHETIC


def latency(client) -> None:
    ensure_synthetic(client)
    with client.session() as conn:
        rows = conn.execute("SELECT e.embedding FROM pgbraid.embeddings e JOIN pgbraid.pipelines p"
                            " ON p.id = e.pipeline_id WHERE p.name = %s", (SYNTHETIC,)).fetchall()
    matrix = np.vstack([r[0].to_numpy() for r in rows]).astype(np.float32)
    queries = [q["text"] for q in read_jsonl(DATA / "beir_scifact" / "queries.jsonl")][:200]
    model = pgbraid.embedders.get("minilm")
    for q in queries[:5]:
        client.search(SYNTHETIC, q, type="similarity", params={"k": 10})
    embed, search, exact = [], [], []
    for q in queries:
        embed.append(timed(lambda: model.embed_query(q)))
        vector = model.embed_query(q).tolist()
        search.append(timed(lambda: client.search(SYNTHETIC, q, type="similarity",
                                                  params={"k": 10, "vector": vector})))
        qv = np.asarray(vector, dtype=np.float32)
        exact.append(timed(lambda: np.argpartition(-(matrix @ qv), 10)[:10]))
    rows = []
    base = percentiles(exact)[0]
    for name, samples in [("query embedding (minilm)", embed),
                          ("pgbraid similarity, vector given (HNSW)", search),
                          ("exact numpy search (in memory)", exact)]:
        p50, p95 = percentiles(samples)
        rows.append([name, p50, p95, p50 / base])
    table(f"similarity latency at {len(matrix):,} fragments, {len(queries)} queries, ms",
          ["step", "p50", "p95", "p50 / exact numpy"], rows)


def run(*, quick: bool = False) -> None:
    with connect() as client:
        throughput(client)
        ensure_pipeline(client)
        relevance_and_recall(client)
        if not quick:
            latency(client)
