"""CLI commands: server, pipelines, ingest, embeddings-serve, demo (search.py: search, eval)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..client import connect, load_settings
from ..db.server import EmbeddedServer
from ..errors import InvalidRequest
from ..ingest.readers import FieldMap
from ..output import console, escape, show_mapping, show_pipelines
from .base import JsonOpt, app, emit, handled, show_warnings

server_app = typer.Typer(no_args_is_help=True, help="The embedded PostgreSQL server.")
pipeline_app = typer.Typer(no_args_is_help=True, help="Create and inspect pipelines.")
app.add_typer(server_app, name="server")
app.add_typer(pipeline_app, name="pipeline")


# -- server -------------------------------------------------------------------

def _server() -> EmbeddedServer:
    settings = load_settings()
    if settings.dsn:
        raise InvalidRequest("PGBRAID_DSN is set: pgbraid uses that server and starts none")
    return EmbeddedServer(settings.resolved_data_dir())


@server_app.command("start")
def server_start(tcp_port: Optional[int] = typer.Option(None, help="Also listen on 127.0.0.1:PORT (password auth)."),
                 as_json: bool = JsonOpt) -> None:
    """Start the embedded server (or attach to the one running)."""
    with handled(as_json):
        status = _server().start(tcp_port=tcp_port)
        emit(status.as_dict()) if as_json else show_mapping("server running", status.as_dict())


@server_app.command("stop")
def server_stop(as_json: bool = JsonOpt) -> None:
    """Stop the embedded server."""
    with handled(as_json):
        status = _server().stop()
        emit(status.as_dict()) if as_json else show_mapping("server", status.as_dict())


@server_app.command("status")
def server_status(as_json: bool = JsonOpt) -> None:
    """Is the embedded server running, and where."""
    with handled(as_json):
        status = _server().status()
        emit(status.as_dict()) if as_json else show_mapping("server", status.as_dict())


replica_app = typer.Typer(no_args_is_help=True, help="Streaming read replicas of the embedded "
                          "server (put their DSN in PGBRAID_READ_DSN).")
server_app.add_typer(replica_app, name="replica")
ReplicaName = typer.Option("replica1", "--name", help="The replica's name (a-z, 0-9, _).")


def _replica(name: str):
    from ..db.standby import EmbeddedReplica

    return EmbeddedReplica(_server(), name)


@replica_app.command("start")
def replica_start(name: str = ReplicaName, as_json: bool = JsonOpt) -> None:
    """Make (pg_basebackup -R, first time) and start a hot standby of the embedded server."""
    with handled(as_json):
        status = _replica(name).start()
        emit(status.as_dict()) if as_json else show_mapping(
            f"replica {name} running: PGBRAID_READ_DSN={status.dsn!r}", status.as_dict())


@replica_app.command("stop")
def replica_stop(name: str = ReplicaName, as_json: bool = JsonOpt) -> None:
    """Stop a replica (it catches up when started again)."""
    with handled(as_json):
        status = _replica(name).stop()
        emit(status.as_dict()) if as_json else show_mapping(f"replica {name}", status.as_dict())


@replica_app.command("status")
def replica_status(name: str = ReplicaName, as_json: bool = JsonOpt) -> None:
    """Is the replica running, and its DSN."""
    with handled(as_json):
        status = _replica(name).status()
        emit(status.as_dict()) if as_json else show_mapping(f"replica {name}", status.as_dict())


@replica_app.command("remove")
def replica_remove(name: str = ReplicaName, as_json: bool = JsonOpt) -> None:
    """Stop a replica, delete its folder and drop its replication slot on the primary."""
    with handled(as_json):
        status = _replica(name).remove()
        emit(status.as_dict()) if as_json else show_mapping(f"replica {name} removed",
                                                            status.as_dict())


# -- pipelines ----------------------------------------------------------------

LIVE_HOSTS = typer.Option(None, "--live-allow-host", help="A host the live source (and its "
                          "redirects) may reach; repeat for more.")
LIVE_OPTIONS = typer.Option(None, "--live-option", help="A live source setting as NAME=VALUE: "
                            "timeout, max_bytes, rate_limit, max_documents, records, "
                            "id_field, title_field, text_field, metadata_field, language_field.")


def _live(url: Optional[str], hosts: Optional[list[str]], options: Optional[list[str]]) -> dict:
    """A live source from the CLI's options (validated by the client)."""
    source: dict[str, Any] = {"url": url, "allow_hosts": hosts or [], "fields": {}}
    for option in options or []:
        key, sep, value = option.partition("=")
        if not sep:
            raise InvalidRequest(f"--live-option takes NAME=VALUE, not {option!r}")
        if key.endswith("_field"):
            source["fields"][key.removesuffix("_field")] = value
        else:
            source[key] = value
    return source


