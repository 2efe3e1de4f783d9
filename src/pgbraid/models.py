"""Typed requests, hits, traces and responses: the shapes every entry point shares."""

from __future__ import annotations

import json
import math
import re
import reprlib
from datetime import datetime, timezone
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InvalidRequest, PayloadTooLarge

CLASSIFICATION_RE = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,63}")
DEFAULT_CLASSIFICATION = "public"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
MAX_DOCUMENT_ID_CHARS = 1000
MAX_VERSION = 2**31 - 1
MAX_CURSOR_CHARS = 1000
LSN = re.compile(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}")
"""A WAL position as PostgreSQL prints a pg_lsn."""


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
    bad = [item for item in items if not CLASSIFICATION_RE.fullmatch(item)]
    if bad or not items:
        raise InvalidRequest(
            f"invalid classification name(s) {shown(bad[:5] or [''])}: use lower-case letters, digits, "
            "'_', '.', ':' or '-', at most 64 characters",
            field="classification",
        )
    return tuple(dict.fromkeys(items))


def validate_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"invalid {kind} name {shown(name)}: 1-63 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            field=kind,
        )
    return name


class SearchRequest(Frozen):
    query: str
    type: str = "auto"
    classification: tuple[str, ...] | None = None
    """What the reader holds (only narrows the principal's); None: the principal's default."""
    params: dict[str, Any] = Field(default_factory=dict)
    filters: dict[str, Any] | None = None
    distance_strategy: Literal["cosine", "euclidean-distance", "dot-product"] = "cosine"
    """Checked for every type, not only the vector ones: a wrong value is a mistake the
    caller should hear of, whatever the type (strategies/vector/store.py's DISTANCES)."""
    group_by: Literal["fragment", "document"] = "fragment"
    as_of: datetime | None = None
    """Search the versions valid at this time (an ISO-8601 string or a datetime; UTC
    without an offset); None: the current ones."""
    cursor: str | None = None
    """The ``next_cursor`` of the previous page (paging.py)."""
    consistency: Literal["any", "primary"] = "any"
    """With read replicas: ``primary`` reads on the primary; ``any`` on a replica
    within the lag bound (or the primary when there is none)."""
    min_lsn: str | None = None
    """With read replicas: answer from a replica that has replayed this WAL position
    (an ingest answer's ``lsn``), waiting up to PGBRAID_READ_WAIT_MS, else the primary."""

    @field_validator("min_lsn")
    @classmethod
    def _min_lsn(cls, value: str | None) -> str | None:
        if value is not None and not LSN.fullmatch(value):
            raise ValueError("must be a PostgreSQL LSN such as '0/16B3748' (an ingest "
                             "answer's lsn)")
        return value

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of(cls, value: Any) -> datetime | None:
        return as_of_field(value)

    @field_validator("cursor")
    @classmethod
    def _cursor(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > MAX_CURSOR_CHARS or text_flaw(value)):
            raise ValueError("is not a cursor pgbraid issued")
        return value

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
        flaw = text_flaw(value)
        if flaw:
            raise ValueError(f"must not contain {flaw}")
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @property
    def k(self) -> int:
        return int(self.params.get("k", 5))

    @property
    def offset(self) -> int:
        return int(self.params.get("offset", 0))


def parse_search_request(data: dict[str, Any], *, max_query_chars: int, max_k: int) -> SearchRequest:
    """Validate a raw request body into a SearchRequest, raising InvalidRequest with one line."""
    query = data.get("query") if isinstance(data, dict) else None
    if isinstance(query, str) and len(query) > max_query_chars:  # before scanning it
        raise PayloadTooLarge(f"query is {len(query)} characters; the limit is {max_query_chars}",
                              field="query")
    try:
        request = SearchRequest.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc.errors()) from None
    k = number(request.params, "k", 5, 0, max_k, integer=True)
    offset = number(request.params, "offset", 0, 0, max_k, integer=True)
    if k + offset > max_k:
        raise InvalidRequest(f"params.offset + params.k must be at most {max_k} "
                             "(PGBRAID_MAX_K)", field="offset")
    return request


