"""Fetch one URL of a live source, within its limits, and read documents from it.

    LiveFailure                 the fetch or its response was refused; nothing is stored

Every hop (the URL, then each redirect, at most ``MAX_REDIRECTS``) must go to
an allowed host over http(s); the whole fetch has one deadline (connect, every
read and every redirect count against it); the body is read as a stream and
refused as soon as it passes ``max_bytes`` (or when Content-Length says it
will). Environment proxies are ignored: the allow-list names the hosts reached.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import httpcore
import httpx

from ..errors import InvalidRequest
from ..ingest.readers import SourceDocument, document_from_record
from ..models import printable, validate_document_id
from .config import PREFIX, LiveFailure, LiveSource, allowed

MAX_REDIRECTS = 3
CHUNK = 64 * 1024
USER_AGENT = "pgbraid-live/1"


@dataclass(frozen=True)
class Fetched:
    url: str
    host: str
    status: int
    body: bytes
    fetched_at: datetime


def render(source: LiveSource, value: str) -> str:
    """The source's URL with the value (a query or an identifier) URL-encoded into it."""
    return source.url.replace("{" + source.placeholder + "}", quote(value, safe=""))


def fetch(source: LiveSource, url: str, *, private: bool = False) -> Fetched:
    """``private``: the operator lets sources reach non-global addresses
    (PGBRAID_LIVE_PRIVATE_HOSTS); otherwise every hop's host must resolve to global ones."""
    deadline = time.monotonic() + source.timeout
    host = urlsplit(url).hostname or ""
    try:
        with httpx.Client(timeout=httpx.Timeout(source.timeout), follow_redirects=False,
                          trust_env=False, transport=_transport(private),
                          headers={"User-Agent": USER_AGENT,
                                   "Accept": "application/json"}) as http:
            for _ in range(MAX_REDIRECTS + 1):
                host = _check_hop(source, url)
                if not private:
                    _check_global(host, urlsplit(url).port)
                with http.stream("GET", url) as response:
                    if not private:  # the address connected to, whatever DNS said since
                        _check_peer(response, host)
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("location", ""))
                        _left(deadline, source, host)
                        continue
                    if response.status_code != 200:
                        raise LiveFailure(f"{host} answered HTTP {response.status_code}",
                                          host=host, status=response.status_code)
                    body = _read(response, source, deadline, host)
                    return Fetched(url, host, response.status_code, body,
                                   datetime.now(timezone.utc))
    except httpx.TimeoutException:
        raise LiveFailure(f"{host} did not answer within {source.timeout:g} s",
                          host=host) from None
    except httpx.HTTPError as exc:
        raise LiveFailure(f"cannot reach {host}: {type(exc).__name__}", host=host) from None
    raise LiveFailure(f"more than {MAX_REDIRECTS} redirects", host=host)


