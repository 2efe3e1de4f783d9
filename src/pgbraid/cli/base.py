"""The ``pgbraid`` command line: the same engine as Python and HTTP.

``--json`` on a read command prints exactly the HTTP response body; errors print
the one error shape (``{"error": {...}}``) and exit with the code errors.ERRORS
gives (2 bad input, 3 PostgreSQL unavailable or timed out, 70 internal...);
1 means an ingestion finished with failed documents.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import click
import typer
from rich.markup import escape

from ..client import load_settings
from ..errors import Described, InvalidRequest, describe
from ..output import console

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="pgbraid: braided retrieval strategies on PostgreSQL.")

JsonOpt = typer.Option(False, "--json", help="Print the HTTP API's JSON body.")


def emit(body: Any) -> None:
    text = json.dumps(body, ensure_ascii=False, default=str)
    try:
        sys.stdout.write(text + "\n")
    except UnicodeEncodeError:  # a lone surrogate (say, from a file name): escape it
        sys.stdout.write(json.dumps(body, default=str) + "\n")
    sys.stdout.flush()


def show_warnings(warnings: list[dict[str, str]]) -> None:
    """Housekeeping after a commit that failed (housekeeping.py): the write stands."""
    for warning in warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning['message'])}", soft_wrap=True)


@contextmanager
def handled(as_json: bool) -> Iterator[None]:
    """Show any error in the one shape and exit with its code from the error table."""
    try:
        yield
    except (typer.Exit, typer.Abort, click.exceptions.Exit, click.ClickException, click.Abort):
        raise
    except Exception as exc:
        error = describe(exc, "cli")
        show_error(error, as_json)
        raise typer.Exit(error.exit) from None


def show_error(error: Described, as_json: bool, then: str = "") -> None:
    """The one error shape under --json; otherwise one line, ``error: message then``."""
    if as_json:
        emit(error.body())
    else:
        console.print(f"[red]error:[/red] {escape(error.message)}{escape(then)}", soft_wrap=True)


def parse_json_option(value: str | None, name: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"--{name} is not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        limit = load_settings().filter_max_depth
        raise InvalidRequest(f"{'filter' if name == 'filter' else '--' + name} nests deeper "
                             f"than {limit} levels", field=name) from None