def invalid(problems: list[dict[str, Any]], located: bool = False) -> InvalidRequest:
    """Validation problems (pydantic's ``errors()``) as one InvalidRequest naming the first
    field, the others in ``details.errors``: what every entry point (Python, CLI, HTTP,
    MCP) answers for a body that does not validate. ``located``: FastAPI's problems, whose
    location starts with where in the request (body, query, path, header)."""
    # An unknown field first: {"valeu": ...} is a typo of "value", so "unknown field
    # 'valeu'" is the news, and "value: Field required" only its consequence.
    ordered = sorted(problems, key=lambda p: p.get("type") != "extra_forbidden")
    listed = [_problem(p, located) for p in ordered[:20]]
    if not listed:
        return InvalidRequest("invalid request")
    return InvalidRequest(listed[0]["message"], field=listed[0]["field"], errors=listed)


def _problem(problem: dict[str, Any], located: bool) -> dict[str, str]:
    """{"field", "message"} of one validation problem; the message names the field."""
    loc = tuple(problem.get("loc", ()))
    kind = problem.get("type", "")
    inside = loc[1:] if located and loc and loc[0] in ("body", "query", "path", "header") else loc
    field = printable(".".join(str(p) for p in inside), 100)
    if kind == "json_invalid":
        reason = printable(str((problem.get("ctx") or {}).get("error", "")), 80)
        at = f" at character {loc[1]}" if len(loc) > 1 else ""
        return {"field": "body", "message": f"the body is not valid JSON: {reason}{at}"}
    if kind == "extra_forbidden":
        return {"field": field, "message": f"unknown field {field!r}"}
    if kind == "missing" and located and loc == ("body",):
        return {"field": "body", "message": "a JSON body is required"}
    if kind == "model_attributes_type" and located and loc == ("body",):
        # A JSON array or string, or a body that was not JSON to begin with: `curl -d`
        # without a header sends application/x-www-form-urlencoded.
        return {"field": "body", "message": "the body must be a JSON object, sent with "
                                            "Content-Type: application/json"}
    message = printable(str(problem.get("msg", "invalid")).removeprefix("Value error, "), 200)
    return {"field": field, "message": f"{field or 'request'}: {message}"}


# -- checks every entry point shares --------------------------------------------------

