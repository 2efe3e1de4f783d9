"""A pipeline's live source: where a search may fetch what the corpus does not hold.

Stored in the pipeline's ``settings`` under ``live`` (migration 001's jsonb
column): an HTTP(S) URL template with ``{query}`` or ``{identifier}`` in its
path or query string (never in its host), the hosts it and its redirects may
reach, a timeout for the whole fetch, a response size limit, a rate limit per
client process, and how the response maps to documents (by default one object
or a list of them in the JSONL ingestion shape; ``records`` and ``fields``
name other places, dotted paths allowed). Only the pipeline's admin reads or
changes it: a template may carry an API key in its query string.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import InvalidRequest
from ..models import printable, shown

PREFIX = "live:"
"""Fetched documents' ids: ``live:`` + the record's id, a namespace ingestion refuses,
so a fetch never writes a version of a document someone ingested."""


class LiveFailure(Exception):
    """A fetch that failed: its message, and the host and HTTP status where known."""

    def __init__(self, message: str, *, host: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message, self.host, self.status = message, host, status

PLACEHOLDERS = ("{query}", "{identifier}")
FIELD_NAMES = ("id", "title", "text", "metadata", "language")
IDENTIFIER_KINDS = ("cve", "cwe", "advisory", "attack", "hash", "ip", "domain")
"""Which of the planner's identifier kinds a ``{identifier}`` source looks up by default."""
HOST_RE = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}"
                     r"[a-z0-9])?|\[[0-9a-f:.]+\]")
FIELD_RE = re.compile(r"[A-Za-z0-9_@$-]+(?:\.[A-Za-z0-9_@$-]+)*")


class LiveSource(BaseModel):
    """The live source of a pipeline (``pgbraid pipeline live``, ``PUT /pipelines/{p}/live``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(max_length=2000)
    """http(s) URL template holding ``{query}`` or ``{identifier}`` (URL-encoded when filled)."""
    allow_hosts: tuple[str, ...] = Field(min_length=1, max_length=50)
    """Host names (or IP addresses) the URL and every redirect may reach; ports are not checked."""
    timeout: float = Field(10.0, gt=0, le=120)
    """Seconds for the whole fetch, redirects and body included."""
    max_bytes: int = Field(1 << 20, ge=256, le=64 << 20)
    """The largest response body; a larger one is refused while it streams."""
    rate_limit: int = Field(30, ge=1, le=10_000)
    """Fetches a minute from this pipeline, per client process."""
    max_documents: int = Field(10, ge=1, le=100)
    """The most documents one response may hold."""
    records: str | None = Field(None, max_length=200)
    """Dotted path to the list of records inside the response (default: the response itself)."""
    fields: dict[str, str] = Field(default_factory=dict)
    """Where each document field is in a record: id, title, text, metadata, language."""
    identifier_kinds: tuple[str, ...] = IDENTIFIER_KINDS
    """The identifier kinds (planner.py) whose absence from the corpus triggers a fetch."""

    @field_validator("allow_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            hosts = []
            for host in value:
                if not isinstance(host, str) or not HOST_RE.fullmatch(host.strip().lower()):
                    raise ValueError(f"{shown(host)} is not a host name or IP address")
                hosts.append(host.strip().lower())
            return tuple(dict.fromkeys(hosts))
        return value

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = [name for name in value if name not in FIELD_NAMES]
        if unknown:
            raise ValueError(f"unknown field {printable(unknown[0], 40)!r}; map "
                             f"{', '.join(FIELD_NAMES)}")
        bad = [path for path in value.values() if not FIELD_RE.fullmatch(path)]
        if bad:
            raise ValueError(f"{shown(bad[0])} is not a field name or dotted path")
        return value

    @field_validator("records")
    @classmethod
    def _records(cls, value: str | None) -> str | None:
        if value is not None and not FIELD_RE.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a field name or dotted path")
        return value

    @field_validator("identifier_kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from ..planner import IDENTIFIERS

        unknown = [kind for kind in value if kind not in IDENTIFIERS]
        if unknown or not value:
            raise ValueError(f"unknown identifier kind {shown(unknown[:1] or [''])}; use "
                             f"{', '.join(IDENTIFIERS)}")
        return value

    @model_validator(mode="after")
    def _template(self) -> "LiveSource":
        held = [p for p in PLACEHOLDERS if p in self.url]
        if len(held) != 1 or re.sub(r"\{(?:query|identifier)\}", "", self.url).count("{"):
            raise ValueError("url must hold exactly one kind of placeholder, {query} or "
                             "{identifier}, and no other braces")
        parts = urlsplit(self.url.replace(held[0], "x"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http:// or https:// URL with a host")
        if held[0] in urlsplit(self.url).netloc:
            raise ValueError("the placeholder may stand in the path or query string, not the host")
        if parts.username or parts.password:
            raise ValueError("url must not carry a user name or password")
        if not allowed(self, parts.hostname):
            raise ValueError(f"the url's host {parts.hostname!r} is not in allow_hosts")
        return self

    @property
    def placeholder(self) -> str:
        return "identifier" if "{identifier}" in self.url else "query"

    def field(self, name: str) -> str:
        return self.fields.get(name, name)


def allowed(source: LiveSource, host: str | None) -> bool:
    """Is ``host`` (from a URL, any case, IPv6 without brackets) in the allow-list?"""
    if not host:
        return False
    host = host.lower().rstrip(".")
    return host in source.allow_hosts or f"[{host}]" in source.allow_hosts


def parse(value: Any) -> LiveSource:
    """A live source from a dict (an API body, the CLI's options) or a LiveSource;
    InvalidRequest naming the field otherwise."""
    if isinstance(value, LiveSource):
        return value
    if not isinstance(value, dict):
        raise InvalidRequest("a live source is an object with url and allow_hosts", field="live")
    try:
        return LiveSource.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "live"
        if err["type"] == "extra_forbidden":
            raise InvalidRequest(f"unknown field {where!r} in the live source",
                                 field=where) from None
        message = printable(err["msg"].removeprefix("Value error, "), 200)
        raise InvalidRequest(f"live source {where}: {message}", field=where) from None


def from_settings(settings: dict[str, Any] | None) -> LiveSource | None:
    """The live source stored in a pipeline's settings, or None."""
    stored = (settings or {}).get("live")
    return LiveSource.model_validate(stored) if stored else None
