"""``pgbraid keys create|list|revoke``, ``pgbraid audit [purge]`` and ``pgbraid serve``: the HTTP
API's keys, what was done with them, and the server. ``--json`` prints exactly the
HTTP API's body."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..client import connect
from ..errors import InvalidRequest, NotEnabled, describe
from ..output import console
from ..scope import PERMISSIONS
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
    with handled(as_json):
        if permissions is None and admin:
            permissions = ",".join(PERMISSIONS)
        if not (permissions or "").strip():
            raise InvalidRequest(f"--permissions is required: {', '.join(PERMISSIONS)}, "
                                 "comma-separated (--admin alone gives all four)",
                                 field="permissions")
        with connect() as client:
            body = client.create_key(pipeline=pipeline, permissions=permissions,
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
            console.print(_key_line(key), markup=False, soft_wrap=True)


def _key_line(key: dict) -> str:
    """One key: id, prefix, grants, classifications, expiry and state (never its secret)."""
    held = key["classifications"]
    state = (f"revoked {key['revoked_at']}" if key["revoked_at"] else
             "expired" if key["expired"] else "active")
    return "  ".join([
        key["id"], f"{key['prefix']}…", f"{key['pipeline']}: {','.join(key['permissions'])}",
        *(["admin"] if key["admin"] else []),
        f"holds {','.join(held)}" if held is not None else "holds any classification",
        f"expires {key['expires_at']}" if key["expires_at"] else "never expires", state])


@keys_app.command("revoke")
def keys_revoke(key_id: str, as_json: bool = JsonOpt) -> None:
    """Revoke a key: its next request is refused."""
    with handled(as_json), connect() as client:
        body = client.revoke_key(key_id)
        emit(body) if as_json else console.print(f"key {key_id} revoked", markup=False)


# -- the audit log --------------------------------------------------------------

audit_app = typer.Typer(invoke_without_command=True,
                        help="The tenant's audit log (newest first) and its purge.")
app.add_typer(audit_app, name="audit")


@audit_app.callback()
def audit_log(context: typer.Context, since: Optional[str] = typer.Option(
                  None, help="ISO-8601 time, or a span back from now: 30s, 15m, 2h, 7d."),
              action: Optional[str] = typer.Option(None, help="Only this action (key.refused...)."),
              limit: int = typer.Option(100, help="Events, newest first (1 to 10000)."),
              unauthenticated: bool = typer.Option(
                  False, "--unauthenticated", help="Refusals of keys no tenant knows (counted "
                  "per minute) instead of the tenant's log."),
              as_json: bool = JsonOpt) -> None:
    """The tenant's audit log: keys, refusals, writes (PGBRAID_TENANT's)."""
    if context.invoked_subcommand is not None:
        return
    with handled(as_json), connect() as client:
        events = client.audit(since=since, action=action, limit=limit,
                              unauthenticated=unauthenticated)
        if as_json:
            emit(events)
            return
        for event in events:
            count = f" x{event['count']}" if event["count"] > 1 else ""
            detail = json.dumps(event["detail"], ensure_ascii=False) if event["detail"] else ""
            console.print(f"{event['at']}  {event['principal']}  {event['action']}{count}  "
                          f"{event['target'] or '-'}  {detail}", markup=False, soft_wrap=True)


@audit_app.command("purge")
def audit_purge(before: Optional[str] = typer.Option(
                    None, help="Remove rows older than this: ISO-8601 date or time (UTC), or a "
                    "span back from now such as 90d (default: PGBRAID_AUDIT_RETENTION_DAYS)."),
                unauthenticated: bool = typer.Option(
                    False, "--unauthenticated", help="The refusals of keys no tenant knows "
                    "instead of the tenant's log."),
                as_json: bool = JsonOpt) -> None:
    """Remove PGBRAID_TENANT's audit rows older than --before (the operator only), recorded
    as audit.purged, which no purge removes. Rows since the bound are never touched."""
    with handled(as_json), connect() as client:
        body = client.purge_audit(before=before, unauthenticated=unauthenticated)
        if as_json:
            emit(body)
        else:
            console.print(f"{body['removed']} audit rows of {body['tenant']} older than "
                          f"{body['before']} removed (recorded as audit.purged)", markup=False)


@keys_app.command("rotate-encryption")
def keys_rotate_encryption(pipeline: str,
                           batch_size: int = typer.Option(500, help="Rows re-sealed per "
                                                          "transaction."),
                           pause: float = typer.Option(0.0, help="Seconds to rest between "
                                                       "batches (spares a busy server)."),
                           quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
                           as_json: bool = JsonOpt) -> None:
    """Re-seal an encrypted pipeline under a new current key, in batches; after an
    interruption, run it again to finish. Searches keep working meanwhile."""
    with handled(as_json), connect() as client:
        if quiet:
            body = client.rotate_encryption(pipeline, batch_size=batch_size, pause=pause)
        else:
            body = _rotate_with_progress(client, pipeline, batch_size, pause)
        if as_json:
            emit(body)
        else:
            console.print(f"pipeline {pipeline}: {body['fragments']} fragments and "
                          f"{body['versions']} versions re-sealed under key {body['key_id']}"
                          f"{' (resumed)' if body['resumed'] else ''}; {body['remaining']} "
                          "left under another key", markup=False)


def _rotate_with_progress(client, pipeline: str, batch_size: int, pause: float) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("[bold]rotate[/bold] {task.description}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("rows"), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(pipeline, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
        return client.rotate_encryption(pipeline, batch_size=batch_size, pause=pause,
                                        progress=update)


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