@pipeline_app.command("create")
def pipeline_create(name: str, language: str = typer.Option("english", help="Default text-search language."),
                    fulltext: bool = typer.Option(True, "--fulltext/--no-fulltext"),
                    chunk_size: int = typer.Option(1000, help="Target fragment size in characters."),
                    embedder: str = typer.Option("minilm", help="minilm | e5-multilingual | openai | none"),
                    encrypt: bool = typer.Option(
                        False, "--encrypt",
                        help="Store text, titles and --encrypt-metadata fields AES-256-GCM sealed."),
                    encrypt_metadata: Optional[str] = typer.Option(
                        None, help="Top-level metadata fields to seal too, comma-separated."),
                    live_source: Optional[str] = typer.Option(
                        None, help="A live source URL template with {query} or {identifier}."),
                    live_allow_host: Optional[list[str]] = LIVE_HOSTS,
                    live_option: Optional[list[str]] = LIVE_OPTIONS,
                    as_json: bool = JsonOpt) -> None:
    """Create a pipeline."""
    with handled(as_json), connect() as client:
        if live_source is None and (live_allow_host or live_option):
            raise InvalidRequest("--live-allow-host and --live-option need --live-source")
        live = _live(live_source, live_allow_host, live_option) if live_source else None
        fields = [f.strip() for f in encrypt_metadata.split(",")] if encrypt_metadata else None
        info = client.create_pipeline(name, language=language, fulltext=fulltext,
                                      chunk_size=chunk_size, embedder=embedder, encrypt=encrypt,
                                      encrypt_metadata=fields, live=live)
        emit(info.model_dump()) if as_json else show_mapping(f"pipeline {name} created", info.model_dump())


@pipeline_app.command("live")
def pipeline_live(name: str,
                  source: Optional[str] = typer.Option(
                      None, "--source", help="The new URL template ({query} or {identifier})."),
                  allow_host: Optional[list[str]] = typer.Option(
                      None, "--allow-host", help="A host it may reach; repeat for more."),
                  option: Optional[list[str]] = typer.Option(
                      None, "--option", help="NAME=VALUE, as --live-option of create."),
                  remove: bool = typer.Option(False, "--remove", help="Remove the live source."),
                  as_json: bool = JsonOpt) -> None:
    """Show, change (--source ...) or remove (--remove) a pipeline's live source."""
    with handled(as_json), connect() as client:
        if remove:
            client.set_live_source(name, None)
            body: dict[str, Any] = {"deleted": f"{name}/live"}
        elif source is not None:
            body = client.set_live_source(name, _live(source, allow_host, option))
        elif allow_host or option:
            raise InvalidRequest("give --source with --allow-host / --option (the whole source)")
        else:
            body = client.live_source(name)
        emit(body) if as_json else show_mapping(f"pipeline {name}: live source", body)


@pipeline_app.command("delete")
def pipeline_delete(name: str, as_json: bool = JsonOpt) -> None:
    """Delete a pipeline and everything in it."""
    with handled(as_json), connect() as client:
        body = client.delete_pipeline(name)
        if as_json:
            emit(body)
        else:
            console.print(f"pipeline {name} deleted", markup=False)
            show_warnings(body["warnings"])


CountedAs = typer.Option(None, "--classification", help=(
    "Count what these classifications hold, comma-separated (default: as document list, "
    "the principal's and public)."))


@pipeline_app.command("list")
def pipeline_list(classification: Optional[str] = CountedAs, as_json: bool = JsonOpt) -> None:
    """List pipelines with their counts."""
    with handled(as_json), connect() as client:
        items = client.pipelines(classification=classification)
        emit([p.model_dump() for p in items]) if as_json else show_pipelines(items)


