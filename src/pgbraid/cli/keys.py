"""``pgbraid keys create|list|revoke`` and ``pgbraid serve``: the HTTP API's keys and
server. ``--json`` prints exactly the HTTP API's body."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..client import connect
from ..errors import NotEnabled, describe
from ..output import console
from .base import JsonOpt, app, emit, handled

keys_app = typer.Typer(no_args_is_help=True, help="API keys for the HTTP API.")
app.add_typer(keys_app, name="keys")


# -- API keys -----------------------------------------------------------------

@keys_app.command("create")
def keys_create(pipeline: str = typer.Option("*", help="A pipeline name, or * for every one."),
                permissions: Optional[str] = typer.Option(
                    None, help="read,write,execute,admin (with --admin, default: all four)."),
                classification: Optional[str] = typer.Option(
                    None, help="What the key may hold, comma-separated (default: anything)."),
                expires: Optional[str] = typer.Option(None, help="ISO-8601 date or time (UTC)."),
                admin: bool = typer.Option(False, "--admin", help="The tenant's admin: pipelines, "
                                           "sources and keys."),
                as_json: bool = JsonOpt) -> None:
    """Create a key; it is printed this once (only its SHA-256 digest is stored)."""
    with handled(as_json), connect() as client:
        if permissions is None and admin:
            permissions = "read,write,execute,admin"
        body = client.create_key(pipeline=pipeline, permissions=permissions or "",
                                 classification=classification, expires=expires, admin=admin)
        if as_json:
            emit(body)
        else:
            console.print(f"key {body['id']} (shown once, store it now):", markup=False)
            console.print(body["key"], markup=False)


@keys_app.command("list")
def keys_list(as_json: bool = JsonOpt) -> None:
    """The tenant's keys, by their prefix."""
    with handled(as_json), connect() as client:
        items = client.keys()
        if as_json:
            emit(items)
            return
        for key in items:
            state = ("revoked" if key["revoked_at"] else
                     f"expires {key['expires_at']}" if key["expires_at"] else "active")
            grants = f"{key['pipeline']}: {','.join(key['permissions'])}"
            console.print(f"{key['id']}  {key['prefix']}…  {grants}"
                          f"{'  admin' if key['admin'] else ''}  {state}", markup=False)


@keys_app.command("revoke")
def keys_revoke(key_id: str, as_json: bool = JsonOpt) -> None:
    """Revoke a key: its next request is refused."""
    with handled(as_json), connect() as client:
        body = client.revoke_key(key_id)
        emit(body) if as_json else console.print(f"key {key_id} revoked", markup=False)


# -- the HTTP server ------------------------------------------------------------

@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="Address to bind."),
          port: int = typer.Option(8400, help="Port to bind."),
          workers: int = typer.Option(1, help="Worker processes."),
          no_auth: bool = typer.Option(False, "--no-auth", help="No API keys: every request is "
                                       "the local tenant's admin (loopback only)."),
          mcp: bool = typer.Option(False, "--mcp", help="Also serve MCP (streamable HTTP) at "
                                   "/mcp; needs pgbraid[mcp].")) -> None:
    """Serve the HTTP API (FastAPI on uvicorn) on the embedded server or PGBRAID_DSN."""
    from ..api.server import serve as run

    with handled(False):
        run(host=host, port=port, workers=workers, no_auth=no_auth, mcp=mcp)


@app.command("mcp")
def mcp_stdio(key_file: Optional[Path] = typer.Option(
        None, "--key-file", help="A file holding the API key the tools act as (default: "
        "PGBRAID_API_KEY; neither: the local tenant's admin).")) -> None:
    """Serve MCP over stdio (tools: search, ground, get_document, list_pipelines)."""
    try:  # stdout is the protocol's: errors go to stderr
        try:
            from ..integrations.mcp_server import configured_key, run_stdio
        except ImportError:
            raise NotEnabled("pgbraid mcp needs the mcp extra: pip install 'pgbraid[mcp]'",
                             capability="mcp") from None
        run_stdio(configured_key(key_file))
    except Exception as exc:  # noqa: BLE001  (shown in the one shape, exit code from the table)
        error = describe(exc)
        print(json.dumps(error.body()), file=sys.stderr, flush=True)
        raise typer.Exit(error.exit) from None
