"""``pgbraid extension build|list``: PostgreSQL extensions the embedded wheel lacks
(Apache AGE, pg_textsearch, Citus), built from source into the data dir; ``pgbraid
cluster``, a local Citus cluster; ``pgbraid migrate``, and what only a superuser can do."""

from __future__ import annotations

from pathlib import Path

import psycopg
import typer
from rich.table import Table

from ..client import connect, load_settings
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


cluster_app = typer.Typer(no_args_is_help=True, help="A local Citus cluster from the embedded "
                          "wheel (coordinator + workers over Unix sockets), for trying Citus.")
app.add_typer(cluster_app, name="cluster")


def _cluster():
    from ..db.cluster import LocalCluster

    settings = load_settings()
    if settings.dsn:
        raise InvalidRequest("PGBRAID_DSN is set: pgbraid cluster manages local embedded nodes")
    return LocalCluster(settings.resolved_data_dir())


@cluster_app.command("start")
def cluster_start(workers: int = typer.Option(2, "--workers", help="Worker nodes (1 to 8)."),
                  as_json: bool = JsonOpt) -> None:
    """Start (or attach to) a coordinator and N workers; prints the coordinator's DSN."""
    with handled(as_json):
        body = _cluster().start(workers)
        emit(body) if as_json else show_mapping(
            f"citus cluster running: PGBRAID_DSN={body['coordinator']['dsn']!r}",
            {"active_workers": body["active_workers"],
             **{w["name"]: w["dsn"] for w in body["workers"]}})


@cluster_app.command("stop")
def cluster_stop(as_json: bool = JsonOpt) -> None:
    """Stop the workers, then the coordinator."""
    with handled(as_json):
        body = _cluster().stop()
        emit(body) if as_json else console.print("citus cluster stopped")


@cluster_app.command("status")
def cluster_status(as_json: bool = JsonOpt) -> None:
    """Which nodes run, their DSNs, and how many workers the coordinator sees."""
    with handled(as_json):
        body = _cluster().status()
        emit(body) if as_json else show_mapping("citus cluster", {
            "coordinator": (body["coordinator"] or {}).get("dsn"),
            "active_workers": body["active_workers"],
            **{w["name"]: w["dsn"] for w in body["workers"]}})


@app.command("migrate")
def migrate_command(as_json: bool = JsonOpt) -> None:
    """Apply pending migrations (PGBRAID_DSN or the embedded server), and print what only a
    superuser can still do there, as statements for a DBA."""
    with handled(as_json), connect() as client:
        body = client.migrate()
        if as_json:
            emit(body)
            return
        console.print(f"migrations applied: {', '.join(body['applied']) or 'none pending'}",
                      markup=False, soft_wrap=True)
        if body["needs_superuser"]:
            console.print("the login is no superuser: search is correct but slower (and "
                          "without vectors if pgvector is missing: create it before the "
                          "database's first migration, which makes the vector tables) until "
                          "a superuser runs, in this database:", markup=False, soft_wrap=True)
            for statement in body["needs_superuser"]:
                console.print(statement, markup=False, soft_wrap=True)
