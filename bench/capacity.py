"""Figures for the capacity model (docs/scale.md): bytes per fragment, per posting and per
HNSW vector, measured on this machine's embedded PostgreSQL.

- fragments and postings: the SciFact pipeline of ``bench replicas`` (5,183 documents,
  lexical: no embedder), its heap, TOAST and indexes from ``pg_total_relation_size`` /
  ``pg_relation_size`` divided by its fragment and posting counts;
- HNSW: N random unit vectors of 384 dimensions (all-MiniLM-L6-v2's size) in a scratch
  table, an HNSW index (m = 16, ef_construction = 64, cosine, pgvector's defaults)
  built and measured, then dropped. Random vectors are the worst case for build time
  and say nothing of recall; the index size depends on m and dimensions, not on data.
"""

from __future__ import annotations

import time

from psycopg import sql

from .common import connect, console, table
from .plots import save
from .replicas import PIPELINE, _corpus

HNSW_VECTORS = 20_000
DIMENSIONS = 384

_SIZES = """
SELECT (SELECT count(*) FROM pgbraid.fragments f WHERE f.pipeline_id = %(p)s),
       (SELECT coalesce(sum(octet_length(ordinals)) / 4, 0) FROM pgbraid.bm25_postings
         WHERE pipeline_id = %(p)s),
       pg_relation_size('pgbraid.fragments'),
       pg_total_relation_size('pgbraid.fragments') - pg_indexes_size('pgbraid.fragments')
         - pg_relation_size('pgbraid.fragments'),
       pg_indexes_size('pgbraid.fragments'),
       pg_total_relation_size('pgbraid.bm25_postings'),
       pg_total_relation_size('pgbraid.versions') + pg_total_relation_size('pgbraid.documents')
"""


def _lexical() -> dict:
    _corpus()
    with connect() as client, client._db.admin() as conn:
        pipeline = conn.execute("SELECT id FROM pgbraid.pipelines WHERE name = %s",
                                (PIPELINE,)).fetchone()[0]
        conn.execute("VACUUM ANALYZE pgbraid.fragments, pgbraid.bm25_postings")
        (fragments, postings, heap, toast, indexes, posting_bytes,
         docs) = conn.execute(_SIZES, {"p": pipeline}).fetchone()
        per_index = conn.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index"
            " WHERE indrelid = 'pgbraid.fragments'::regclass ORDER BY 2 DESC").fetchall()
    return {"fragments": fragments, "postings": postings, "heap_bytes": heap,
            "toast_bytes": toast, "index_bytes": indexes, "posting_bytes": posting_bytes,
            "document_version_bytes": docs, "indexes": dict(per_index)}


def _hnsw(n: int) -> dict:
    with connect() as client, client._db.admin() as conn:
        conn.execute("DROP TABLE IF EXISTS public.capacity_vectors")
        dims = sql.Literal(DIMENSIONS)
        conn.execute(sql.SQL("CREATE TABLE public.capacity_vectors (id int, v vector({}))")
                     .format(dims))
        conn.execute(sql.SQL(
            "INSERT INTO public.capacity_vectors SELECT i, l2_normalize(array_agg(random() - 0.5)"
            "::vector({})) FROM generate_series(1, %s) i, generate_series(1, {}) d GROUP BY i")
            .format(dims, dims), (n,))
        heap = conn.execute("SELECT pg_total_relation_size('public.capacity_vectors')").fetchone()[0]
        conn.execute("SET maintenance_work_mem = '512MB'")
        began = time.perf_counter()
        conn.execute("CREATE INDEX capacity_hnsw ON public.capacity_vectors USING hnsw"
                     " (v vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
        build_s = time.perf_counter() - began
        index = conn.execute("SELECT pg_relation_size('public.capacity_hnsw')").fetchone()[0]
        conn.execute("DROP TABLE public.capacity_vectors")
    return {"vectors": n, "dimensions": DIMENSIONS, "heap_bytes": heap, "index_bytes": index,
            "build_s": round(build_s, 1)}


def run(quick: bool = False) -> dict:
    lexical = _lexical()
    hnsw = _hnsw(5_000 if quick else HNSW_VECTORS)
    f = lexical["fragments"]
    rows = [["fragments", f, ""],
            ["fragment heap bytes / fragment", round(lexical["heap_bytes"] / f), ""],
            ["fragment TOAST bytes / fragment", round(lexical["toast_bytes"] / f), ""],
            ["fragment index bytes / fragment", round(lexical["index_bytes"] / f),
             ", ".join(f"{k.split('.')[-1]} {v // f}" for k, v in lexical["indexes"].items())],
            ["documents + versions bytes / fragment",
             round(lexical["document_version_bytes"] / f), ""],
            ["postings", lexical["postings"], f"{lexical['postings'] / f:.1f} per fragment"],
            ["bm25_postings bytes / posting",
             round(lexical["posting_bytes"] / max(1, lexical["postings"]), 2), ""],
            ["HNSW vectors", hnsw["vectors"], f"{hnsw['dimensions']} dimensions, m 16"],
            ["vector heap bytes / vector", round(hnsw["heap_bytes"] / hnsw["vectors"]), ""],
            ["HNSW index bytes / vector", round(hnsw["index_bytes"] / hnsw["vectors"]),
             f"built in {hnsw['build_s']} s"]]
    table("capacity figures (shared 2-core machine)", ["figure", "value", "note"], rows)
    results = {"lexical": lexical, "hnsw": hnsw}
    save("capacity", "sizes", results)
    console.print("sizes are exact; the HNSW build time is from a shared machine")
    return results
