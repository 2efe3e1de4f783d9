"""``pgbraid document show|list|delete|quarantine|release`` (``document PIPELINE ID``
still means show).
``--json`` prints exactly the HTTP API's body."""

from __future__ import annotations

from typing import Any, Optional

import click
import typer
from typer.core import TyperGroup

from ..client import connect
from ..output import console, show_mapping
from .base import JsonOpt, app, emit, handled


class DocumentGroup(TyperGroup):
    """``document list|delete|quarantine|release|show``, and ``document PIPELINE ID``
    for ``show``."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands:
            args = ["show", *args]
        return super().resolve_command(ctx, args)


document_app = typer.Typer(cls=DocumentGroup, no_args_is_help=True,
                           help="Documents: show (the default), list, delete, quarantine, release.")
app.add_typer(document_app, name="document")


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
                console.print(f"v{row['version']}  {row['valid_from']} → {row['valid_to'] or 'current'}",
                              markup=False)
        else:
            show_mapping(f"{document_id} v{body['version']}", {k: v for k, v in body.items() if k != "text"})
            console.print(body["text"], markup=False)


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
            console.print(f"next page: --after {page['next']}", markup=False, soft_wrap=True)


@document_app.command("delete")
def document_delete(pipeline: str, document_id: str, as_json: bool = JsonOpt) -> None:
    """Expire a document's current version (its history stays readable)."""
    with handled(as_json), connect() as client:
        body = client.delete_document(pipeline, document_id)
        emit(body) if as_json else console.print(
            f"{document_id}: version {body['expired_version']} expired", markup=False)


@document_app.command("quarantine")
def document_quarantine(pipeline: str, document_id: str,
                        reason: Optional[str] = typer.Option(None, help="Why it is withheld."),
                        as_json: bool = JsonOpt) -> None:
    """Withhold a document from every search until released (idempotent)."""
    with handled(as_json), connect() as client:
        body = client.quarantine_document(pipeline, document_id, reason=reason)
        emit(body) if as_json else console.print(
            f"{document_id}: quarantined" + ("" if body["changed"] else " already")
            + (f" ({body['reason']})" if body["reason"] else ""), markup=False)


@document_app.command("release")
def document_release(pipeline: str, document_id: str, as_json: bool = JsonOpt) -> None:
    """Lift a document's quarantine: it searches exactly as before (idempotent)."""
    with handled(as_json), connect() as client:
        body = client.release_document(pipeline, document_id)
        emit(body) if as_json else console.print(
            f"{document_id}: " + ("released" if body["changed"] else "not quarantined"),
            markup=False)
