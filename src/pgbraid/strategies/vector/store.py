"""Vector storage: per-pipeline HNSW indexes and the distance strategies they serve.

Each pipeline with an embedder gets one HNSW index per distance strategy on
``embedding::vector(dimension)``, partial on its pipeline and current rows, so
the planner uses it for ``ORDER BY embedding::vector(d) <op> query LIMIT k``
and pipelines of different dimensions share one table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from ...errors import InvalidRequest
from ...models import shown


@dataclass(frozen=True)
class Distance:
    name: str
    operator: str
    opclass: str
    description: str

    def similarity(self, distances: np.ndarray) -> np.ndarray:
        """Turn this strategy's distances into similarities (higher = closer) on one scale."""
        if self.name == "cosine":
            return 1.0 - distances          # cosine similarity
        if self.name == "dot-product":
            return -distances               # the inner product
        return -distances                   # euclidean: closeness as negative distance


DISTANCES = {d.name: d for d in [
    Distance("cosine", "<=>", "vector_cosine_ops", "1 - cosine similarity: 0 (same direction) to 2"),
    Distance("euclidean-distance", "<->", "vector_l2_ops", "L2 distance: 0 (identical) upward"),
    Distance("dot-product", "<#>", "vector_ip_ops", "negative inner product: lower is closer"),
]}


def distance(name: str) -> Distance:
    found = DISTANCES.get(name)
    if found is None:
        raise InvalidRequest(f"unknown distance_strategy {shown(name)}; use one of "
                             f"{', '.join(DISTANCES)} (max-inner-product is not supported)",
                             field="distance_strategy")
    return found


def index_name(pipeline_id: int, strategy: Distance) -> sql.Identifier:
    return sql.Identifier(f"embeddings_p{pipeline_id}_{strategy.opclass.split('_')[1]}")


def create_indexes(conn: psycopg.Connection, pipeline_id: int, dimension: int) -> None:
    """The three HNSW indexes of a pipeline (m=16, ef_construction=64, pgvector's defaults)."""
    for strategy in DISTANCES.values():
        conn.execute(sql.SQL(
            "CREATE INDEX IF NOT EXISTS {name} ON pgbraid.embeddings USING hnsw"
            " ((embedding::vector({dim})) {opclass}) WHERE pipeline_id = {pipeline} AND current"
        ).format(name=index_name(pipeline_id, strategy), dim=sql.Literal(dimension),
                 opclass=sql.Identifier(strategy.opclass), pipeline=sql.Literal(pipeline_id)))


def drop_indexes(conn: psycopg.Connection, pipeline_id: int) -> None:
    for strategy in DISTANCES.values():
        conn.execute(sql.SQL("DROP INDEX IF EXISTS pgbraid.{}").format(index_name(pipeline_id, strategy)))


MAX_DIMENSION = 16_000  # pgvector's limit for the vector type


def check_vector(values: object, dimension: int | None, what: str, *,
                 nonzero: bool = False) -> np.ndarray:
    """A supplied vector: a list of ``dimension`` (any, when None) numbers, finite as float32,
    and not all zero when ``nonzero`` (the cosine distance of a zero vector is NaN)."""
    if (not isinstance(values, (list, tuple)) or not values or len(values) > MAX_DIMENSION
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise InvalidRequest(f"{what} must be a list of 1 to {MAX_DIMENSION} numbers", field=what)
    if dimension is not None and len(values) != dimension:
        raise InvalidRequest(f"{what} has {len(values)} dimensions; the pipeline's embedder has "
                             f"{dimension}", field=what)
    try:
        vector = np.asarray(values, dtype=np.float64)
    except OverflowError:  # an int beyond float range
        vector = np.asarray([math.inf])
    if not np.isfinite(vector).all() or np.abs(vector).max() > np.finfo(np.float32).max:
        raise InvalidRequest(f"{what} contains NaN or infinity (or a value beyond float32)",
                             field=what)
    if nonzero and not np.any(vector):
        raise InvalidRequest(f"{what} is all zeros: it has no direction, so its cosine "
                             "distance to anything is undefined", field=what)
    return vector.astype(np.float32)
