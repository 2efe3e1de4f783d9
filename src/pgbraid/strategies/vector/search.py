"""similarity and mmr: nearest fragments by embedding, over pgvector HNSW.

similarity: the k fragments closest to the query vector under
``distance_strategy`` (cosine by default, euclidean-distance, dot-product);
``score`` is that distance, lower is closer (seed 003's table). The statement
orders by the distance operator itself with LIMIT, so the pipeline's HNSW
index for that strategy serves it; pgvector 0.8's iterative scan (strict
order) keeps scanning until k rows pass the scope filter.

mmr: the ``fetch_k`` nearest candidates, then maximal marginal relevance in
numpy: each step picks argmax of lambda * sim(query, c) - (1 - lambda) *
max sim(c, selected), with similarities derived for each strategy on one
scale (cosine: 1 - distance; dot-product: the inner product; euclidean: the
negative distance), so euclidean ranks as intended. Results come in selection
order with both the distance (``score``) and the MMR value (``mmr_score``).

As of a time (``scope.as_of``), the HNSW indexes, partial on current rows,
cannot serve: the same statement without ``e.current`` is an exact distance
scan of the fragments valid then (strategies/history.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ...db.transaction_settings import set_local
from ...errors import BackendUnavailable, InvalidRequest
from ...models import SearchRequest, shown
from ...pipelines import Pipeline
from ...scope import Scope
from .store import Distance, check_vector, distance
from ..base import HIT_COLUMNS, NO_WORDS, Context, Outcome, Row, Strategy, has_words
from ..params import PAGING, Param

logger = logging.getLogger(__name__)

_NEAREST = """
SELECT {columns}, e.embedding::vector({dim}) {op} %(query)s::vector({dim}) AS score {extra}
FROM pgbraid.embeddings e
     JOIN pgbraid.fragments f ON f.pipeline_id = e.pipeline_id AND f.id = e.fragment_id
     JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
     JOIN pgbraid.documents d ON d.pipeline_id = f.pipeline_id AND d.id = f.document_id
WHERE e.pipeline_id = {pipeline} {current} AND {scope}
ORDER BY e.embedding::vector({dim}) {op} %(query)s::vector({dim})
LIMIT %(k)s
"""


VECTOR_PARAMS = (
    *PAGING,
    Param("threshold", "number", None, "the maximum distance; null: no limit", nullable=True),
    Param("vector", "vector", None, "search with this vector instead of embedding the query: "
          "finite numbers, the pipeline's dimension, not all zeros under cosine"),
    Param("embedder", "string", None, "the embedder the caller expects; another than the "
          "pipeline's is an error", rule="the pipeline's"),
)


class _Vector(Strategy):
    params = VECTOR_PARAMS

    def validate(self, request: SearchRequest, context: Context) -> None:
        distance(request.distance_strategy)
        if "vector" in request.params:  # its dimension is checked against the pipeline's later
            check_vector(request.params["vector"], None, "params.vector",
                         nonzero=request.distance_strategy == "cosine")

    def unavailable(self, pipeline: Pipeline, context: Context) -> str | None:
        if "vector" not in context.extensions:
            return "the pgvector extension is not installed on this server"
        if not pipeline.embedder:
            return f"pipeline {pipeline.name!r} has no embedder (created with embedder 'none')"
        return None

    def wordless(self, pipeline: Pipeline, request: SearchRequest) -> Outcome | None:
        """No rows, and why, for a query without a letter or a digit: its embedding means
        nothing, so its "nearest" fragments would be any (nothing is embedded or sent)."""
        if "vector" in request.params or has_words(request.query):
            return None
        return Outcome([], {"embedder": pipeline.embedder, "rows": 0, "explanation": NO_WORDS})

    def query_vector(self, pipeline: Pipeline, request: SearchRequest,
                     context: Context) -> tuple[np.ndarray, float]:
        """The query's vector (supplied in params.vector, or embedded) and the ms it took."""
        asked = self.param(request, "embedder")
        if asked is not None and asked != pipeline.embedder:
            raise InvalidRequest(f"pipeline {pipeline.name!r} was embedded with "
                                 f"{pipeline.embedder!r}, not {shown(asked)}: its vectors are not "
                                 "comparable", field="embedder")
        if "vector" in request.params:
            return check_vector(request.params["vector"], pipeline.dimension or 0, "params.vector",
                                nonzero=request.distance_strategy == "cosine"), 0.0
        started = time.perf_counter()
        try:
            vector = context.embedder(pipeline.embedder).embed_query(request.query)
        except BackendUnavailable:
            raise
        except Exception as exc:  # the model failing is the backend being unavailable
            # Its text stays in the log: a library's message may name files, hosts or keys.
            logger.exception("embedder %r failed on a query", pipeline.embedder)
            raise BackendUnavailable(f"embedder {pipeline.embedder!r} failed "
                                     f"({type(exc).__name__}): see the server log") from exc
        return vector, (time.perf_counter() - started) * 1000

    def nearest(self, conn: psycopg.Connection, pipeline: Pipeline, scope: Scope, vector: np.ndarray,
                strategy: Distance, k: int, *, with_vectors: bool = False) -> list[dict]:
        # Enough candidates per index pass, and keep scanning (in exact order) when the
        # scope filters rows out: filtered searches still return k when k exist.
        set_local(conn, {"hnsw.ef_search": str(min(1000, max(40, k))),
                         "hnsw.iterative_scan": "strict_order"})
        where, params = scope.where("f")
        dim = sql.Literal(pipeline.dimension)
        statement = sql.SQL(_NEAREST).format(
            columns=sql.SQL(HIT_COLUMNS), dim=dim, op=sql.SQL(strategy.operator),
            extra=sql.SQL(", e.embedding AS vector") if with_vectors else sql.SQL(""),
            pipeline=sql.Literal(pipeline.id), scope=where,
            current=sql.SQL("AND e.current") if scope.as_of is None else sql.SQL(""))
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(statement, {**params, "query": vector, "k": k}).fetchall()


