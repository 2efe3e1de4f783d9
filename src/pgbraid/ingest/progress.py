"""Ingestion with a rich progress bar: documents, fragments and rate."""

from __future__ import annotations

from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..client import Client
from ..output import console
from .readers import FieldMap
from .batches import IngestReport


def ingest_with_progress(client: Client, pipeline: str, paths: list[Path], fields: FieldMap,
                         on_error: str, *, quiet: bool = False) -> IngestReport:
    if quiet:
        return client.ingest(pipeline, paths, fields=fields, on_error=on_error)
    client.check_pipeline(pipeline, "write")  # its error alone, not after an empty bar
    columns = [TextColumn("[bold]ingest[/bold] {task.description}"), BarColumn(),
               TextColumn("{task.completed} docs · {task.fields[fragments]} fragments · "
                          "{task.fields[failed]} failed · {task.fields[rate]} docs/s"),
               TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(pipeline, total=None, fragments=0, failed=0, rate="-")

        def update(report: IngestReport) -> None:
            elapsed = progress.tasks[0].elapsed or 0.0
            rate = f"{report.processed / elapsed:.0f}" if elapsed > 0 else "-"
            progress.update(task, completed=report.processed, fragments=report.fragments,
                            failed=len(report.failed), rate=rate)

        report = client.ingest(pipeline, paths, fields=fields, on_error=on_error, progress=update)
        progress.update(task, total=report.processed)
    return report
