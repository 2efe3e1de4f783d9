"""The app factory: one Client per process, the routers, the middleware, the errors.

``uvicorn --factory pgbraid.api.app:from_environment`` (what ``pgbraid serve``
runs, once per worker) builds the app from the environment's settings; the
process's Client connects (or starts the embedded server) at startup and closes
its pool at shutdown, after uvicorn has let in-flight requests finish.

Middleware, outermost first: AccessLog (request id, one log line) ->
RequestShape (body limit, path and query text) -> CatchAll (a bug is
``internal error``) -> the framework's exception handlers (errors.install) ->
the routes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from starlette.routing import Route

from ..client import Client, connect, load_settings
from ..config import Settings
from ..errors import PgbraidError
from . import audit, documents, entities, graph, health, keys, pipelines, search, ui
from .auth import Api
from .errors import CatchAll, install
from .middleware import AccessLog, RequestShape, access_logger
from .schemas import known_query

ROUTERS = (health, pipelines, documents, search, graph, entities, keys, audit, ui)
DESCRIPTION = ("Retrieval strategies on PostgreSQL, alone or fused, with a trace. Every "
               "operation but /healthz and /readyz takes `Authorization: Bearer KEY`; every "
               "error is `{\"error\": {\"code\", \"message\", \"details\"}}`.")


def _version() -> str:
    try:
        return version("pgbraid")
    except PackageNotFoundError:
        return "0.0.0"


logger = logging.getLogger(__name__)
COUNTS_EVERY_S = 10


async def _write_counts(client: Client) -> None:
    """Audit counts of minutes that are over reach the log within COUNTS_EVERY_S, idle or
    not (audit.Usage otherwise writes them at the next request)."""
    while True:
        await asyncio.sleep(COUNTS_EVERY_S)
        try:
            await run_in_threadpool(client.write_audit_counts)
        except Exception:  # noqa: BLE001  (the log's writer logs; the loop must go on)
            logger.exception("could not write audit counts")


def _warm_up(client: Client) -> None:
    """What the first search would pay, paid before uvicorn listens. PostgreSQL down
    is no reason not to start: /readyz says 503 and the first request tries again."""
    try:
        client.warm_up()
    except PgbraidError as exc:
        logger.warning("start-up warm-up incomplete: %s", exc)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()

    mcp = _mcp(settings, lambda: app.state.api)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = await run_in_threadpool(connect, **_overrides(settings))
        await run_in_threadpool(_warm_up, client)
        app.state.api = Api(client, no_auth=settings.no_auth)
        if mcp is not None:
            await mcp.start()
        counts = asyncio.create_task(_write_counts(client))
        try:
            yield
        finally:
            counts.cancel()
            if mcp is not None:
                await mcp.stop()
            await run_in_threadpool(client.close)

    app = FastAPI(title="pgbraid", version=_version(), description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None,
                  dependencies=[Depends(known_query)])
    for module in ROUTERS:
        app.include_router(module.router)
    if mcp is not None:
        app.router.routes.append(Route("/mcp", endpoint=mcp, methods=["GET", "POST", "DELETE"],
                                       include_in_schema=False))
    install(app)
    app.add_middleware(CatchAll)
    app.add_middleware(RequestShape, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLog)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    _log_to_stderr()
    return app


def from_environment() -> FastAPI:
    """The factory uvicorn calls in each worker."""
    return create_app()


def _mcp(settings: Settings, api: Any) -> Any:
    """The /mcp endpoint (``serve --mcp``; needs the ``mcp`` extra), or None."""
    if not settings.mcp:
        return None
    from ..integrations.mcp_server import HttpMcp

    return HttpMcp(api, version=_version(), no_auth=settings.no_auth)


def _overrides(settings: Settings) -> dict[str, Any]:
    return settings.model_dump(exclude_none=True)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document without its 422 answers: validation errors are 400 here."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        for model in documents.REFERENCED:  # named by hand-written request bodies
            components.setdefault(model.__name__, model.model_json_schema(
                ref_template="#/components/schemas/{model}"))
        app.openapi_schema = schema
    return app.openapi_schema


def _log_to_stderr() -> None:
    errors = logging.StreamHandler(sys.stderr)
    errors.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    for name in ("pgbraid", "psycopg"):  # errors, where a connection failed (db/database.py)
        named = logging.getLogger(name)
        if not any(isinstance(h, logging.StreamHandler) for h in named.handlers):
            named.addHandler(errors)
    if not access_logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_logger.addHandler(handler)
        access_logger.setLevel(logging.INFO)
        access_logger.propagate = False
