"""What every request goes through before a route: its id and access-log line, the
body limit, and the text of its path and query.

``AccessLog`` gives each request an id (``X-Request-ID``: the caller's when it is
a plain token, else a new one) and writes one JSON line per request on the
``pgbraid.access`` logger: request id, key id, method, path, status, ms, and for
searches the type and each retriever's ms from the trace. Routes add to the line
through ``note()``.

``RequestShape`` reads the body before any route does, up to
``PGBRAID_MAX_BODY_BYTES``: a declared or actual size over it is 413 before the
application sees a byte (the rest is drained, up to a bound, so the client can
read the answer). A path or query string that is not valid UTF-8 once
percent-decoded (lone surrogates), or that holds NUL, is 400: ids are text.
With authentication on, a request that comes with a body has its key checked
before the body is read (``PRINCIPAL``): no, an unknown, a revoked or an expired
key is 401 and its body is drained, never held.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidRequest, PayloadTooLarge, PgbraidError, Unauthorized
from ..models import printable
from .errors import respond

access_logger = logging.getLogger("pgbraid.access")
NOTES = "pgbraid.access"
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
DRAIN_LIMIT = 64 << 20
PRINCIPAL = "pgbraid.principal"
"""Where RequestShape leaves the principal it authenticated before reading a body."""


def note(scope: Scope, **values: Any) -> None:
    """Add fields to this request's access-log line."""
    scope.setdefault(NOTES, {}).update(values)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        line: dict[str, Any] = {"request_id": request_id, "key_id": None,
                                "method": scope["method"], "path": printable(scope["path"], 200),
                                "status": None}
        scope[NOTES] = line
        began = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                line["status"] = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            line["ms"] = round((time.perf_counter() - began) * 1000, 3)
            access_logger.info(json.dumps(line, ensure_ascii=True, default=str))


class RequestShape:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            _check_text(scope)
            await self._authenticate(scope, receive)
            body = await self._read(scope, receive)
        except PgbraidError as exc:  # a bad path or size, no valid key, PostgreSQL down
            await respond(exc)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _authenticate(self, scope: Scope, receive: Receive) -> None:
        """The key of a request with a body, before the body is read (auth on only)."""
        declared = _header(scope, b"content-length")
        if not ((declared is not None and declared.strip() not in ("", "0"))
                or _header(scope, b"transfer-encoding") is not None):
            return
        api = getattr(getattr(scope.get("app"), "state", None), "api", None)
        if api is None or api.no_auth:
            return
        authorization = _header(scope, b"authorization") or ""
        scheme, _, token = authorization.partition(" ")
        try:
            scope[PRINCIPAL] = await run_in_threadpool(
                api.client.authenticate, token.strip() if scheme.lower() == "bearer" else None)
        except Unauthorized:
            await _drain(receive, self.limit)
            raise

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            if int(declared) <= DRAIN_LIMIT:
                await _drain(receive, DRAIN_LIMIT)
            raise PayloadTooLarge(f"the request body is {declared} bytes; the limit is "
                                  f"{self.limit} (PGBRAID_MAX_BODY_BYTES)", limit=self.limit)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _drain(receive, DRAIN_LIMIT - size)
                raise PayloadTooLarge(f"the request body is over {self.limit} bytes "
                                      "(PGBRAID_MAX_BODY_BYTES)", limit=self.limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _drain(receive: Receive, budget: int) -> None:
    """Read (and drop) the rest of a refused body, so the client gets to read the answer."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _check_text(scope: Scope) -> None:
    for part, raw in (("path", scope.get("raw_path") or scope["path"].encode("utf-8")),
                      ("query string", scope.get("query_string", b""))):
        try:
            text = unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"the {part} is not valid UTF-8 once percent-decoded "
                                 "(lone surrogates?)", field=part) from None
        if "\x00" in text:
            raise InvalidRequest(f"the {part} must not contain NUL bytes", field=part)
