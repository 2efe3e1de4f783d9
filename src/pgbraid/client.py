"""The composition root: ``connect()`` wires settings, server, database and engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from . import documents, embedders, graph, grounding, pipelines, sources, vectors
from .config import Settings
from .db.database import Database
from .db.server import EmbeddedServer
from .engine import Engine
from .errors import InvalidRequest, NotEnabled
from .ingest.readers import FieldMap, ReadError, SourceDocument, document_from_record, read
from .ingest.writer import IngestReport, ingest, remove_document
from .models import PipelineInfo, SearchResponse, parse_classifications, validate_name
from .scope import CLOSE_CLASSIFICATIONS, resolve_classifications
from .strategies.base import Context
from .strategies.bm25_postings import PostingsCache
from .strategies.query_language import QueryLanguages

ANALYZE_AFTER = 1_000


class Client:
    """A tenant's handle on pgbraid: pipelines, ingestion, search, document reads."""

    def __init__(self, db: Database, settings: Settings, server: EmbeddedServer | None) -> None:
        self.db = db
        self.settings = settings
        self.server = server
        self.tenant = validate_name("tenant", settings.tenant)
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            cache_bytes = self.settings.postings_cache_mb * 1024 * 1024
            context = Context(pgsearch=self.settings.pgsearch, age=self.settings.age,
                              embedder=self.embedder,
                              postings=PostingsCache(cache_bytes) if cache_bytes > 0 else None,
                              languages=QueryLanguages())
            self._engine = Engine(self.db, tenant=self.tenant, context=context,
                                  max_query_chars=self.settings.max_query_chars,
                                  max_k=self.settings.max_k)
        return self._engine

    def session(self):
        return self.db.session(self.tenant)

    # -- pipelines ------------------------------------------------------------

    def create_pipeline(self, name: str, *, embedder: str = "minilm", **options: Any) -> PipelineInfo:
        """Create a pipeline; ``embedder`` is minilm (default), e5-multilingual, openai or none."""
        chosen = embedders.validate_name(embedder)
        dimension = None
        if chosen:
            self.db.open()
            if "vector" not in self.db.extensions:
                raise NotEnabled("pgvector is not installed on this server: create the pipeline "
                                 "with embedder 'none'", strategy="similarity")
            dimension = embedders.DIMENSIONS.get(chosen) or self.embedder(chosen).dimension
        with self.session() as conn:
            pipeline = pipelines.create(conn, name, embedder=chosen, dimension=dimension, **options)
        if chosen:
            try:
                with self.db.admin() as conn:  # index DDL needs the table owner
                    vectors.create_indexes(conn, pipeline.id, dimension)
            except Exception:
                self.delete_pipeline(name)
                raise
        return self.pipeline(name)

    def delete_pipeline(self, name: str) -> None:
        with self.session() as conn:
            pipeline = pipelines.get(conn, name)
            pipelines.delete(conn, name)
        if pipeline.embedder:
            with self.db.admin() as conn:
                vectors.drop_indexes(conn, pipeline.id)

    def embedder(self, name: str) -> embedders.Embedder:
        """The named embedder, loaded once per process (openai settings from PGBRAID_OPENAI_*)."""
        if name == "openai":
            s = self.settings
            return embedders.get(name, url=s.openai_url, model=s.openai_model, key=s.openai_key,
                                 timeout=str(s.openai_timeout))
        return embedders.get(name)

    def pipelines(self) -> list[PipelineInfo]:
        with self.session() as conn:
            return [pipelines.info(conn, p) for p in pipelines.list_all(conn)]

    def pipeline(self, name: str) -> PipelineInfo:
        with self.session() as conn:
            return pipelines.info(conn, pipelines.get(conn, name))

    def define_classification(self, name: str, implies: Iterable[str] = ()) -> None:
        """Declare that holding ``name`` also grants ``implies`` (e.g. secret -> internal)."""
        (name,) = parse_classifications([name])
        implied = list(parse_classifications(list(implies))) if implies else []
        with self.session() as conn:
            # One definition at a time per tenant, so each recomputation of the
            # closures sees every definition committed before it.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgbraid.classifications'),"
                         " hashtext(current_setting('pgbraid.tenant')))")
            conn.execute(
                "INSERT INTO pgbraid.classifications (name, implies) VALUES (%s, %s)"
                " ON CONFLICT (tenant_id, name) DO UPDATE SET implies = EXCLUDED.implies",
                (name, implied))
            conn.execute(CLOSE_CLASSIFICATIONS)

    # -- ingestion ------------------------------------------------------------

    def ingest(self, pipeline: str, source: Iterable[Path | str] | Iterable[dict[str, Any]], *,
               fields: FieldMap = FieldMap(), on_error: Literal["continue", "stop"] = "continue",
               progress: Callable[[IngestReport], None] | None = None) -> IngestReport:
        """Ingest files/folders (paths) or records (dicts in the JSONL format)."""
        with self.session() as conn:
            target = pipelines.get(conn, pipeline)
        embedder = self.embedder(target.embedder) if target.embedder else None
        report = ingest(self.session, target, _items(source, fields), embedder=embedder,
                        on_error=on_error, progress=progress)
        if report.fragments >= ANALYZE_AFTER:
            # Fresh planner statistics, so searches right after a bulk load plan well.
            with self.db.admin() as conn:
                conn.execute("ANALYZE pgbraid.fragments, pgbraid.versions, pgbraid.documents,"
                             " pgbraid.bm25_postings")
        return report

    def delete_document(self, pipeline: str, document_id: str) -> bool:
        """Expire a document's current version (earlier ones stay readable); False if none."""
        with self.session() as conn:
            target = pipelines.get(conn, pipeline)
        return remove_document(self.session, target, document_id)

    # -- reads ----------------------------------------------------------------

    def search(self, pipeline: str, query: str | None = None, **request: Any) -> SearchResponse:
        body = dict(request)
        if query is not None:
            body["query"] = query
        return self.engine.search(pipeline, body)

    def document(self, pipeline: str, document_id: str, *, version: int | None = None,
                 as_of=None, classification: Any = None) -> dict[str, Any]:
        held = parse_classifications(classification)
        with self.session() as conn:
            target = pipelines.get(conn, pipeline)
            return documents.read(conn, target, document_id, version=version, as_of=as_of,
                                  classifications=resolve_classifications(conn, held))

    def versions(self, pipeline: str, document_id: str) -> list[dict[str, Any]]:
        with self.session() as conn:
            return documents.versions(conn, pipelines.get(conn, pipeline), document_id)

    # -- graph ----------------------------------------------------------------------

    def load_graph(self, pipeline: str, *, vertices: Path | str | None = None,
                   edges: Path | str | None = None) -> dict[str, int]:
        """Load vertex and edge files (JSONL or TSV), all or nothing."""
        data = graph.GraphLoad()
        if vertices:
            graph.read_vertices(Path(vertices), data)
        if edges:
            graph.read_edges(Path(edges), data)
        with self.session() as conn:
            return graph.load(conn, pipelines.get(conn, pipeline).id, data)

    def load_graph_records(self, pipeline: str, vertices: list[tuple] = (),
                           edges: list[tuple] = ()) -> dict[str, int]:
        """Load in-memory vertices (type, key, label, documents) and edges
        (src_type, src, type, dst_type, dst[, weight])."""
        data = graph.GraphLoad(vertices=[(t, str(k), l, list(d)) for t, k, l, d in vertices])
        for n, edge in enumerate(edges, start=1):
            weight = float(edge[5]) if len(edge) > 5 else 1.0
            if (edge[0], str(edge[1])) == (edge[3], str(edge[4])):
                data.errors.append(f"record {n}: self-loop on {edge[0]}:{edge[1]}")
            data.edges.append((edge[0], str(edge[1]), edge[2], edge[3], str(edge[4]), weight, True,
                               f"record {n}"))
        with self.session() as conn:
            return graph.load(conn, pipelines.get(conn, pipeline).id, data)

    def delete_vertex(self, pipeline: str, vertex_type: str, key: str) -> None:
        with self.session() as conn:
            graph.delete_vertex(conn, pipelines.get(conn, pipeline).id, vertex_type, key)

    def graph_summary(self, pipeline: str) -> dict[str, Any]:
        with self.session() as conn:
            return graph.summary(conn, pipelines.get(conn, pipeline).id)

    # -- entity sources and grounding ----------------------------------------------

    def add_source(self, name: str, *, table: str, key: str, text: list[str] | str,
                   scope: list[str] | str = (), schema: str = "public", language: str = "english",
                   create_indexes: bool = False) -> dict[str, Any]:
        """Register a table of your own as an entity source (checked against the catalog)."""
        text = [text] if isinstance(text, str) else list(text)
        scope = [scope] if isinstance(scope, str) else list(scope)
        with self.db.admin() as admin:
            source = sources.check(admin, name, table=table, key=key, text=text, scope=scope,
                                   schema=schema, language=language)
        with self.session() as conn:
            sources.add(conn, source)
        if create_indexes:
            with self.db.admin() as admin:
                sources.create_indexes(admin, source)
        return self.source(name)

    def source(self, name: str) -> dict[str, Any]:
        with self.session() as conn:
            source = sources.get(conn, name)
        with self.db.admin() as admin:
            missing = sources.missing_indexes(admin, source)
        return {**source.as_dict(), "missing_indexes": missing}

    def sources(self) -> list[dict[str, Any]]:
        with self.session() as conn:
            return [s.as_dict() for s in sources.list_all(conn)]

    def search_source(self, name: str, query: str, *, type: str = "fuzzy",
                      scope: dict[str, Any] | None = None, k: int = 10) -> list[dict[str, Any]]:
        """fuzzy, fulltext, bm25 (or exact) over an entity source's text within scope values."""
        if type not in grounding.TEMPLATES:
            raise InvalidRequest(f"type must be one of {', '.join(grounding.TEMPLATES)}", field="type")
        if not isinstance(k, int) or not 1 <= k <= self.settings.max_k:
            raise InvalidRequest(f"k must be from 1 to {self.settings.max_k}", field="k")
        with self.session() as conn:
            source = sources.get(conn, name)
        with self.db.admin() as admin:
            return grounding.candidates(admin, source, type, query, scope or {},
                                        self.settings.statement_timeout_ms, limit=k)

    def ground(self, entity: str, value: str, *, scope: dict[str, Any] | None = None,
               strategies: list[str] | None = None) -> dict[str, Any]:
        """Resolve value to one entity: resolved, clarification_needed or not_found."""
        def load():
            with self.session() as conn:
                return sources.get(conn, entity), self.db.admin
        return grounding.ground(load, entity, value, scope=scope, strategies=strategies,
                                gates=grounding.Gates(pgsearch=self.settings.pgsearch),
                                timeout_ms=self.settings.statement_timeout_ms)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _items(source: Iterable[Any], fields: FieldMap) -> Iterable[SourceDocument | ReadError]:
    paths: list[Path] = []
    for item in source:
        if isinstance(item, dict):
            try:
                yield document_from_record(item, fields, source=f"record {item.get(fields.id)!r}")
            except InvalidRequest as exc:  # reported per record, not raised
                yield ReadError(f"record {item.get(fields.id)!r}", exc.message)
        else:
            paths.append(Path(item))
    if paths:
        yield from read(paths, fields)


def connect(dsn: str | None = None, *, data_dir: Path | str | None = None,
            tenant: str | None = None, **overrides: Any) -> Client:
    """Connect to ``dsn`` / ``PGBRAID_DSN``, or start (or attach to) the embedded server."""
    values = {k: v for k, v in {"dsn": dsn, "data_dir": data_dir, "tenant": tenant,
                                **overrides}.items() if v is not None}
    settings = Settings(**values)
    server = None
    if settings.dsn:
        target = settings.dsn
    else:
        server = EmbeddedServer(settings.resolved_data_dir())
        target = server.start().dsn
    db = Database(target, statement_timeout_ms=settings.statement_timeout_ms)
    return Client(db, settings, server)