@pipeline_app.command("show")
def pipeline_show(name: str, classification: Optional[str] = CountedAs,
                  as_json: bool = JsonOpt) -> None:
    """Show one pipeline."""
    with handled(as_json), connect() as client:
        info = client.pipeline(name, classification=classification)
        emit(info.model_dump()) if as_json else show_mapping(f"pipeline {name}", info.model_dump())


# -- ingest -------------------------------------------------------------------

@app.command()
def ingest(pipeline: str, paths: list[Path] = typer.Argument(
               ..., help="Files or folders: .txt .md .rst .jsonl[.gz] .csv[.gz] .tsv[.gz] .json[.gz]"),
           id_field: str = "id", title_field: str = "title",
           text_field: str = typer.Option("text", help="The text field; several comma-separated"
                                          " (a,b) are joined as paragraphs"),
           metadata_field: str = "metadata", classification_field: str = "classification",
           language_field: str = "language",
           records: Optional[str] = typer.Option(None, help="JSON: the key of the array of records"
                                                  " in an object (a.b when nested)"),
           index_id: bool = typer.Option(False, "--index-id", help="Make the id searchable"
                                         " (it leads the title)"),
           on_error: str = typer.Option("continue", help="continue | stop at the first failing document"),
           as_json: bool = JsonOpt) -> None:
    """Ingest documents: new content becomes a new version, unchanged content writes nothing."""
    from ..ingest.progress import ingest_with_progress

    with handled(as_json):
        fields = FieldMap(id=id_field, title=title_field, text=text_field, metadata=metadata_field,
                          classification=classification_field, language=language_field,
                          records=records, index_id=index_id)
        if on_error not in ("continue", "stop"):
            raise InvalidRequest("--on-error must be 'continue' or 'stop'")
        with connect() as client:
            report = ingest_with_progress(client, pipeline, paths, fields, on_error, quiet=as_json)
        if as_json:
            emit(report.as_dict())
        else:
            for skipped in report.skipped:
                console.print(f"[yellow]skipped[/yellow] {escape(skipped.source)}: {escape(skipped.reason)}",
                              soft_wrap=True)
            for failure in report.failed[:FAILURES_SHOWN]:
                console.print(f"[red]failed[/red] {escape(failure.source)}: {escape(failure.message)}",
                              soft_wrap=True)
            if len(report.failed) > FAILURES_SHOWN:
                console.print(f"[red]... and {len(report.failed) - FAILURES_SHOWN} more failures"
                              f"[/red] (--json lists every one)")
            console.print(f"added {report.added}, updated {report.updated}, unchanged "
                          f"{report.unchanged}, failed {len(report.failed)}, "
                          f"fragments written {report.fragments}"
                          + (f", files skipped {len(report.skipped)}" if report.skipped else "")
                          + (" (stopped at the first failure)" if report.stopped else ""))
            show_warnings(report.warnings)
        if report.failed:
            raise typer.Exit(1)


FAILURES_SHOWN = 20  # failed documents the text output names; --json names all


@app.command("embeddings-serve")
def embeddings_serve(embedder: str = typer.Option("minilm", help="minilm or e5-multilingual"),
                     host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve a bundled embedder as an OpenAI-compatible /v1/embeddings endpoint
    (PGBRAID_EMBEDDINGS_KEY: the bearer key every request needs; required off loopback)."""
    import os

    from .. import embedders
    from ..api.auth import is_loopback
    from ..embedders.server import make_server
    from ..models import number

    with handled(False):
        if embedder not in ("minilm", "e5-multilingual"):
            raise InvalidRequest("--embedder must be minilm or e5-multilingual")
        number({"port": port}, "port", None, 0, 65535, integer=True, label="--port")  # 0: any free
        key = os.environ.get("PGBRAID_EMBEDDINGS_KEY") or None
        if key is None and not is_loopback(host):
            raise InvalidRequest(f"--host {host} is not loopback: set PGBRAID_EMBEDDINGS_KEY "
                                 "(the bearer key clients send) to serve there", field="host")
        server = make_server(embedders.get(embedder), host, port, key=key)
        console.print(f"serving {embedder} on http://{host}:{server.server_port}/v1/embeddings")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            server.server_close()


@app.command()
def demo() -> None:
    """Create a pipeline from the bundled sample pages and run a few searches."""
    from ..demo import run

    with handled(False), connect() as client:
        run(client)


