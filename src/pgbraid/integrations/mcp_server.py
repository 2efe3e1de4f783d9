"""pgbraid as an MCP server (the official ``mcp`` SDK): ``pgbraid mcp`` over stdio, and
``pgbraid serve --mcp`` over streamable HTTP at ``/mcp``.

The tools are mcp_tools.py's. Who they act as:

- stdio: the API key of the server's configuration (``PGBRAID_API_KEY``, or the
  file ``--key-file`` names), checked again on every call so a revoked key stops
  working at once; without one, the local process (its tenant's admin), as for
  the CLI on the embedded server.
- HTTP: each request's own ``Authorization: Bearer KEY``, as every other route
  of ``pgbraid serve``; with ``--no-auth``, the local admin, from loopback only.

Engine calls are synchronous (psycopg): each runs in a worker thread.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Callable

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ..client import Client, connect
from ..errors import InvalidRequest, Unauthorized, describe
from .mcp_tools import TOOLS, as_text, call

INSTRUCTIONS = ("pgbraid searches pipelines of documents with several retrieval strategies, "
                "alone or fused, and says what it did (the trace). Start with list_pipelines, "
                "search with type auto, cite hits by document_id (get_document reads one); "
                "ground resolves a typed name to one entity of a registered source.")
Acting = Callable[[Any], Client]
"""The Client a tool call acts as, from the call's context."""


def build(acting: Acting, version: str = "") -> Server:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=tool.name, description=tool.description,
                       input_schema=tool.input_schema(), output_schema=tool.output_schema())
            for tool in TOOLS.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        def run() -> tuple[Any, bool]:
            try:
                client = acting(ctx)
            except Exception as exc:  # noqa: BLE001  (an unknown or revoked key)
                return {"error": _error(exc)}, True
            return call(client, params.name, params.arguments)

        result, failed = await anyio.to_thread.run_sync(run)
        return types.CallToolResult(content=[types.TextContent(text=as_text(result))],
                                    structured_content=result, is_error=failed)

    return Server("pgbraid", version=version, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _error(exc: BaseException) -> dict[str, Any]:
    return describe(exc).body()["error"]


# -- stdio ----------------------------------------------------------------------------

def configured_key(key_file: Path | None) -> str | None:
    """The API key of the server's configuration: --key-file, else PGBRAID_API_KEY."""
    if key_file is not None:
        try:
            mode = key_file.stat().st_mode
            key = key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"cannot read --key-file {str(key_file)!r}: "
                                 f"{getattr(exc, 'strerror', None) or exc}",
                                 field="key-file") from None
        if mode & 0o077:  # as for encryption key files: a key others may read is anyone's
            raise InvalidRequest(f"--key-file {str(key_file)!r} has mode {oct(mode & 0o777)}: "
                                 f"others may read the key; run chmod 600 {str(key_file)!r}",
                                 field="key-file")
        if not key:
            raise InvalidRequest(f"--key-file {str(key_file)!r} is empty", field="key-file")
        return key
    return os.environ.get("PGBRAID_API_KEY") or None


def run_stdio(key: str | None, version: str = "") -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):  # stray output goes to stderr now
            client = await anyio.to_thread.run_sync(connect)
            try:
                if key is not None:  # refused at start, not only at the first call
                    await anyio.to_thread.run_sync(client.authenticate, key)
                server = build(_by_key(client, key), version)
                await server.run(read, write, server.create_initialization_options())
            finally:
                await anyio.to_thread.run_sync(client.close)

    try:
        anyio.run(main)
    except BaseExceptionGroup as group:  # the transport's task group wraps what we raised
        raise _first(group) from None


def _first(group: BaseExceptionGroup) -> BaseException:
    inner = group.exceptions[0]
    return _first(inner) if isinstance(inner, BaseExceptionGroup) else inner


def _by_key(client: Client, key: str | None) -> Acting:
    if key is None:
        return lambda ctx: client
    return lambda ctx: client.acting_as(client.authenticate(key))


# -- streamable HTTP under pgbraid serve --------------------------------------------------

class HttpMcp:
    """The /mcp endpoint of ``pgbraid serve --mcp``: stateless streamable HTTP, JSON
    answers, each request acting as its own bearer key."""

    def __init__(self, api: Callable[[], Any], version: str = "", no_auth: bool = False) -> None:
        self._api = api  # the app's Api (client, no_auth), once its lifespan has made it
        security = (TransportSecuritySettings(  # auth off: no DNS rebinding from a browser
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
            if no_auth else None)
        self.manager = StreamableHTTPSessionManager(
            app=build(self._acting, version), stateless=True, json_response=True,
            security_settings=security)
        self.asgi = StreamableHTTPASGIApp(self.manager)
        self._stack: AsyncExitStack | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Authenticate the HTTP request (401 in the one error shape), then serve MCP."""
        from fastapi.concurrency import run_in_threadpool

        from ..api.errors import respond

        if scope["type"] == "http":
            try:
                scope["pgbraid.client"] = await run_in_threadpool(self._authenticate, scope)
            except Exception as exc:  # noqa: BLE001  (one of ours, or internal)
                await respond(exc)(scope, receive, send)
                return
        await self.asgi(scope, receive, send)

    def _authenticate(self, scope: dict) -> Client:
        from ..api.auth import is_loopback
        from ..api.middleware import PRINCIPAL, note

        api = self._api()
        if api.no_auth:
            peer = (scope.get("client") or (None,))[0]
            if not is_loopback(peer):
                raise Unauthorized("authentication is off on this server, which takes "
                                   "requests from loopback only")
            return api.client
        principal = scope.get(PRINCIPAL)  # checked before a body was read (RequestShape)
        if principal is None:
            headers = dict(scope.get("headers") or [])
            scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            principal = api.client.authenticate(
                token.strip() if scheme.lower() == "bearer" else None)
        note(scope, key_id=principal.key_id, tenant=principal.tenant)
        return api.client.acting_as(principal)

    @staticmethod
    def _acting(ctx: Any) -> Client:
        return ctx.request.scope["pgbraid.client"]

    async def start(self) -> None:
        self._stack = AsyncExitStack()
        await self._stack.enter_async_context(self.manager.run())

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
