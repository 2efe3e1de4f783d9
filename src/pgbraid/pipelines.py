"""Pipelines: named collections with their settings, owned by a tenant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row

from .errors import Conflict, InvalidRequest, NotFound
from .ingest.language import CONFIG_NAMES, config_for
from .models import PipelineInfo, shown, validate_name

_COLUMNS = ("SELECT id, tenant_id AS tenant, name, fulltext, language::text AS language, embedder,"
            " dimension, chunk_size, settings, created_at FROM pgbraid.pipelines")


@dataclass(frozen=True)
class Pipeline:
    id: int
    tenant: str
    name: str
    fulltext: bool
    language: str
    embedder: str | None
    dimension: int | None
    chunk_size: int
    settings: dict[str, Any]
    created_at: datetime


def create(conn: psycopg.Connection, name: str, *, fulltext: bool = True, language: str = "english",
           chunk_size: int = 1000, embedder: str | None = None,
           dimension: int | None = None) -> Pipeline:
    validate_name("pipeline", name)
    config = config_for(language)
    if config is None:
        raise InvalidRequest(
            f"unknown language {shown(language)}; use one of {', '.join(sorted(CONFIG_NAMES))}",
            field="language")
    if not 200 <= chunk_size <= 20_000:
        raise InvalidRequest("chunk_size must be between 200 and 20000 characters", field="chunk_size")
    row = conn.execute(
        "INSERT INTO pgbraid.pipelines (name, fulltext, language, chunk_size, embedder, dimension)"
        " VALUES (%s, %s, %s::regconfig, %s, %s, %s) ON CONFLICT (tenant_id, name) DO NOTHING"
        " RETURNING id", (name, fulltext, config, chunk_size, embedder, dimension)).fetchone()
    if row is None:
        raise Conflict(f"pipeline {name!r} already exists", field="name")
    conn.execute("INSERT INTO pgbraid.bm25_stats (pipeline_id) VALUES (%s)", (row[0],))
    return get(conn, name)


def get(conn: psycopg.Connection, name: str) -> Pipeline:
    validate_name("pipeline", name)
    with conn.cursor(row_factory=class_row(Pipeline)) as cur:
        pipeline = cur.execute(_COLUMNS + " WHERE name = %s", (name,)).fetchone()
    if pipeline is None:
        raise NotFound(f"pipeline {name!r} does not exist", pipeline=name)
    return pipeline


def get_resolving(conn: psycopg.Connection, name: str,
                  held: tuple[str, ...]) -> tuple[Pipeline, tuple[str, ...]]:
    """The pipeline and the resolved classifications, in one statement."""
    from .scope import RESOLVE_CLASSIFICATIONS

    validate_name("pipeline", name)
    statement = sql.SQL("SELECT p.*, ({resolve}) AS held FROM ({pipeline} WHERE name = %(name)s) AS p"
                        ).format(resolve=sql.SQL(RESOLVE_CLASSIFICATIONS), pipeline=sql.SQL(_COLUMNS))
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(statement, {"held": list(held), "name": name}).fetchone()
    if row is None:
        raise NotFound(f"pipeline {name!r} does not exist", pipeline=name)
    resolved = row.pop("held")
    return Pipeline(**row), tuple(resolved or ())


def delete(conn: psycopg.Connection, name: str) -> None:
    """Delete a pipeline with its documents, versions, fragments and index data."""
    pipeline = get(conn, name)
    conn.execute("DELETE FROM pgbraid.pipelines WHERE id = %s", (pipeline.id,))


def list_all(conn: psycopg.Connection) -> list[Pipeline]:
    with conn.cursor(row_factory=class_row(Pipeline)) as cur:
        return cur.execute(_COLUMNS + " ORDER BY name").fetchall()


def info(conn: psycopg.Connection, pipeline: Pipeline) -> PipelineInfo:
    documents, versions, fragments = conn.execute(
        "SELECT (SELECT count(*) FROM pgbraid.documents WHERE pipeline_id = %(p)s"
        "          AND current_version IS NOT NULL),"
        "       (SELECT count(*) FROM pgbraid.versions v JOIN pgbraid.documents d"
        "          ON d.id = v.document_id WHERE d.pipeline_id = %(p)s),"
        "       (SELECT count(*) FROM pgbraid.fragments WHERE pipeline_id = %(p)s"
        "          AND current AND NOT quarantined)", {"p": pipeline.id}).fetchone()
    return PipelineInfo(
        name=pipeline.name, tenant=pipeline.tenant, fulltext=pipeline.fulltext,
        language=pipeline.language, embedder=pipeline.embedder, dimension=pipeline.dimension,
        chunk_size=pipeline.chunk_size, created_at=pipeline.created_at.isoformat(),
        documents=documents, versions=versions, fragments=fragments)
