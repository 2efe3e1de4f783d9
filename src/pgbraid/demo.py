"""``pgbraid demo``: a pipeline from the bundled sample pages, a few searches, their traces."""

from __future__ import annotations

from importlib import resources
from typing import Any

from .client import Client
from .output import console, show_search

PIPELINE = "demo"

# file -> (metadata, classifications): the pages carry a team and a sensitivity.
PAGES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "credential-rotation.md": ({"team": "platform", "year": 2026}, ["public"]),
    "backup-restore.md": ({"team": "platform", "year": 2025}, ["public"]),
    "datensicherung.md": ({"team": "platform", "year": 2025}, ["public"]),
    "leaked-key-response.md": ({"team": "security", "year": 2026}, ["internal"]),
    "trigram-matching.md": ({"team": "search", "year": 2024}, ["public"]),
    "incident-2026-03.md": ({"team": "billing", "year": 2026}, ["secret"]),
}

SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("fulltext: words after stemming ('rotate credentials' matches 'Rotating ... credentials')",
     {"query": "rotate credentials", "type": "fulltext"}),
    ("fulltext: the query's language is detected, German stems match the German page",
     {"query": "Wie kann ich die Datenbank wiederherstellen?", "type": "fulltext"}),
    ("scope: an 'internal' reader sees the internal page; a 'public' reader would not",
     {"query": "leaked key", "type": "bm25", "classification": ["internal"]}),
    ("metadata filter: only pages of the platform team from 2026",
     {"query": "password backup", "type": "bm25", "filters": {"team": "platform", "year": {"gte": 2026}}}),
    ("fulltext finds nothing: the trace names the tokens that over-restricted the query",
     {"query": "restore the invoices table from the nightly backup", "type": "fulltext"}),
    ("similarity: a paraphrase with no word in common",
     {"query": "how can I change the login secret of our DB user?", "type": "similarity"}),
    ("fuzzy: a misspelled term still finds its page",
     {"query": "trigam matchng", "type": "fuzzy", "params": {"k": 2}}),
    ("hybrid: bm25 and similarity run together and are fused by reciprocal rank",
     {"query": "what to do when an API key leaks", "type": "hybrid", "classification": ["internal"]}),
]


def records() -> list[dict[str, Any]]:
    folder = resources.files("pgbraid") / "sample"
    result = []
    for name, (metadata, classifications) in PAGES.items():
        text = (folder / name).read_text(encoding="utf-8")
        title = text.splitlines()[0].lstrip("# ").strip()
        result.append({"id": name, "title": title, "text": text, "metadata": metadata,
                       "classification": classifications})
    return result


def run(client: Client) -> None:
    existing = {p.name: p for p in client.pipelines()}.get(PIPELINE)
    if existing is not None and existing.embedder != "minilm":
        console.print(f"pipeline [bold]{PIPELINE}[/bold] exists without the minilm embedder "
                      "(an older demo); recreating it")
        client.delete_pipeline(PIPELINE)
        existing = None
    if existing is None:
        client.create_pipeline(PIPELINE)
        console.print(f"created pipeline [bold]{PIPELINE}[/bold]")
    else:
        console.print(f"pipeline [bold]{PIPELINE}[/bold] exists; re-ingesting (unchanged pages write nothing)")
    client.define_classification("secret", implies=["internal"])
    client.define_classification("internal", implies=["public"])
    report = client.ingest(PIPELINE, records())
    console.print(f"ingested: added {report.added}, updated {report.updated}, "
                  f"unchanged {report.unchanged}, fragments {report.fragments}\n")
    for caption, request in SEARCHES:
        console.rule(caption, align="left")
        show_search(client.search(PIPELINE, **request))
        console.print()
    console.print("Try it yourself: [bold]pgbraid search demo \"backup\" --json[/bold]")