def printable(value: str, limit: int = 80) -> str:
    """Text safe to put in a message: cut to ``limit``, control characters and lone
    surrogates escaped."""
    cut = value[:limit]
    text = cut if cut.isprintable() else cut.encode("unicode_escape").decode("ascii")
    return text if len(value) <= limit else f"{text}... ({len(value)} characters)"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def shown(value: Any) -> str:
    """A short repr() of a caller's value for an error message (never its whole size);
    true, false and null as JSON spells them (most values arrive as JSON)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too long to print
        return f"an integer of {value.bit_length()} bits"


def text_flaw(value: str) -> str | None:
    """What makes a string unstorable as PostgreSQL text, or None: NUL, lone surrogates."""
    if "\x00" in value:
        return "NUL bytes"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "lone surrogates (invalid Unicode)"
    return None


def check_text(value: str, what: str, field: str | None = None) -> str:
    """The string, or InvalidRequest when it holds NUL or lone surrogates."""
    flaw = text_flaw(value)
    if flaw:
        raise InvalidRequest(f"{what} must not contain {flaw}", field=field or what)
    return value


def check_json(value: Any, what: str, max_depth: int = 32) -> Any:
    """A JSON-like value (metadata) PostgreSQL can store: string keys, valid text, finite
    numbers, at most ``max_depth`` containers deep; walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)) and depth > max_depth:
            raise InvalidRequest(f"{what} nests deeper than {max_depth} levels", field=what)
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InvalidRequest(f"{what} keys must be strings", field=what)
                check_text(key, f"{what} keys", what)
                stack.append((inner, depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            check_text(item, f"{what} values", what)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidRequest(f"{what} holds NaN or infinity", field=what)
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 1000:
            raise InvalidRequest(f"{what} holds an integer too long to store", field=what)
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise InvalidRequest(f"{what} holds a {type(item).__name__}, not JSON", field=what)
    return value


def validate_document_id(value: Any, field: str = "document_id") -> str:
    """A caller's document id: 1 to 1000 characters of valid text."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("a document id must be a non-empty string", field=field)
    if len(value) > MAX_DOCUMENT_ID_CHARS:
        raise InvalidRequest(f"a document id is at most {MAX_DOCUMENT_ID_CHARS} characters",
                             field=field)
    return check_text(value, "a document id", field)


def number(params: Mapping[str, Any], name: str, default: Any, low: float | None = None,
           high: float | None = None, *, integer: bool = False, nullable: bool = False,
           label: str | None = None) -> Any:
    """``params[name]`` checked: a finite number from ``low`` to ``high`` (an int when
    ``integer``); ``default`` when absent (or null, when ``nullable``). Refuses bools,
    strings, NaN and infinities: the one check behind every numeric parameter."""
    if name not in params or (nullable and params[name] is None):
        return default
    value = params[name]
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if (isinstance(value, bool) or not finite or (integer and not isinstance(value, int))
            or (low is not None and value < low) or (high is not None and value > high)):
        kind = "an integer" if integer else "a finite number"
        bounds = (f" from {low} to {high}" if low is not None and high is not None
                  else f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")
        raise InvalidRequest(f"{label or 'params.' + name} must be {kind}{bounds}, got "
                             f"{shown(value)}", field=name)
    if integer:
        return value
    try:
        return float(value)
    except OverflowError:  # an int beyond float range, with no upper bound given
        raise InvalidRequest(f"{label or 'params.' + name} is out of range", field=name) from None


def parse_version(value: Any) -> int | None:
    """A version number: an int from 1 (not a bool, not a string), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        raise InvalidRequest(f"version must be an integer from 1, got {shown(value)}",
                             field="version")
    return value


def as_of_field(value: Any) -> datetime | None:
    """``parse_as_of`` for a model's field: its message without the field's name, which
    validation puts in front of it."""
    try:
        return parse_as_of(value)
    except InvalidRequest as exc:
        raise ValueError(exc.message.removeprefix("as_of ")) from exc


def parse_as_of(value: Any) -> datetime | None:
    """A point in time: a datetime or an ISO-8601 string; without an offset it is UTC."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= 64:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            pass
    if not isinstance(value, datetime):
        raise InvalidRequest(f"as_of must be a datetime or an ISO-8601 string such as "
                             f"2026-01-31T12:00:00+00:00, got {shown(value)}", field="as_of")
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


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
    highlights: tuple[str, ...] | None = None
    """With params.highlight: passages of this fragment, HTML-escaped, the matched words
    in <mark>...</mark> (highlight.py)."""


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
    server: dict[str, Any] | None = None
    """With read replicas: the server that answered (``replica-N`` in PGBRAID_READ_DSN
    order, or ``primary``), why, its replay position and lag."""
    ms: float = 0.0


class SearchResponse(Frozen):
    pipeline: str
    query: str
    type: str
    hits: tuple[Hit, ...]
    trace: Trace
    as_of: datetime | None = None
    """The time searched: the request's as_of, or a cursor's; None: current versions."""
    next_cursor: str | None = None
    """When paging (params.offset or a cursor) and the page is full: the next page's cursor."""
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
    encrypted: bool = False
    """Text, titles and ``encrypted_metadata`` fields are stored AES-256-GCM sealed."""
    encrypted_metadata: tuple[str, ...] = ()
    documents: int = 0
    fragments: int = 0
    versions: int = 0
