"""CLI commands for the graph (``edges``), entity sources (``source``) and ``ground``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..client import connect
from ..errors import InvalidRequest
from ..output import console, show_mapping
from .base import JsonOpt, app, emit, handled

edges_app = typer.Typer(no_args_is_help=True, help="A pipeline's graph: vertices and edges.")
app.add_typer(edges_app, name="edges")
source_app = typer.Typer(no_args_is_help=True, help="Entity sources: your own tables, for grounding.")
app.add_typer(source_app, name="source")


# -- graph ------------------------------------------------------------------------

@edges_app.command("load")
def edges_load(pipeline: str, vertices: Optional[Path] = typer.Option(None, help="JSONL or TSV"),
               edges: Optional[Path] = typer.Option(None, help="JSONL or TSV"),
               as_json: bool = JsonOpt) -> None:
    """Load vertices and edges, all or nothing (bad lines are reported with line numbers)."""
    with handled(as_json), connect() as client:
        if vertices is None and edges is None:
            raise InvalidRequest("give --vertices and/or --edges")
        body = client.load_graph(pipeline, vertices=vertices, edges=edges)
        emit(body) if as_json else show_mapping("loaded", body)


@edges_app.command("show")
def edges_show(pipeline: str, as_json: bool = JsonOpt) -> None:
    """Vertex and edge counts by type."""
    with handled(as_json), connect() as client:
        body = client.graph_summary(pipeline)
        emit(body) if as_json else show_mapping(f"graph of {pipeline}", body)


@edges_app.command("delete-vertex")
def edges_delete_vertex(pipeline: str, vertex_type: str, key: str, as_json: bool = JsonOpt) -> None:
    """Delete a vertex and its edges."""
    with handled(as_json), connect() as client:
        client.delete_vertex(pipeline, vertex_type, key)
        emit({"deleted": f"{vertex_type}:{key}"}) if as_json else console.print("deleted")


# -- entity sources and grounding -------------------------------------------------

def _scope(values: list[str]) -> dict[str, str]:
    scope = {}
    for item in values:
        column, sep, value = item.partition("=")
        if not sep or not column:
            raise InvalidRequest(f"--scope takes COLUMN=VALUE, got {item!r}")
        scope[column] = value
    return scope


@source_app.command("add")
def source_add(name: str, table: str = typer.Option(..., help="[schema.]table"),
               key: str = typer.Option(...), text: list[str] = typer.Option(..., help="Text column(s)."),
               scope: list[str] = typer.Option([], help="Scope column(s), e.g. state."),
               language: str = "english",
               create_indexes: bool = typer.Option(False, help="Create the trigram and tsvector indexes."),
               as_json: bool = JsonOpt) -> None:
    """Register a table as an entity source."""
    with handled(as_json), connect() as client:
        body = client.add_source(name, table=table, key=key, text=text, scope=scope,
                                 language=language, create_indexes=create_indexes)
        emit(body) if as_json else show_mapping(f"entity source {name}", body)


@source_app.command("list")
def source_list(as_json: bool = JsonOpt) -> None:
    """List entity sources."""
    with handled(as_json), connect() as client:
        items = client.sources()
        emit(items) if as_json else [show_mapping(i["name"], i) for i in items]


@source_app.command("show")
def source_show(name: str, as_json: bool = JsonOpt) -> None:
    """Show an entity source and the indexes it is missing."""
    with handled(as_json), connect() as client:
        body = client.source(name)
        emit(body) if as_json else show_mapping(f"entity source {name}", body)


@source_app.command("delete")
def source_delete(name: str, as_json: bool = JsonOpt) -> None:
    """Unregister an entity source: drop its indexes and revoke its read grant."""
    with handled(as_json), connect() as client:
        client.remove_source(name)
        emit({"deleted": name}) if as_json else console.print(f"deleted entity source {name}")


@source_app.command("search")
def source_search(name: str, query: str, type_: str = typer.Option("fuzzy", "--type", "-t"),
                  scope: list[str] = typer.Option([]), k: int = 10, as_json: bool = JsonOpt) -> None:
    """fuzzy / fulltext / bm25 / exact over an entity source within scope values."""
    with handled(as_json), connect() as client:
        rows = client.search_source(name, query, type=type_, scope=_scope(scope), k=k)
        body = {"entity": name, "query": query, "type": type_,
                "candidates": [{**r, "key": str(r["key"])} for r in rows]}
        emit(body) if as_json else [console.print(f"{r['score']:.4f}  {r['key']}  {r['text']}", markup=False) for r in rows]


@app.command()
def ground(entity: str, value: str, scope: list[str] = typer.Option([], help="COLUMN=VALUE"),
           strategies: Optional[str] = typer.Option(None, help="Cascade order, e.g. exact,fuzzy"),
           as_json: bool = JsonOpt) -> None:
    """Resolve VALUE to one ENTITY: resolved, clarification_needed or not_found."""
    with handled(as_json), connect() as client:
        body = client.ground(entity, value, scope=_scope(scope),
                             strategies=strategies.split(",") if strategies else None)
        if as_json:
            emit(body)
        else:
            show_mapping(f"{entity} {value!r}: {body['status']}",
                         {k: v for k, v in body.items() if k not in ("entity", "value", "status")})
