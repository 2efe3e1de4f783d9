"""Typed requests, hits, traces and responses: the shapes every entry point shares."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InvalidRequest

CLASSIFICATION_RE = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")
DEFAULT_CLASSIFICATION = "public"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def parse_classifications(value: Any) -> tuple[str, ...]:
    """Accepts a list of names or one comma-separated string; anything else is an error."""
    if value is None:
        return (DEFAULT_CLASSIFICATION,)
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise InvalidRequest(
            "classification must be a list of names or a comma-separated string",
            field="classification",
        )
    bad = [item for item in items if not CLASSIFICATION_RE.match(item)]
    if bad or not items:
        raise InvalidRequest(
            f"invalid classification name(s) {bad or ['']!r}: use lower-case letters, digits, "
            "'_', '.', ':' or '-', at most 64 characters",
            field="classification",
        )
    return tuple(dict.fromkeys(items))


def validate_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidRequest(
            f"invalid {kind} name {name!r}: 1-63 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            field=kind,
        )
    return name


class SearchRequest(Frozen):
    query: str
    type: str = "fulltext"
    classification: tuple[str, ...] | None = None
    """What the reader holds (only narrows the principal's); None: the principal's default."""
    params: dict[str, Any] = Field(default_factory=dict)
    filters: dict[str, Any] | None = None
    distance_strategy: str = "cosine"
    group_by: Literal["fragment", "document"] = "fragment"

    @field_validator("classification", mode="before")
    @classmethod
    def _classification(cls, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        try:
            return parse_classifications(value)
        except InvalidRequest as exc:
            raise ValueError(exc.message) from exc

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("query must not contain NUL bytes")
        if not value.strip():
            raise ValueError("query must not be empty")
        return value

    @property
    def k(self) -> int:
        return int(self.params.get("k", 5))


def parse_search_request(data: dict[str, Any], *, max_query_chars: int, max_k: int) -> SearchRequest:
    """Validate a raw request body into a SearchRequest, raising InvalidRequest with one line."""
    try:
        request = SearchRequest.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(_first_error(exc), errors=_errors(exc)) from None
    if len(request.query) > max_query_chars:
        raise InvalidRequest(
            f"query is {len(request.query)} characters; the limit is {max_query_chars}",
            field="query",
        )
    k = request.params.get("k", 5)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0 or k > max_k:
        raise InvalidRequest(f"params.k must be an integer from 0 to {max_k}, got {k!r}", field="k")
    return request


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
        for err in exc.errors()
    ]


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "request"
    message = err["msg"].removeprefix("Value error, ")
    return f"{where}: {message}"


class StrategyRank(Frozen):
    strategy: str
    rank: int
    score: float


class Hit(Frozen):
    document_id: str
    fragment_id: int
    version: int
    title: str | None
    page_content: str
    score: float
    rank: int
    metadata: dict[str, Any] = Field(default_factory=dict)
    classifications: tuple[str, ...] = ()
    language: str | None = None
    matched_terms: tuple[str, ...] | None = None
    mmr_score: float | None = None
    evidence: dict[str, Any] | None = None
    """Why a graph hit was found: shared neighbours or the path."""
    found_by: tuple[StrategyRank, ...] = ()


class TraceEntry(Frozen):
    retriever: str
    status: Literal["ran", "skipped", "failed"]
    reason: str | None = None
    hits: int = 0
    ms: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)


class Trace(Frozen):
    retrievers: tuple[TraceEntry, ...]
    fusion: dict[str, Any] | None = None
    ms: float = 0.0


class SearchResponse(Frozen):
    pipeline: str
    query: str
    type: str
    hits: tuple[Hit, ...]
    trace: Trace
    id: Any = None
    """The caller's query id, echoed in batch mode."""


class PipelineInfo(Frozen):
    name: str
    tenant: str
    fulltext: bool
    language: str
    embedder: str | None
    dimension: int | None
    chunk_size: int
    created_at: str
    documents: int = 0
    fragments: int = 0
    versions: int = 0
