"""What a Client does with a pipeline's graph (loads, deletions, its summary) and with
entity sources (your own tables: register, remove, look up) and grounding over them.
A base of ``client.Client`` (which holds ``_db``, ``principal``, ``settings`` and
``_session``); kept apart so each file stays short."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import audit, grounding, pipelines, source_schemas, sources
from .errors import InvalidRequest, PayloadTooLarge
from .models import check_text, number, printable, validate_name
from .scope import ANY_PIPELINE
from .strategies.graph import store as graph


class Entities:
    """Mixed into Client."""

    # -- graph ----------------------------------------------------------------------

    def load_graph(self, pipeline: str, *, vertices: Path | str | None = None,
                   edges: Path | str | None = None) -> dict[str, int]:
        """Load vertex and edge files (JSONL or TSV), all or nothing."""
        self.principal.require(pipeline, "write")
        data = graph.GraphLoad()
        if vertices:
            graph.read_vertices(Path(vertices), data)
        if edges:
            graph.read_edges(Path(edges), data)
        with self._session() as conn:
            loaded = graph.load(conn, pipelines.get(conn, pipeline).id, data, age=self.settings.age)
            audit.record(conn, self.principal, "graph.load", pipeline, loaded)
            return loaded

    def load_graph_records(self, pipeline: str, vertices: list[tuple] = (),
                           edges: list[tuple] = ()) -> dict[str, int]:
        """Load in-memory vertices (type, key, label, documents) and edges
        (src_type, src, type, dst_type, dst[, weight[, directed]]), all or nothing."""
        self.principal.require(pipeline, "write")
        data = graph.from_records(vertices, edges)
        with self._session() as conn:
            loaded = graph.load(conn, pipelines.get(conn, pipeline).id, data, age=self.settings.age)
            audit.record(conn, self.principal, "graph.load", pipeline, loaded)
            return loaded

    def delete_vertex(self, pipeline: str, vertex_type: str, key: str) -> None:
        self.principal.require(pipeline, "write")
        with self._session() as conn:
            graph.delete_vertex(conn, pipelines.get(conn, pipeline).id, vertex_type, key,
                                age=self.settings.age)
            audit.record(conn, self.principal, "graph.delete", pipeline,
                         {"type": vertex_type, "key": key})

    def graph_summary(self, pipeline: str) -> dict[str, Any]:
        self.principal.require(pipeline, "read")
        with self._session() as conn:
            return graph.summary(conn, pipelines.get(conn, pipeline).id)

    # -- entity sources and grounding ----------------------------------------------

    def add_source(self, name: str, *, table: str, key: str, text: list[str] | str,
                   scope: list[str] | str = (), schema: str = "public", language: str = "english",
                   create_indexes: bool = False) -> dict[str, Any]:
        """Register a table of your own as an entity source (checked against the catalog), and
        grant the tenant's source role SELECT on it: all or nothing."""
        self.principal.require_unrestricted_admin("registering an entity source")
        text = [text] if isinstance(text, str) else list(text)
        scope = [scope] if isinstance(scope, str) else list(scope)
        allowed = source_schemas.allowed_schemas(self.settings.source_schemas, self.tenant,
                                                 embedded=not self.settings.dsn)
        with self._session() as conn:
            source = sources.check(conn, self.tenant, name, table=table, key=key, text=text,
                                   scope=scope, schema=schema, language=language, allowed=allowed)
            sources.add(conn, source)
            audit.record(conn, self.principal, "source.register", name,
                         {"table": f"{schema}.{table}", "key": key, "text": text, "scope": scope})
            # Inside the session: if the grant or an index fails, the registration rolls back.
            with self._db.admin() as admin:
                sources.provision(admin, source, indexes=create_indexes, allowed=allowed)
        return self.source(name)

    def remove_source(self, name: str) -> None:
        """Unregister a source: drop its indexes, revoke the grants no other source needs."""
        self.principal.require_unrestricted_admin("removing an entity source")
        validate_name("entity source", name)
        with self._session() as conn:
            retired = sources.remove(conn, name)
            audit.record(conn, self.principal, "source.remove", name)
            with self._db.admin() as admin:
                sources.retire(admin, retired)

    def source(self, name: str) -> dict[str, Any]:
        self.principal.require(ANY_PIPELINE, "read")
        validate_name("entity source", name)
        with self._session() as conn:
            source = sources.get(conn, name)
        with sources.reading(self._db, source) as conn:
            missing = sources.missing_indexes(conn, source)
        return {**source.as_dict(), "missing_indexes": missing}

    def sources(self) -> list[dict[str, Any]]:
        self.principal.require(ANY_PIPELINE, "read")
        with self._session() as conn:
            return [s.as_dict() for s in sources.list_all(conn)]

    def search_source(self, name: str, query: str, *, type: str = "fuzzy",
                      scope: dict[str, Any] | None = None, k: int = 10) -> list[dict[str, Any]]:
        """fuzzy, fulltext, bm25 (or exact) over an entity source's text within scope values."""
        self.principal.require(ANY_PIPELINE, "read", "execute")
        if type not in grounding.TEMPLATES:
            raise InvalidRequest(f"type must be one of {', '.join(grounding.TEMPLATES)}",
                                 field="type")
        number({"k": k}, "k", 10, 1, self.settings.max_k, integer=True, label="k")
        if isinstance(query, str) and len(query) > grounding.MAX_VALUE_CHARS:
            raise PayloadTooLarge(f"the query must be at most {grounding.MAX_VALUE_CHARS} "
                                  "characters", field="query")
        _check_lookup(name, query, scope)
        with self._session() as conn:
            source = sources.get(conn, name)
        with sources.reading(self._db, source) as conn:
            return grounding.candidates(conn, source, type, query, scope or {}, limit=k)

    def ground(self, entity: str, value: str, *, scope: dict[str, Any] | None = None,
               strategies: list[str] | None = None) -> dict[str, Any]:
        """Resolve value to one entity: resolved, clarification_needed or not_found."""
        self.principal.require(ANY_PIPELINE, "read", "execute")
        _check_lookup(entity, value, scope)

        def load():
            with self._session() as conn:
                source = sources.get(conn, entity)
            return source, lambda: sources.reading(self._db, source)
        return grounding.ground(load, entity, value, scope=scope, strategies=strategies,
                                gates=grounding.Gates(pgsearch=self.settings.pgsearch))


def _check_lookup(entity: str, value: Any, scope: dict[str, Any] | None) -> None:
    """An entity source lookup's name, value and scope values, before any statement."""
    validate_name("entity source", entity)
    if isinstance(value, str):
        check_text(value, "the value", "value")
    for column, wanted in (scope or {}).items():
        if isinstance(wanted, str):
            check_text(wanted, f"scope value of {printable(str(column), 40)}", "scope")
