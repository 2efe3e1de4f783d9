"""The one place where exceptions become HTTP responses.

Every error, ours or the framework's (a body that does not validate or parse,
an unknown route, a method a path does not have, a body over the limit, a bug),
leaves as the single shape of ``errors.error_body`` with the status that
``errors.ERRORS`` gives its class. Nothing here chooses a status: framework
errors are first turned into the pgbraid error they are, then described. A
response never carries a stack trace or SQL: an exception that is not a
pgbraid error is ``internal error`` (and logged with its traceback).
"""

from __future__ import annotations

from typing import Any, NoReturn

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import (ERRORS, INTERNAL, Forbidden, InvalidRequest, MethodNotAllowed, NotFound,
                      PayloadTooLarge, PgbraidError, Unauthorized, describe)
from ..models import invalid, printable

COMMON = (400, 401, 403, 404, 500, 503, 504)
"""What any authenticated operation may answer besides its own success."""


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """The one error shape (errors.error_body)."""

    error: ErrorDetail


def documented(*extra: int, common: tuple[int, ...] = COMMON) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for the error statuses an operation may answer, described from
    the error table."""
    statuses = sorted(set(common) | set(extra))
    rows: dict[int, list] = {}
    for row in (*ERRORS.values(), INTERNAL):  # a status may have several codes (503, 500)
        rows.setdefault(row.status, []).append(row)
    return {status: {"model": ErrorBody,
                     "description": "; ".join(f"`{r.code}`: {r.when}" for r in rows[status])}
            for status in statuses}


def respond(exc: BaseException) -> JSONResponse:
    """Any exception as the one error body, with its status from the table."""
    error = describe(exc)
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


# What FastAPI says of a JSON body json.loads fails on with anything but a decoding
# error: in practice RecursionError, a body nested thousands of levels deep.
FRAMEWORK_PARSE_ERROR = "There was an error parsing the body"


def raise_as_pgbraid(exc: StarletteHTTPException) -> NoReturn:
    """The pgbraid error a framework HTTP error stands for."""
    status, detail = exc.status_code, printable(str(exc.detail), 200)
    if status == 400 and exc.detail == FRAMEWORK_PARSE_ERROR:
        raise InvalidRequest("the body nests too deeply to be read as JSON", field="body") from None
    if status == 404:
        raise NotFound("no such route: see /openapi.json", route=True) from None
    if status == 405:
        raise MethodNotAllowed("this path does not take this method: see /openapi.json") from None
    if status == 413:
        raise PayloadTooLarge(detail) from None
    if status == 401:
        raise Unauthorized(detail) from None
    if status == 403:
        raise Forbidden(detail) from None
    if 400 <= status < 500:
        raise InvalidRequest(f"bad request: {detail}") from None
    raise RuntimeError(f"HTTP {status}: {detail}") from None


def from_validation(exc: RequestValidationError) -> InvalidRequest:
    """A request that did not validate (or parse) as one InvalidRequest naming the field."""
    return invalid(list(exc.errors()), located=True)


def install(app: FastAPI) -> None:
    """Register the handlers: pgbraid errors, validation errors, framework HTTP errors."""

    async def on_pgbraid(request: Request, exc: PgbraidError) -> JSONResponse:
        return respond(exc)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return respond(from_validation(exc))

    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        try:
            raise_as_pgbraid(exc)
        except Exception as translated:  # noqa: BLE001  (it is one of ours, or internal)
            return respond(translated)

    app.add_exception_handler(PgbraidError, on_pgbraid)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)


class CatchAll:
    """Anything the handlers did not take (a bug) becomes ``internal error`` here, once,
    instead of the server's plain-text 500; after a response has started, the
    connection is closed instead."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # noqa: BLE001  (the one place that catches everything)
            if started:
                describe(exc)  # logged; the body already began, so the client sees a cut
                raise
            await respond(exc)(scope, receive, send)

