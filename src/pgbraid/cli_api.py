"""CLI commands for documents (``document``), API keys (``keys``) and the HTTP server
(``serve``). ``--json`` prints exactly the HTTP API's body."""

from __future__ import annotations

from typing import Any, Optional

import click
import typer
from typer.core import TyperGroup

from .cli import JsonOpt, app, connect, console, emit, handled
from .output import show_mapping


class DocumentGroup(TyperGroup):
    """``document list|delete|show``, and ``document PIPELINE ID`` for ``show``."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands:
            args = ["show", *args]
        return super().resolve_command(ctx, args)


document_app = typer.Typer(cls=DocumentGroup, no_args_is_help=True,
                           help="Documents: show (the default), list, delete.")
keys_app = typer.Typer(no_args_is_help=True, help="API keys for the HTTP API.")
app.add_typer(document_app, name="document")
app.add_typer(keys_app, name="keys")


# -- documents ----------------------------------------------------------------

@document_app.command("show")
def document_show(pipeline: str, document_id: str, version: Optional[int] = None,
                  as_of: Optional[str] = typer.Option(None, help="ISO-8601 time (no offset: UTC)."),
                  classification: Optional[str] = None,
                  history: bool = typer.Option(False, help="List versions."),
                  as_json: bool = JsonOpt) -> None:
    """Read a document by id: current, --version N, --as-of TIME, or --history."""
    with handled(as_json), connect() as client:
        if history:
            body: Any = client.versions(pipeline, document_id, classification=classification)
        else:
            body = client.document(pipeline, document_id, version=version, as_of=as_of,
                                   classification=classification)
        if as_json:
            emit(body)
        elif history:
            for row in body:
                console.print(f"v{row['version']}  {row['valid_from']} → {row['valid_to'] or 'current'}")
        else:
            show_mapping(f"{document_id} v{body['version']}", {k: v for k, v in body.items() if k != "text"})
            console.print(body["text"])


@document_app.command("list")
def document_list(pipeline: str, after: Optional[str] = typer.Option(None, help="The previous page's next."),
                  limit: int = typer.Option(100, help="Documents per page (1-1000)."),
                  classification: Optional[str] = None, as_json: bool = JsonOpt) -> None:
    """Current documents in id order, a page at a time."""
    with handled(as_json), connect() as client:
        page = client.documents(pipeline, after=after, limit=limit, classification=classification)
        if as_json:
            emit(page)
            return
        for row in page["documents"]:
            console.print(f"{row['document_id']}  v{row['version']}  {row['title'] or ''}",
                          soft_wrap=True, markup=False)
        if page["next"] is not None:
            console.print(f"next page: --after {page['next']}", markup=False)


@document_app.command("delete")
def document_delete(pipeline: str, document_id: str, as_json: bool = JsonOpt) -> None:
    """Expire a document's current version (its history stays readable)."""
    with handled(as_json), connect() as client:
        body = client.delete_document(pipeline, document_id)
        emit(body) if as_json else console.print(
            f"{document_id}: version {body['expired_version']} expired", markup=False)


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
                                       "the local tenant's admin (loopback only).")) -> None:
    """Serve the HTTP API (FastAPI on uvicorn) on the embedded server or PGBRAID_DSN."""
    from .api.server import serve as run

    with handled(False):
        run(host=host, port=port, workers=workers, no_auth=no_auth)
