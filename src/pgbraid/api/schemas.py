"""Request bodies (unknown fields refused by name) and response models of the HTTP API.

Responses are the same dicts and models the Client returns, which the CLI's
``--json`` prints: the models here declare them for /openapi.json and keep
any field the Client adds (``extra="allow"``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator

from ..errors import InvalidRequest
from ..ingest.records import DocumentIn, check_path_id  # noqa: F401  (re-exported)
from ..live.config import LiveSource
from ..models import NAME_RE, SearchRequest, as_of_field, shown, validate_name

NAME = f"^{NAME_RE.pattern}$"


def _pipeline_name(value: Any) -> Any:
    """The CLI's and the Client's own message for a bad name, not pydantic's regex."""
    if isinstance(value, str) and value != "*":
        try:
            validate_name("pipeline", value)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None
    return value


PipelineName = Annotated[str, BeforeValidator(_pipeline_name),
                         WithJsonSchema({"type": "string", "pattern": NAME})]
"""A pipeline name: the pattern stays in /openapi.json, the message is validate_name's."""
Permission = Literal["read", "write", "execute", "admin"]


def _text_only(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ValueError("must be an ISO-8601 date-time string")
    return value


Moment = Annotated[datetime, BeforeValidator(_text_only),
                   WithJsonSchema({"type": "string", "format": "date-time"})]
"""A time as JSON gives it: an ISO-8601 string (not a number of seconds)."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- requests -------------------------------------------------------------------------

class PipelineCreate(Body):
    name: PipelineName
    embedder: Literal["minilm", "e5-multilingual", "openai", "none"] = "minilm"
    language: str = "english"
    """A text-search language (english, german, simple, ...)."""
    fulltext: bool = True
    chunk_size: int = Field(1000, ge=200, le=20_000)
    encrypt: bool = False
    """Store text, titles and the ``encrypt_metadata`` fields AES-256-GCM sealed."""
    encrypt_metadata: list[str] | None = Field(None, max_length=100)
    """Top-level metadata fields to seal too (needs ``encrypt``)."""
    live: LiveSource | None = None
    """A live source: what a search may fetch when the corpus lacks it (live fetch)."""


class SearchBody(SearchRequest):
    """Seed 003's search request, plus ``group_by`` and ``as_of``."""

    as_of: Annotated[datetime | None,
                     WithJsonSchema({"type": "string", "format": "date-time"})] = None
    """Search as of this time (point-in-time search): an ISO-8601 date-time."""

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of(cls, value: Any) -> datetime | None:
        # replaces SearchRequest's validator of the same name: JSON gives text, never a
        # number, and the text is parsed once (a Moment would see the parsed datetime)
        return as_of_field(_text_only(value))


class GroundBody(Body):
    entity: str
    value: str
    scope: dict[str, str | int | float] | None = None
    strategies: list[str] | None = None


class SourceCreate(Body):
    name: str
    table: str
    """``table`` or ``schema.table``."""
    key: str
    text: list[str] | str
    scope: list[str] | str = Field(default_factory=list)
    language: str = "english"
    create_indexes: bool = False


class SourceSearch(Body):
    query: str
    type: str = "fuzzy"
    scope: dict[str, str | int | float] | None = None
    k: int = 10


class VertexIn(Body):
    type: str
    key: str | int
    label: str | None = None
    documents: list[str] = Field(default_factory=list)


class EdgeIn(Body):
    src_type: str
    src: str | int
    type: str
    dst_type: str
    dst: str | int
    weight: float = 1.0
    directed: bool = True


class GraphLoadBody(Body):
    vertices: list[VertexIn] = Field(default_factory=list)
    edges: list[EdgeIn] = Field(default_factory=list)


class KeyCreate(Body):
    pipeline: Annotated[str, BeforeValidator(_pipeline_name), WithJsonSchema(
        {"type": "string", "pattern": f"^(?:\\*|{NAME_RE.pattern})$", "default": "*"})] = "*"
    """A pipeline name, or ``*`` for every pipeline of the tenant."""
    permissions: list[Permission] = Field(min_length=1)
    classification: list[str] | str | None = None
    """What the key may hold; none given: anything."""
    expires: Moment | None = None
    """An ISO-8601 date-time (no offset: UTC); the key is refused from then on."""
    admin: bool = False
    """The tenant's admin: pipelines, sources and keys."""


class QuarantineBody(Body):
    reason: str | None = Field(None, max_length=1000)
    """Why the document is withheld (shown to readers who may write the pipeline)."""


class ReleaseBody(Body):
    """A release takes no fields (an empty body, or none)."""


# -- responses ------------------------------------------------------------------------

class Deleted(Out):
    deleted: str


class HousekeepingWarning(Out):
    """Housekeeping after a commit that failed (housekeeping.py): the write stands."""
    step: str
    message: str


class PipelineDeleted(Deleted):
    warnings: list[HousekeepingWarning] = []
    """Objects of the deleted pipeline not dropped yet (the tenant's next delete drops them)."""


class Failure(Out):
    source: str
    message: str


class SkippedOut(Out):
    source: str
    reason: str


class IngestReportOut(Out):
    added: int
    updated: int
    unchanged: int
    fragments: int
    embedded: int
    stopped: bool
    failed: list[Failure]
    skipped: list[SkippedOut]
    lsn: str | None = None
    """The primary's WAL position after the commits: pass it as a search's ``min_lsn``
    to read them on a replica."""
    warnings: list[HousekeepingWarning] = []
    """Housekeeping after the commits that failed: what was written stays written."""


class DocumentOut(Out):
    document_id: str
    version: int
    title: str | None
    text: str
    metadata: dict[str, Any]
    classifications: list[str]
    language: str | None
    source: str | None
    valid_from: str
    valid_to: str | None
    current: bool
    quarantined: bool
    quarantine_reason: str | None = None
    quarantined_at: str | None = None
    fragments: int


class DocumentSummary(Out):
    document_id: str
    version: int
    title: str | None
    classifications: list[str]
    language: str | None
    valid_from: str
    quarantined: bool


class DocumentPage(Out):
    documents: list[DocumentSummary]
    next: str | None
    """Pass as ``after`` for the next page; null after the last."""


class VersionOut(Out):
    version: int
    valid_from: str
    valid_to: str | None
    content_hash: str
    current: bool


class DocumentExpired(Out):
    document_id: str
    expired_version: int
    lsn: str | None = None
    """The primary's WAL position after the commit (a search's ``min_lsn``)."""


class StrategyParam(Out):
    name: str
    kind: str
    description: str


class SearchType(Out):
    description: str
    as_of: bool
    """Whether it searches as of a time."""
    params: list[StrategyParam]


class StrategiesOut(Out):
    types: dict[str, SearchType]
    aliases: dict[str, str]


class QuarantineOut(Out):
    document_id: str
    quarantined: bool
    reason: str | None
    quarantined_at: str | None
    changed: bool
    """False when the document already was in that state (the request changed nothing)."""
    lsn: str | None = None
    """The primary's WAL position after the commit: a search with it as ``min_lsn`` on a
    read replica already leaves a quarantined document out."""


class FragmentOut(Out):
    fragment_id: int
    document_id: str
    version: int
    ordinal: int
    section: str | None
    title: str | None
    page_content: str
    metadata: dict[str, Any]
    classifications: list[str]
    language: str
    current: bool
    quarantined: bool


class GroundOut(Out):
    entity: str
    value: str
    scope: dict[str, Any]
    status: str
    """resolved, clarification_needed or not_found."""
    strategiesTried: list[dict[str, Any]]


class SourceOut(Out):
    name: str
    table: str
    key: str
    text: list[str]
    scope: list[str]
    language: str


class Candidate(Out):
    key: str
    text: str | None
    score: float


class SourceCandidates(Out):
    entity: str
    query: str
    type: str
    candidates: list[Candidate]


class GraphLoaded(Out):
    vertices: int
    edges: int


class GraphSummary(Out):
    vertices: dict[str, int]
    edges: dict[str, int]


class KeyCreated(Out):
    id: str
    key: str
    """The key itself: shown this once, stored only as its SHA-256 digest."""


class KeyInfo(Out):
    id: str
    prefix: str
    pipeline: str
    permissions: list[str]
    classifications: list[str] | None
    admin: bool
    created_at: str
    expires_at: str | None
    expired: bool
    revoked_at: str | None


class KeyRevoked(Out):
    revoked: str


class AuditEvent(Out):
    """One row of the audit log (audit.py): ``count`` > 1 for requests counted per minute."""

    id: int
    at: str
    principal: str
    action: str
    target: str | None
    detail: dict[str, Any]
    count: int


class AuditPurge(Body):
    before: str | None = Field(None, max_length=64)
    """An ISO-8601 date or time (no offset: UTC), or a span back from now such as 90d;
    none: PGBRAID_AUDIT_RETENTION_DAYS back. Never in the future or inside the policy."""


class AuditPurged(Out):
    """What a purge removed: the tenant's rows older than ``before`` (an ``audit.purged``
    row records it)."""

    tenant: str
    removed: int
    before: str


class Status(Out):
    status: str


# -- checks -----------------------------------------------------------------------------

_QUERY_NAMES: dict[int, frozenset[str]] = {}


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not take, by name (as unknown body fields)."""
    route = request.scope.get("route")
    if route is None or not request.query_params:
        return
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        found, stack = set(), [route.dependant]
        while stack:
            dependant = stack.pop()
            found.update(field.alias for field in dependant.query_params)
            stack.extend(dependant.dependencies)
        names = _QUERY_NAMES[id(route)] = frozenset(found)
    unknown = [name for name in request.query_params if name not in names]
    if unknown:
        raise InvalidRequest(f"unknown query parameter {shown(unknown[0])}", field=unknown[0])
