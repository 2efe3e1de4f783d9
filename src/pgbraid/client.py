"""The composition root: ``connect()`` wires settings, server, database and engine."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from pydantic import ValidationError

from . import (audit, embedders, encryption, grounding, live as live_fetch, pipelines, rotation,
               source_schemas, sources)
from .live import search as live_search
from .live.admin import LiveSources
from .strategies.graph import store as graph
from .strategies.vector import store as vectors
from .config import Settings
from .db.database import Database
from .db.replicas import Router, split_dsns
from .db.server import EmbeddedServer
from .engine import Engine
from .errors import InvalidRequest, NotEnabled, PayloadTooLarge
from .ingest import guard, quarantine
from .ingest.readers import FieldMap, items
from .ingest.batches import IngestReport, ingest
from .ingest.writer import delete_document
from .models import (PipelineInfo, SearchResponse, check_text, number, parse_as_of,
                     parse_version, printable, validate_document_id,
                     validate_name)
from .scope import ANY_PIPELINE, FilterLimits, Principal
from .strategies.base import Context
from .strategies.bm25_postings import PostingsCache
from .strategies.query_language import QueryLanguages
from .tenancy import TenantAdmin

ANALYZE_AFTER = 1_000
# ... and a tenth of the fragments the statistics last counted (autovacuum's default
# share): a bulk load into a big table leaves its statistics representative.
ANALYZE_SHARE = 0.1


@audit.audits_denials
class Client(TenantAdmin, LiveSources):
    """A principal's handle on pgbraid: pipelines, ingestion, search, document reads.

    Every call acts as ``principal`` (by default the local process, its tenant's
    admin: it holds the database's credentials anyway). There is no superuser
    handle: migrations and server management keep their own narrow paths.
    Every write is audited in its own transaction, every Forbidden a public
    method raises is audited once (``audit.audits_denials``).
    """

    def __init__(self, db: Database, settings: Settings, server: EmbeddedServer | None,
                 principal: Principal | None = None,
                 keyring: encryption.Keyring | None = None, reads: Router | None = None) -> None:
        self._db = db
        self._reads = reads
        self.settings = settings
        self.server = server
        self.keyring = keyring or encryption.Keyring.from_settings(
            settings, embedded=server is not None)
        self.principal = principal or Principal.local(validate_name("tenant", settings.tenant))
        validate_name("tenant", self.principal.tenant)
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()
        self._borrowed = False
        self._usage = audit.Usage(db)

    def acting_as(self, principal: Principal) -> "Client":
        """A client over this one's pool and engine acting as ``principal`` (the HTTP
        layer: one client per process, one principal per request). Closing it is a no-op."""
        other = Client(self._db, self.settings, self.server, principal, self.keyring, self._reads)
        other._engine, other._borrowed, other._usage = self.engine, True, self._usage
        return other

    def ready(self) -> dict[str, Any]:
        """PostgreSQL reachable and every migration applied (BackendUnavailable otherwise)."""
        self._db.ready()
        return {"status": "ready"}

    @property
    def tenant(self) -> str:
        return self.principal.tenant

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._engine_lock:  # one engine (and one postings cache) per client
                if self._engine is None:
                    self._engine = self._make_engine()
        return self._engine

    def _make_engine(self) -> Engine:
        s = self.settings
        cache_bytes = s.postings_cache_mb * 1024 * 1024
        limits = FilterLimits(depth=s.filter_max_depth, conditions=s.filter_max_conditions,
                              value_bytes=s.filter_max_value_bytes, total_bytes=s.filter_max_bytes)
        context = Context(pgsearch=s.pgsearch, textsearch=s.textsearch, age=s.age,
                          embedder=self.embedder,
                          postings=PostingsCache(cache_bytes) if cache_bytes > 0 else None,
                          languages=QueryLanguages(), filter_limits=limits)
        return Engine(self._db, context=context, max_query_chars=s.max_query_chars,
                      max_k=s.max_k, keyring=self.keyring, reads=self._reads)

    def session(self):
        """A read-write transaction under the tenant's row-level security (the
        tenant's admin only: it bypasses classifications)."""
        self.principal.require_tenant_admin("a raw session")
        return self._session()

    def _session(self):
        return self._db.session(self.tenant)

    # -- pipelines ------------------------------------------------------------

    def create_pipeline(self, name: str, *, embedder: str = "minilm", encrypt: bool = False,
                        encrypt_metadata: Iterable[str] | None = None, live: Any = None,
                        **options: Any) -> PipelineInfo:
        """Create a pipeline; ``embedder`` is minilm (default), e5-multilingual, openai or none;
        ``encrypt``: text, titles and ``encrypt_metadata`` fields sealed (encryption.py);
        ``live``: a live source (live.LiveSource or its dict)."""
        self.principal.require_tenant_admin("creating a pipeline")
        options["encryption"] = encryption.settings_for(self.keyring, encrypt, encrypt_metadata)
        chosen = embedders.validate_name(embedder)
        source = live_fetch.parse(live) if live is not None else None
        dimension = None
        if chosen:
            self._db.open()
            if "vector" not in self._db.extensions:
                raise NotEnabled("pgvector is not installed on this server: create the pipeline "
                                 "with embedder 'none'", strategy="similarity")
            dimension = embedders.DIMENSIONS.get(chosen) or self.embedder(chosen).dimension
        with self._session() as conn:
            pipeline = pipelines.create(conn, name, embedder=chosen, dimension=dimension, **options)
            if source is not None:
                pipelines.set_setting(conn, name, "live", source.model_dump(mode="json"))
            audit.record(conn, self.principal, "pipeline.create", name,
                         {"embedder": chosen, **{k: str(v) for k, v in options.items()}})
        if chosen:
            try:
                with self._db.admin() as conn:  # index DDL needs the table owner
                    vectors.create_indexes(conn, pipeline.id, dimension)
            except Exception:
                self.delete_pipeline(name)
                raise
        return self.pipeline(name)

    def delete_pipeline(self, name: str) -> None:
        self.principal.require(name, "admin")
        with self._session() as conn:
            pipeline = pipelines.get(conn, name)
            pipelines.delete(conn, name)
            audit.record(conn, self.principal, "pipeline.delete", name)
        if pipeline.embedder:
            with self._db.admin() as conn:
                vectors.drop_indexes(conn, pipeline.id)

    def embedder(self, name: str) -> embedders.Embedder:
        """The named embedder, loaded once per process (openai settings from PGBRAID_OPENAI_*)."""
        if name == "openai":
            s = self.settings
            return embedders.get(name, url=s.openai_url, model=s.openai_model, key=s.openai_key,
                                 timeout=str(s.openai_timeout))
        return embedders.get(name)

    def pipelines(self) -> list[PipelineInfo]:
        return self.engine.pipelines(self.principal)

    def pipeline(self, name: str) -> PipelineInfo:
        return self.engine.pipeline(self.principal, name)

    # -- ingestion ------------------------------------------------------------

    def ingest(self, pipeline: str, source: Iterable[Path | str] | Iterable[dict[str, Any]], *,
               fields: FieldMap = FieldMap(), on_error: Literal["continue", "stop"] = "continue",
               progress: Callable[[IngestReport], None] | None = None) -> IngestReport:
        """Ingest files/folders (paths) or records (dicts in the JSONL format)."""
        self.principal.require(pipeline, "write")
        with self._session() as conn:
            target = dataclasses.replace(pipelines.get(conn, pipeline), keyring=self.keyring,
                                         bound=guard.bound_for(conn, self.principal))
        embedder = self.embedder(target.embedder) if target.embedder else None
        try:
            report = ingest(self._session, target, live_fetch.reserved(items(source, fields)),
                            embedder=embedder, on_error=on_error, progress=progress)
        except BaseException as exc:  # batches before the error are written: say so
            audit.record_quietly(self._db, self.principal, "document.ingest", pipeline,
                                 {"error": type(exc).__name__})
            raise
        finally:
            guard.audit_refused(self._usage, self.principal, target.bound, pipeline)
        audit.record(self._db, self.principal, "document.ingest", pipeline, {
            "added": report.added, "updated": report.updated, "unchanged": report.unchanged,
            "failed": len(report.failed)})
        report.lsn = self._commit_lsn()
        if report.fragments >= ANALYZE_AFTER:
            # Fresh planner statistics, so searches right after a bulk load plan well.
            with self._db.admin() as conn:
                counted = conn.execute("SELECT reltuples FROM pg_class"
                                       " WHERE oid = 'pgbraid.fragments'::regclass").fetchone()[0]
                if report.fragments >= ANALYZE_SHARE * max(counted, 0):
                    conn.execute("ANALYZE pgbraid.fragments, pgbraid.versions,"
                                 " pgbraid.documents, pgbraid.bm25_postings")
        return report

    def delete_document(self, pipeline: str, document_id: str) -> dict[str, Any]:
        """Expire a document's current version; its history stays readable."""
        self.principal.require(pipeline, "write")
        with self._session() as conn:
            target = dataclasses.replace(pipelines.get(conn, pipeline),
                                         bound=guard.bound_for(conn, self.principal))
            version = delete_document(conn, target, document_id)
            audit.record(conn, self.principal, "document.delete", f"{pipeline}/{document_id}",
                         {"expired_version": version})
        return {"document_id": document_id, "expired_version": version, "lsn": self._commit_lsn()}

    def _commit_lsn(self) -> str:
        """The primary's WAL position after this call's commits: a search with it as
        ``min_lsn`` reads them on any replica (db/replicas.py)."""
        with self._db.admin() as conn:
            return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

    def quarantine_document(self, pipeline: str, document_id: str, *,
                            reason: str | None = None) -> dict[str, Any]:
        """Withhold a document from every search until released (write); idempotent."""
        return self._quarantine(pipeline, document_id, True, reason)

    def release_document(self, pipeline: str, document_id: str) -> dict[str, Any]:
        """Lift a quarantine: the document searches exactly as before it (write)."""
        return self._quarantine(pipeline, document_id, False, None)

    def _quarantine(self, pipeline: str, document_id: str, quarantined: bool,
                    reason: str | None) -> dict[str, Any]:
        """Every quarantine change, both ways (ingest/quarantine.py), audited with it."""
        self.principal.require(pipeline, "write")
        reason = quarantine.check(document_id, quarantined, reason)
        with self._session() as conn:
            state = quarantine.change(conn, pipelines.get(conn, pipeline), document_id,
                                      quarantined=quarantined, reason=reason,
                                      bound=self.principal.classifications)
            if state["changed"]:
                audit.record(conn, self.principal,
                             "document.quarantine" if quarantined else "document.release",
                             f"{pipeline}/{document_id}", {"reason": reason} if reason else None)
        return {**state, "lsn": self._commit_lsn()}

    # -- reads ----------------------------------------------------------------

    def search(self, pipeline: str, query: str | None = None, **request: Any) -> SearchResponse:
        body = dict(request)
        if query is not None:
            body["query"] = query
        return live_search.search(self, pipeline, body)

    def document(self, pipeline: str, document_id: str, *, version: int | None = None,
                 as_of: Any = None, classification: Any = None) -> dict[str, Any]:
        """One version of a document: current, ``version`` N (an int from 1), or the one
        valid at ``as_of`` (a datetime or an ISO-8601 string; without an offset, UTC)."""
        validate_name("pipeline", pipeline)
        validate_document_id(document_id)
        version, as_of = parse_version(version), parse_as_of(as_of)
        return self.engine.document(self.principal, pipeline, document_id, version=version,
                                    as_of=as_of, classification=classification)

    def versions(self, pipeline: str, document_id: str, *,
                 classification: Any = None) -> list[dict[str, Any]]:
        validate_name("pipeline", pipeline)
        validate_document_id(document_id)
        return self.engine.versions(self.principal, pipeline, document_id,
                                    classification=classification)

    def documents(self, pipeline: str, *, after: str | None = None, limit: int = 100,
                  classification: Any = None) -> dict[str, Any]:
        """A page of current documents in id order: ``{"documents": [...], "next": cursor}``;
        pass ``next`` as ``after`` for the following page (None after the last)."""
        validate_name("pipeline", pipeline)
        return self.engine.documents(self.principal, pipeline, after=after, limit=limit,
                                     classification=classification)

    def fragment(self, pipeline: str, fragment_id: int, *,
                 classification: Any = None) -> dict[str, Any]:
        validate_name("pipeline", pipeline)
        return self.engine.fragment(self.principal, pipeline, fragment_id,
                                    classification=classification)

    def rotate_encryption(self, pipeline: str, *, batch_size: int = rotation.BATCH,
                          pause: float = 0.0,
                          progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Re-seal an encrypted pipeline under a new current key, in batches (rotation.py);
        run again after an interruption to finish."""
        self.principal.require(pipeline, "admin")
        done = rotation.rotate(self._db, self.tenant, pipeline, self.keyring,
                               batch_size=batch_size, pause=pause, progress=progress)
        audit.record(self._db, self.principal, "encryption.rotate", pipeline,
                     {k: done[k] for k in ("key_id", "fragments", "versions", "resumed")})
        return done

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
        self.principal.require_tenant_admin("registering an entity source")
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
        self.principal.require_tenant_admin("removing an entity source")
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
            raise InvalidRequest(f"type must be one of {', '.join(grounding.TEMPLATES)}", field="type")
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

    def replicas(self) -> list[dict[str, Any]]:
        """Each read replica's state as last sampled ([] without PGBRAID_READ_DSN)."""
        if self._reads is None:
            return []
        self._reads.open()
        return self._reads.status()

    def close(self) -> None:
        if not self._borrowed:
            self._usage.flush()
            if self._reads is not None:
                self._reads.close()
            self._db.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_lookup(entity: str, value: Any, scope: dict[str, Any] | None) -> None:
    """An entity source lookup's name, value and scope values, before any statement."""
    validate_name("entity source", entity)
    if isinstance(value, str):
        check_text(value, "the value", "value")
    for column, wanted in (scope or {}).items():
        if isinstance(wanted, str):
            check_text(wanted, f"scope value of {printable(str(column), 40)}", "scope")


def connect(dsn: str | None = None, *, data_dir: Path | str | None = None,
            tenant: str | None = None, principal: Principal | None = None,
            **overrides: Any) -> Client:
    """Connect to ``dsn`` / ``PGBRAID_DSN``, or start (or attach to) the embedded server.

    The client acts as ``principal``; by default the local process, admin of
    ``tenant`` (``PGBRAID_TENANT``, default ``default``)."""
    if principal is not None:
        tenant = principal.tenant
    values = {k: v for k, v in {"dsn": dsn, "data_dir": data_dir, "tenant": tenant,
                                **overrides}.items() if v is not None}
    settings = load_settings(**values)
    server = None
    if settings.dsn:
        target = settings.dsn
    else:
        server = EmbeddedServer(settings.resolved_data_dir())
        target = server.start().dsn
    db = Database(target, statement_timeout_ms=settings.statement_timeout_ms,
                  max_size=settings.pool_size, timeout=settings.pool_timeout)
    reads = None
    if split_dsns(settings.read_dsn):
        reads = Router(db, split_dsns(settings.read_dsn), max_lag_bytes=settings.read_max_lag_bytes,
                       wait_ms=settings.read_wait_ms, refresh_s=settings.read_refresh_s)
    return Client(db, settings, server, principal, reads=reads)


def load_settings(**values: Any) -> Settings:
    """Settings from the environment and ``values``; a bad one is InvalidRequest, by name."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "PGBRAID_" + str(err["loc"][0]).upper() if err["loc"] else "a setting"
        raise InvalidRequest(f"invalid setting {name}: {err['msg']}", setting=name) from None