class Similarity(_Vector):
    name = "similarity"
    description = "nearest fragments by embedding (pgvector HNSW), lower score is closer"

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        strategy = distance(request.distance_strategy)
        threshold = self.param(request, "threshold")
        if (nothing := self.wordless(pipeline, request)) is not None:
            return nothing
        vector, embed_ms = self.query_vector(pipeline, request, context)
        rows = [Row(**r) for r in self.nearest(conn, pipeline, scope, vector, strategy, k)]
        if threshold is not None:
            rows = [r for r in rows if r.score <= threshold]
        return Outcome(rows, {"embedder": pipeline.embedder, "distance_strategy": strategy.name,
                              "embed_ms": round(embed_ms, 3), "rows": len(rows),
                              "threshold": threshold, "iterative_scan": "strict_order",
                              "tuples_scanned": "not reported by pgvector"})


class MMR(_Vector):
    name = "mmr"
    description = "maximal marginal relevance over the fetch_k nearest fragments"
    params = (*VECTOR_PARAMS,
              Param("fetch_k", "integer", None, "candidates fetched before selection, at least "
                    "offset + k; pages are slices of one selection when it is given",
                    low=0, high=10_000, nullable=True, rule="max(10, 2 * (offset + k))"),
              Param("lambda_mult", "number", 0.5, "relevance against diversity: 1 is "
                    "similarity order, 0 the most diverse", low=0.0, high=1.0, nullable=True))

    def fetch_k(self, request: SearchRequest) -> int:
        asked = self.param(request, "fetch_k")
        return max(10, 2 * (request.offset + request.k)) if asked is None else asked

    def validate(self, request: SearchRequest, context: Context) -> None:
        super().validate(request, context)
        fetch_k, wanted = self.fetch_k(request), request.offset + request.k
        if fetch_k < wanted:
            raise InvalidRequest(f"params.fetch_k ({fetch_k}) must be at least offset + k "
                                 f"({wanted})", field="fetch_k")

    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome:
        strategy = distance(request.distance_strategy)
        fetch_k = max(self.fetch_k(request), k)
        lambda_mult = self.param(request, "lambda_mult")
        threshold = self.param(request, "threshold")
        if (nothing := self.wordless(pipeline, request)) is not None:
            return nothing
        vector, embed_ms = self.query_vector(pipeline, request, context)
        candidates = self.nearest(conn, pipeline, scope, vector, strategy, fetch_k, with_vectors=True)
        if threshold is not None:
            candidates = [c for c in candidates if c["score"] <= threshold]
        order, values = select(vector, candidates, strategy, lambda_mult, k)
        rows = []
        for i, value in zip(order, values):
            record = dict(candidates[i])
            record.pop("vector")
            rows.append(Row(**record, mmr_score=value))
        return Outcome(rows, {"embedder": pipeline.embedder, "distance_strategy": strategy.name,
                              "embed_ms": round(embed_ms, 3), "fetch_k": fetch_k,
                              "candidates": len(candidates), "lambda_mult": lambda_mult,
                              "rows": len(rows)})


def _array(value: Any) -> np.ndarray:
    """pgvector's Vector (or a plain sequence) as float64."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float64)


def pairwise_distances(a: np.ndarray, b: np.ndarray, strategy: Distance) -> np.ndarray:
    """Distances between rows of a and b, as pgvector computes them."""
    if strategy.name == "cosine":
        norms = np.linalg.norm(a, axis=1)[:, None] * np.linalg.norm(b, axis=1)[None, :]
        return 1.0 - (a @ b.T) / np.maximum(norms, 1e-12)
    if strategy.name == "dot-product":
        return -(a @ b.T)
    return np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0))


def select(query: np.ndarray, candidates: list[dict], strategy: Distance, lambda_mult: float,
           k: int) -> tuple[list[int], list[float]]:
    """Greedy MMR; returns candidate indexes in selection order and their MMR values."""
    if not candidates or k == 0:
        return [], []
    vectors = np.vstack([_array(c["vector"]) for c in candidates])
    relevance = strategy.similarity(np.asarray([c["score"] for c in candidates], dtype=np.float64))
    among = strategy.similarity(pairwise_distances(vectors, vectors, strategy))
    chosen: list[int] = []
    values: list[float] = []
    redundancy = np.full(len(candidates), -np.inf)
    for _ in range(min(k, len(candidates))):
        penalty = np.where(np.isfinite(redundancy), redundancy, 0.0) if chosen else 0.0
        mmr = lambda_mult * relevance - (1.0 - lambda_mult) * penalty
        mmr[chosen] = -np.inf
        best = int(np.argmax(mmr))
        chosen.append(best)
        values.append(float(mmr[best]))
        redundancy = np.maximum(redundancy, among[:, best])
    return chosen, values
