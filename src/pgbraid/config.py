"""Settings, read from the environment (prefix ``PGBRAID_``). Imports nothing of ours."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    # The embedded wheel chmods every parent of the data dir so its system user
    # can traverse them; as root that would open up /root, so root gets /var/lib.
    if os.name == "posix" and os.geteuid() == 0:
        return Path("/var/lib/pgbraid")
    return Path(platformdirs.user_data_dir("pgbraid"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PGBRAID_", extra="ignore")

    dsn: str | None = None
    """An external PostgreSQL (with pgvector). When set, nothing is started."""
    read_dsn: str = ""
    """Read replicas (streaming standbys of the primary), comma-separated: searches go
    there, everything else to the primary (db/replicas.py)."""
    read_max_lag_bytes: int = Field(16 << 20, ge=0, le=1 << 40)
    """A replica more WAL bytes than this behind the primary is skipped."""
    read_wait_ms: int = Field(1_000, ge=0, le=60_000)
    """How long a search with ``min_lsn`` waits for a replica to replay it before it
    answers from the primary."""
    read_refresh_s: float = Field(1.0, gt=0, le=60)
    """How often replica health and lag are sampled."""
    data_dir: Path | None = None
    """Where the embedded server keeps its cluster (default: the user's data folder)."""
    tenant: str = "default"
    pgsearch: bool = False
    """Opt in to ParadeDB pg_search for bm25 (used only when installed too)."""
    textsearch: bool = False
    """Opt in to Tiger Data's pg_textsearch as a bm25 engine (used only when installed too)."""
    age: bool = False
    """Opt in to Apache AGE for graph (used only when installed too)."""
    warm_embedder: bool = True
    """``warm_up`` (``pgbraid serve`` before it listens) loads the default embedder too:
    off, a lexical-only server keeps ~230 MB a worker and its first similarity search
    pays the load instead."""
    live_private_hosts: bool = False
    """Let live sources reach loopback, private, link-local and other non-global addresses
    (a source on this machine or its network). Off, a fetch whose host resolves to one is
    refused: a pipeline admin's allow-list must not reach the operator's own network."""
    openai_url: str = ""
    """An OpenAI-compatible embeddings endpoint, e.g. http://127.0.0.1:8000/v1."""
    openai_model: str = "text-embedding-3-small"
    openai_key: str = ""
    openai_timeout: float = 30.0
    statement_timeout_ms: int = 30_000
    housekeeping_lock_timeout_ms: int = Field(2_000, ge=1, le=600_000)
    """How long housekeeping after a commit (merging GIN pending lists after an ingest,
    dropping a deleted pipeline's indexes) waits for a lock another session holds before
    it gives up with a warning (housekeeping.py); the write itself stays committed."""
    max_query_chars: int = 10_000
    max_k: int = 1_000
    postings_cache_mb: int = 256
    """Memory for cached BM25 posting arrays per client process (0: read them every query)."""
    source_schemas: str = ""
    """Which schemas each tenant's entity sources may come from: ``tenantA=crm_a,shared;
    tenantB=crm_b`` (``*=`` for every tenant; a bare ``app,crm`` means ``*=app,crm``).
    Empty: no tenant may register a source, save ``default`` on the embedded server
    (any schema). pgbraid's, information_schema and pg_* are always refused."""
    pool_size: int = Field(16, ge=1, le=1000)
    """Connections per client process. A hybrid search holds one per leg (up to 4) plus one
    for its snapshot: 16 lets three run at once with one left for ingestion or admin."""
    pool_timeout: float = Field(10.0, gt=0, le=600)
    """Seconds to wait for a pooled connection (and to first connect) before
    BackendUnavailable."""
    filter_max_depth: int = Field(8, ge=1, le=32)
    filter_max_conditions: int = Field(64, ge=1, le=1024)
    filter_max_value_bytes: int = Field(1024, ge=16, le=1 << 20)
    """UTF-8 bytes of any one string in a filter."""
    filter_max_bytes: int = Field(65_536, ge=256, le=16 << 20)
    """About a filter's size as JSON."""
    max_body_bytes: int = Field(8 << 20, ge=1024, le=1 << 30)
    """The largest HTTP request body (413 beyond it)."""
    audit_retention_days: int | None = Field(None, ge=1, le=36_500)
    """The audit log's retention: ``pgbraid audit purge`` without ``--before`` removes rows
    older than this many days, and no purge removes younger ones. Unset: kept forever."""
    shutdown_timeout: float = Field(30.0, ge=0, le=3600)
    """Seconds ``pgbraid serve`` waits for in-flight requests on SIGTERM / SIGINT."""
    encryption_key: str = Field("", repr=False)
    """Encryption at rest: base64 32-byte keys, comma-separated, the current one first
    (a deployment's keyring; never logged). Set, it replaces any key file."""
    encryption_key_file: Path | None = None
    """A key file (one base64 key a line, the current one first, mode 0600). Default: an
    embedded server's ``<data dir>/encryption.keys``, created on first use."""
    mcp: bool = False
    """Set by ``pgbraid serve --mcp`` for its workers: serve MCP (streamable HTTP) at /mcp."""
    no_auth: bool = False
    """Set by ``pgbraid serve --no-auth`` for its workers: every request from loopback acts
    as the tenant's admin. Not meant to be set by hand."""

    def resolved_data_dir(self) -> Path:
        return (self.data_dir or default_data_dir()).expanduser().resolve()
