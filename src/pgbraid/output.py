"""Human-readable CLI output (rich). JSON output needs nothing here: it is the API body.

Every value that comes from data (document ids, titles, text, metadata, queries, trace
reasons and tokens) goes through ``escape``, or is printed with ``markup=False``: a stored title of
``[/bold]`` would otherwise end the command with a MarkupError, and ``[link=...]`` or
``[black on black]`` in a document would restyle the terminal as its author chose.
Control characters (ESC, BEL, CR, ... but newline and tab) are replaced by U+FFFD in
everything printed (``_Console.render_str``, which every string, table cell and title
passes through): a stored ``\x1b]8;;http://...`` would otherwise be a hyperlink,
``\x1b[2J`` would clear the screen and ``\r`` overwrite what came before.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape as _escape
from rich.table import Table

from .models import PipelineInfo, SearchResponse

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _Console(Console):
    def render_str(self, text: str, **options: Any) -> Any:  # the one way text gets in
        return super().render_str(_CONTROLS.sub("\ufffd", text), **options)


console = _Console(highlight=False)


def escape(value: Any) -> str:
    """``value`` as text that rich prints as it is, never as markup."""
    return _escape(str(value))


def snippet(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def show_search(response: SearchResponse) -> None:
    table = Table(title=escape(f"{response.type} · {response.pipeline} · {response.query!r}"),
                  title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("document")
    table.add_column("v", justify="right")
    table.add_column("text")
    for hit in response.hits:
        label = escape(hit.document_id) + (f"\n[dim]{escape(hit.title)}[/dim]" if hit.title else "")
        if hit.found_by:
            label += "\n[dim]" + escape(", ".join(f"{f.strategy} #{f.rank}" for f in hit.found_by)) + "[/dim]"
        table.add_row(str(hit.rank), f"{hit.score:.4f}", label, str(hit.version),
                      escape(snippet(hit.page_content)))
    if response.hits:
        console.print(table)
    else:
        console.print(f"[yellow]no hits[/yellow] for {escape(repr(response.query))}")
    if response.as_of is not None:
        console.print(f"as of {response.as_of.isoformat()}", markup=False)
    if response.next_cursor:
        console.print(f"next page: --cursor {response.next_cursor}", markup=False, soft_wrap=True)
    show_trace(response)


def show_trace(response: SearchResponse) -> None:
    console.print(f"[bold]trace[/bold] ({response.trace.ms:.1f} ms)")
    fusion = response.trace.fusion
    if fusion:
        console.print(f"  fusion: {fusion['method']}"
                      + (f" k={fusion['rrf_k']}" if fusion.get("rrf_k") else "")
                      + f", weights {fusion['weights']}; plan: {'; '.join(fusion['plan']['reasons'])}",
                      markup=False)
    for entry in response.trace.retrievers:
        reason = f" — {entry.reason}" if entry.reason else ""
        console.print(f"  {entry.retriever}: {entry.status}, {entry.hits} hits, "
                      f"{entry.ms:.1f} ms{reason}", markup=False)
        details = entry.details
        if "terms" in details and details.get("engine") == "pgbraid":
            terms = ", ".join(f"{t['term']}(df {t['df']})" for t in details["terms"][:12])
            console.print(f"    bm25 terms: {terms}", markup=False)
        if "embed_ms" in details:
            console.print(f"    {details['embedder']} embedded the query in {details['embed_ms']:.1f} ms; "
                          f"distance {details['distance_strategy']}", markup=False)
        if "tsquery" in details:
            console.print(f"    tsquery ({details.get('config')}): {details['tsquery'] or '∅'}",
                          markup=False)
        if details.get("explanation"):
            console.print(f"    [yellow]{escape(details['explanation'])}[/yellow]")
        if details.get("token_document_frequency"):
            freq = ", ".join(f"{t}={n}" for t, n in details["token_document_frequency"].items())
            console.print(f"    token document frequency: {freq}", markup=False)
        if entry.retriever == "graph" and "entities" in details:
            _show_entities(details)


def _show_entities(details: dict[str, Any]) -> None:
    """A graph leg's entities: hits are only the documents attached to them, so a graph
    without documents would otherwise show nothing of its answer."""
    seed = details.get("seed") or {}
    entities = details["entities"]
    console.print(f"    seed {seed.get('type')}:{seed.get('key')} {seed.get('label')!r}"
                  f" ({details.get('seed_resolved_by')}); {len(entities)} entities"
                  + ("" if entities else f" — {details.get('explanation') or 'none found'}"),
                  markup=False)
    for i, e in enumerate(entities[:20], 1):
        evidence = e.get("evidence") or {}
        why = (f"{evidence['shared']} shared" if "shared" in evidence
               else " -> ".join(evidence["path"]) if "path" in evidence else "")
        docs = f", documents {', '.join(e['documents'][:3])}" if e.get("documents") else ""
        console.print(f"    {i:>3}. {e['type']}:{e['key']} {e['label']!r}"
                      + (f"  score {e['score']:.4f}" if e.get("score") is not None else "")
                      + (f"  ({why}{docs})" if why or docs else ""), markup=False)
    if len(entities) > 20:
        console.print(f"    … {len(entities) - 20} more (--json has them all)", markup=False)
    if details.get("cap_note"):
        console.print(f"    {details['cap_note']}", markup=False)
    hubs = details.get("hubs") or {}
    if hubs:
        console.print(f"    hubs: {hubs.get('lists', '')}; certified exact: "
                      f"{hubs.get('certified_exact')}", markup=False)


def show_pipelines(items: list[PipelineInfo]) -> None:
    table = Table(title="pipelines", title_justify="left")
    for column in ("name", "language", "fulltext", "embedder", "documents", "fragments", "versions"):
        table.add_column(column)
    for p in items:
        table.add_row(p.name, p.language, "yes" if p.fulltext else "no", p.embedder or "-",
                      str(p.documents), str(p.fragments), str(p.versions))
    console.print(table)


def show_mapping(title: str, values: dict[str, Any]) -> None:
    console.print(f"[bold]{escape(title)}[/bold]")
    for key, value in values.items():
        console.print(f"  {key}: {plain(value)}", markup=False)


def plain(value: Any) -> str:
    """A value as a reader expects it, not as Python's repr: none as "-", a list of
    names comma-separated, anything nested as JSON."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
