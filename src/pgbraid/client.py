"""The composition root: ``connect()`` wires settings, server, database and engine."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import audit, embedders, encryption
from .config import Settings
from .db.database import Database
from .db.replicas import Router, split_dsns
from .db.server import EmbeddedServer
from .engine import Engine
from .entities import Entities
from .errors import InvalidRequest, PgbraidError
from .live import search as live_search
from .live.admin import LiveSources
from .models import (PipelineInfo, SearchResponse, parse_as_of, parse_version,
                     validate_document_id, validate_name)
from .pipelines import get as pipeline_row
from .scope import FilterLimits, Principal
from .strategies.base import Context
from .strategies.bm25_postings import PostingsCache
from .strategies.query_language import QueryLanguages
from .tenancy import TenantAdmin
from .writes import Writes

@audit.audits_denials
class Client(Writes, Entities, TenantAdmin, LiveSources):
    """A principal's handle on pgbraid: pipelines, ingestion, search, document reads
    (writes.py: what it writes; entities.py: graphs, entity sources, grounding;
    tenancy.py: keys, classifications, the audit log; live/admin.py: live sources).

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

    def warm_up(self) -> None:
        """Pay now what a process's first search would: open the pool (migrating, Citus
        check, pgvector adapters), build the engine, load the language model (the
        query's language is detected) and, unless ``warm_embedder`` is off, the default
        embedder's query side (a similarity search embeds its query). ``pgbraid serve``
        calls it before it listens. The models first: they need no server, so a server
        down at start-up leaves only the pool for the first request; an embedder that
        cannot load is raised last, after the rest is warm (it fails only searches that
        embed)."""
        from .ingest.language import load_model

        load_model()
        unloaded = self._warm_embedder() if self.settings.warm_embedder else None
        self._db.open()
        self.engine  # noqa: B018  (built once, under its lock)
        if unloaded is not None:
            raise unloaded

    def _warm_embedder(self) -> PgbraidError | None:
        """Load the default embedder and embed one query (its session and first run).
        The default, not the pipelines' embedders: which ones the server's pipelines use
        is each tenant's to read (row-level security), and new pipelines take it."""
        try:
            self.embedder(embedders.DEFAULT).embed_query("warm-up")
        except PgbraidError as exc:
            return exc
        return None

    def migrate(self) -> dict[str, list[str]]:
        """Apply pending migrations (done on first use anyway); what was applied now, and
        the statements only a superuser can run here (none on the embedded server)."""
        self._db.open()
        return {"applied": self._db.migrated, "needs_superuser": self._db.superuser_steps}

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
        tenant's unrestricted admin only: it bypasses classifications and reaches
        every pipeline, so a bounded admin would step out of its bound)."""
        self.principal.require_unrestricted_admin("a raw session")
        return self._session()

    def _session(self):
        return self._db.session(self.tenant)

    def embedder(self, name: str) -> embedders.Embedder:
        """The named embedder, loaded once per process (openai settings from PGBRAID_OPENAI_*)."""
        if name == "openai":
            s = self.settings
            return embedders.get(name, url=s.openai_url, model=s.openai_model, key=s.openai_key,
                                 timeout=str(s.openai_timeout))
        return embedders.get(name)

    def pipelines(self, *, classification: Any = None) -> list[PipelineInfo]:
        """The pipelines this principal may read; their counts are of what ``classification``
        holds (as ``documents`` lists it: by default the principal's and public)."""
        return self.engine.pipelines(self.principal, classification=classification)

    def pipeline(self, name: str, *, classification: Any = None) -> PipelineInfo:
        """One pipeline; its counts as ``pipelines`` gives them."""
        validate_name("pipeline", name)
        return self.engine.pipeline(self.principal, name, classification=classification)

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

    def check_pipeline(self, pipeline: str, *permissions: str) -> None:
        """Refuse now what a call on ``pipeline`` needing ``permissions`` would: Forbidden
        without them, NotFound when it does not exist (the CLI, before a progress bar)."""
        self.principal.require(pipeline, *permissions)
        with self._session() as conn:
            pipeline_row(conn, pipeline)

    def replicas(self) -> list[dict[str, Any]]:
        """Each read replica's state as last sampled ([] without PGBRAID_READ_DSN)."""
        if self._reads is None:
            return []
        self._reads.open()
        return self._reads.status()

    def write_audit_counts(self) -> None:
        """Write the request counts of minutes that are over to the audit log."""
        self._usage.write_due()

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
