"""``pgbraid extension build|list``: PostgreSQL extensions the embedded wheel lacks
(Apache AGE, pg_textsearch, Citus), built from source into the data dir."""

from __future__ import annotations

from pathlib import Path

import psycopg
import typer
from rich.table import Table

from ..client import load_settings
from ..db import extensions
from ..db.server import EmbeddedServer
from ..errors import BackendUnavailable, InvalidRequest
from ..output import console, show_mapping
from .base import JsonOpt, app, emit, handled

extension_app = typer.Typer(no_args_is_help=True,
                            help="Build and list PostgreSQL extensions for the embedded server.")
app.add_typer(extension_app, name="extension")


@extension_app.command("build")
def extension_build(source: Path = typer.Argument(..., help="A PGXS extension: folder or .tar.gz."),
                    force: bool = typer.Option(False, "--force", help="Rebuild even if built."),
                    jobs: int = typer.Option(2, "--jobs", "-j", min=1, max=64),
                    as_json: bool = JsonOpt) -> None:
    """Compile SOURCE against the embedded server's pg_config into the data dir."""
    with handled(as_json):
        settings = load_settings()
        if settings.dsn:
            raise InvalidRequest("PGBRAID_DSN is set: install extensions on that server itself; "
                                 "pgbraid extension build serves the embedded server")
        built = extensions.build(source, settings.resolved_data_dir(), force=force, jobs=jobs)
        body = built.as_dict()
        if as_json:
            emit(body)
            return
        body.pop("files")
        show_mapping(f"extension {built.name} {'already built' if built.cached else 'built'}", body)
        if built.restart_required:
            console.print("restart the server to load it: pgbraid server stop && pgbraid server start")


@extension_app.command("list")
def extension_list(as_json: bool = JsonOpt) -> None:
    """Extensions built into the data dir, available to the server, created in it."""
    with handled(as_json):
        rows = _rows()
        if as_json:
            emit({"extensions": rows})
            return
        table = Table("name", "built", "preload", "available", "installed")
        for row in rows:
            table.add_row(*(str(row[k] or "") for k in ("name", "built", "preload", "available",
                                                         "installed")))
        console.print(table)


def _rows() -> list[dict]:
    settings = load_settings()
    if settings.dsn:
        with _connect(settings.dsn) as conn:
            return extensions.listing(None, conn)
    data_dir = settings.resolved_data_dir()
    status = EmbeddedServer(data_dir).status()
    if not status.running:
        return extensions.listing(data_dir)  # built only: the server says the rest
    with _connect(status.dsn) as conn:
        return extensions.listing(data_dir, conn)


def _connect(dsn: str) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise BackendUnavailable(f"PostgreSQL is unavailable: {exc.sqlstate or 'cannot connect'}") from exc
