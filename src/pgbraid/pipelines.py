"""Pipelines: named collections with their settings, owned by a tenant."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb

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
    keyring: Any = field(default=None, compare=False, repr=False)
    """The keyring that opens an encrypted pipeline's values (encryption.py), bound by
    the engine and the client; None where nothing is sealed or opened."""
    bound: Any = field(default=None, compare=False, repr=False)
    """The writer's classification bound (ingest/guard.WriteBound), bound by the client
    for a write; None: the writer is unbounded."""


def create(conn: psycopg.Connection, name: str, *, fulltext: bool = True, language: str = "english",
           chunk_size: int = 1000, embedder: str | None = None,
           dimension: int | None = None, encryption: dict[str, Any] | None = None) -> Pipeline:
    """``encryption``: an encrypted pipeline's settings (encryption.settings_for)."""
    validate_name("pipeline", name)
    config = config_for(language)
    if config is None:
        raise InvalidRequest(
            f"unknown language {shown(language)}; use one of {', '.join(sorted(CONFIG_NAMES))}",
            field="language")
    if not 200 <= chunk_size <= 20_000:
        raise InvalidRequest("chunk_size must be between 200 and 20000 characters", field="chunk_size")
    row = conn.execute(
        "INSERT INTO pgbraid.pipelines (name, fulltext, language, chunk_size, embedder, dimension,"
        " settings) VALUES (%s, %s, %s::regconfig, %s, %s, %s, %s)"
        " ON CONFLICT (tenant_id, name) DO NOTHING RETURNING id",
        (name, fulltext, config, chunk_size, embedder, dimension,
         Jsonb({"encryption": encryption} if encryption else {}))).fetchone()
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


def get_resolving(conn: psycopg.Connection, name: str, held: tuple[str, ...],
                  bound: tuple[str, ...] | None = None
                  ) -> tuple[Pipeline, tuple[str, ...], tuple[str, ...] | None]:
    """The pipeline, the held classifications resolved through their hierarchy, and
    (when given) the resolved bound of what the principal may hold; one statement."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(*resolving(name, held, bound)).fetchone()
    return resolved(row, name, bound)


def resolving(name: str, held: tuple[str, ...], bound: tuple[str, ...] | None = None
              ) -> tuple[sql.Composable, dict[str, Any]]:
    """get_resolving's statement, for a caller that sends it in a pipeline (dict rows)."""
    from .scope import RESOLVE_CLASSIFICATIONS

    validate_name("pipeline", name)
    statement = sql.SQL("SELECT p.*, ({held}) AS held, ({bound}) AS bound"
                        " FROM ({pipeline} WHERE name = %(name)s) AS p").format(
        held=sql.SQL(RESOLVE_CLASSIFICATIONS),
        bound=sql.SQL(RESOLVE_CLASSIFICATIONS.replace("%(held)s", "%(bound)s")),
        pipeline=sql.SQL(_COLUMNS))
    return statement, {"held": list(held), "bound": list(bound or ()), "name": name}


def resolved(row: dict[str, Any] | None, name: str, bound: tuple[str, ...] | None
             ) -> tuple[Pipeline, tuple[str, ...], tuple[str, ...] | None]:
    """get_resolving's answer from its statement's row."""
    if row is None:
        raise NotFound(f"pipeline {name!r} does not exist", pipeline=name)
    row = dict(row)
    held, limit = row.pop("held"), row.pop("bound")
    return Pipeline(**row), tuple(held or ()), (tuple(limit or ()) if bound is not None else None)


def delete(conn: psycopg.Connection, name: str) -> None:
    """Delete a pipeline with its documents, versions, fragments and index data."""
    pipeline = get(conn, name)
    conn.execute("DELETE FROM pgbraid.pipelines WHERE id = %s", (pipeline.id,))


def list_all(conn: psycopg.Connection) -> list[Pipeline]:
    with conn.cursor(row_factory=class_row(Pipeline)) as cur:
        return cur.execute(_COLUMNS + " ORDER BY name").fetchall()


_COUNTS = """
WITH d AS (SELECT pipeline_id, id, current_version FROM pgbraid.documents
           WHERE pipeline_id = ANY(%(p)s) AND NOT quarantined),
     v AS (SELECT v.pipeline_id, count(*) FILTER (WHERE v.version = d.current_version) AS documents,
                  count(*) AS versions
           FROM pgbraid.versions v JOIN d ON d.pipeline_id = v.pipeline_id AND d.id = v.document_id
           WHERE v.pipeline_id = ANY(%(p)s) AND v.classifications && %(c)s
           GROUP BY v.pipeline_id),
     f AS (SELECT pipeline_id, count(*) AS fragments FROM pgbraid.fragments
           WHERE pipeline_id = ANY(%(p)s) AND current AND NOT quarantined
             AND classifications && %(c)s
           GROUP BY pipeline_id)
SELECT p.id, coalesce(v.documents, 0), coalesce(v.versions, 0), coalesce(f.fragments, 0)
FROM unnest(%(p)s::bigint[]) AS p(id) LEFT JOIN v ON v.pipeline_id = p.id
LEFT JOIN f ON f.pipeline_id = p.id
"""


def infos(conn: psycopg.Connection, pipelines: list[Pipeline],
          visible: tuple[str, ...]) -> list[PipelineInfo]:
    """Each pipeline with counts of what ``visible`` (resolved) classifications see, as a
    document listing holding them lists, quarantined documents left out (they count for
    no search): one statement for all, index-only scans (migration 059) under the
    tenant's row-level security."""
    if not pipelines:
        return []
    counts = {row[0]: row[1:] for row in conn.execute(
        _COUNTS, {"p": [p.id for p in pipelines], "c": list(visible)})}
    return [_info(p, *counts[p.id]) for p in pipelines]


def info(conn: psycopg.Connection, pipeline: Pipeline, visible: tuple[str, ...]) -> PipelineInfo:
    """One pipeline's ``infos``."""
    return infos(conn, [pipeline], visible)[0]


def _info(pipeline: Pipeline, documents: int, versions: int, fragments: int) -> PipelineInfo:
    return PipelineInfo(
        name=pipeline.name, tenant=pipeline.tenant, fulltext=pipeline.fulltext,
        language=pipeline.language, embedder=pipeline.embedder, dimension=pipeline.dimension,
        chunk_size=pipeline.chunk_size, created_at=pipeline.created_at.isoformat(),
        encrypted="encryption" in pipeline.settings,
        encrypted_metadata=tuple(pipeline.settings.get("encryption", {}).get("metadata", ())),
        documents=documents, versions=versions, fragments=fragments)


def set_setting(conn: psycopg.Connection, name: str, key: str, value: Any) -> Pipeline:
    """Set (or, with None, remove) one key of a pipeline's settings."""
    pipeline = get(conn, name)
    if value is None:
        conn.execute("UPDATE pgbraid.pipelines SET settings = settings - %s WHERE id = %s",
                     (key, pipeline.id))
    else:
        conn.execute("UPDATE pgbraid.pipelines SET settings = settings || jsonb_build_object("
                     "%s::text, %s::jsonb) WHERE id = %s",
                     (key, Jsonb(value), pipeline.id))
    return get(conn, name)