def _check_hop(source: LiveSource, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise LiveFailure(f"refused a redirect to a {parts.scheme or 'relative'} URL")
    if not allowed(source, parts.hostname):
        raise LiveFailure(f"refused: host {printable(parts.hostname or '', 80)!r} is not in "
                          "the live source's allow_hosts", host=parts.hostname)
    return parts.hostname or ""


def _check_global(host: str, port: int | None) -> None:
    """Refuse a host that is, or resolves to, an address outside the public internet:
    loopback (a --no-auth pgbraid, the embeddings server), private networks, link-local
    (cloud metadata at 169.254.169.254), unspecified, reserved."""
    try:
        _global_addresses(host, port or 443)
    except OSError:
        return  # it cannot be reached either: the connection fails and says so


def _global_addresses(host: str, port: int) -> list[str]:
    """The host's addresses (OSError: it resolves to none), every one of them global."""
    addresses = [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    for address in addresses:
        _refuse_private(address, host)
    return addresses


class _GlobalOnly(httpcore.SyncBackend):
    """Connects to the very addresses its own lookup found global, and to no other: the
    request is never sent to an address DNS gave only for the connection (rebinding:
    checking the peer afterwards would already have sent a GET, which can act)."""

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None, socket_options=None) -> httpcore.NetworkStream:
        try:
            addresses = _global_addresses(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        failed: Exception = httpcore.ConnectError(f"no address for {host}")
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failed = exc
        raise failed


def _transport(private: bool) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(trust_env=False)
    if not private:  # httpx takes no network backend: its connection pool's, replaced
        pool = transport._pool
        assert isinstance(pool, httpcore.ConnectionPool) and hasattr(pool, "_network_backend")
        pool._network_backend = _GlobalOnly()
    return transport


def _check_peer(response: httpx.Response, host: str) -> None:
    """The address the connection reached, checked again before a byte of the body is
    read: a name that resolves to a public address for the check and to a private one
    for the connection (DNS rebinding) is refused here."""
    stream = response.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if not peer:
        raise LiveFailure(f"refused: the address {printable(host, 80)!r} connected to is "
                          "unknown", host=host)
    _refuse_private(str(peer[0]), host)


def _refuse_private(address_text: str, host: str) -> None:
    address = ipaddress.ip_address(address_text.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    if not address.is_global or (mapped is not None and not mapped.is_global):
        raise LiveFailure(f"refused: host {printable(host, 80)!r} is not a public address "
                          f"({address}); PGBRAID_LIVE_PRIVATE_HOSTS=1 lets live sources "
                          "reach private ones", host=host)


def _left(deadline: float, source: LiveSource, host: str) -> None:
    if time.monotonic() > deadline:
        raise LiveFailure(f"{host} did not answer within {source.timeout:g} s", host=host)


def _read(response: httpx.Response, source: LiveSource, deadline: float, host: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > source.max_bytes:
        raise LiveFailure(f"refused: the response is {int(declared)} bytes; the limit is "
                          f"{source.max_bytes}", host=host, status=response.status_code)
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):  # decoded: a gzip bomb stops here too
        body += chunk
        if len(body) > source.max_bytes:
            raise LiveFailure(f"refused: the response passed the limit of {source.max_bytes} "
                              "bytes", host=host, status=response.status_code)
        _left(deadline, source, host)
    return bytes(body)


# -- the response as documents ------------------------------------------------------

def documents(source: LiveSource, fetched: Fetched) -> list[SourceDocument]:
    """The fetched body as documents ready to ingest, all of them or a LiveFailure."""
    where = dict(host=fetched.host, status=fetched.status)
    try:
        data = json.loads(fetched.body)
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, too deep
        raise LiveFailure(f"{fetched.host} answered malformed JSON", **where) from None
    records = pluck(data, source.records) if source.records else data
    records = [records] if isinstance(records, dict) else records
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise LiveFailure(f"{fetched.host} answered no document objects", **where)
    if not records:
        raise LiveFailure(f"{fetched.host} answered no documents", **where)
    if len(records) > source.max_documents:
        raise LiveFailure(f"{fetched.host} answered {len(records)} documents; the limit is "
                          f"{source.max_documents}", **where)
    docs = []
    for number, record in enumerate(records, start=1):
        try:
            docs.append(_document(source, record, fetched))
        except InvalidRequest as exc:
            raise LiveFailure(f"document {number} of {fetched.host}'s answer: {exc.message}",
                              **where) from None
    return docs


def _document(source: LiveSource, record: dict[str, Any], fetched: Fetched) -> SourceDocument:
    """One record in the JSONL shape: mapped fields, the other top-level fields as
    metadata, never a classification or vector of the remote's choosing. The title
    starts with the record's id unless title or text hold it already."""
    mapped = {name: pluck(record, source.field(name)) for name in
              ("id", "title", "text", "language")}
    used = {source.field(name).split(".")[0] for name in ("id", "title", "text", "language",
                                                           "metadata")}
    extra = {k: v for k, v in record.items()
             if k not in used and k not in ("classification", "embedding")}
    metadata = pluck(record, source.field("metadata"))
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRequest("metadata must be an object")
    provenance = {"url": fetched.url, "fetched_at": fetched.fetched_at.isoformat()}
    shaped = {**{k: v for k, v in mapped.items() if v is not None},
              "metadata": {**extra, **(metadata or {}), "live": provenance}}
    doc = document_from_record(shaped, source=fetched.url)
    doc_id = validate_document_id(PREFIX + doc.id, "id")
    title = doc.title
    if doc.id.lower() not in f"{doc.title or ''} {doc.text}".lower():
        title = f"{doc.id}: {doc.title}" if doc.title else doc.id  # the id that fetched it finds it
    return dataclasses.replace(doc, id=doc_id, title=title)


def pluck(data: Any, path: str) -> Any:
    """``data`` at a dotted path (``a.b.0.c``: keys, or list positions), or None."""
    for part in path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data
