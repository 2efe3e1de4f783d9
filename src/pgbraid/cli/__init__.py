"""The ``pgbraid`` command line: the same engine as Python and HTTP.

``base`` holds the Typer app and the one way errors are shown; ``commands``,
``search``, ``entities``, ``documents`` and ``keys`` register their commands on it
(imported here, so nothing imports back up).
"""

import logging
import sys

import click
import typer

from ..errors import InvalidRequest, describe
from . import commands, documents, entities, extensions, keys, search  # noqa: F401  (register the commands)
from .base import app, emit, handled


def main() -> None:
    # psycopg's pool logs each failed connection attempt with the host and port: the
    # command's message says PostgreSQL is unreachable, without where (``serve``
    # sends these lines to the server's log).
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    if "--json" not in sys.argv[1:]:
        app()
        return
    try:  # --json: a usage error (unknown option, bad value) in the one error shape too
        code = app(standalone_mode=False)
    except USAGE_ERRORS as exc:
        error = describe(InvalidRequest(exc.format_message(), field=_field(exc)))
        emit(error.body())
        sys.exit(error.exit)
    except (click.Abort, typer.Abort):
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


# Typer 0.2x parses with its own copy of click: its UsageError is not click's.
USAGE_ERRORS = (click.UsageError, *typer.BadParameter.__bases__)


def _field(exc: Exception) -> str | None:
    """The option or argument a usage error is about (its name on the command line)."""
    if isinstance(getattr(exc, "option_name", None), str):
        return exc.option_name.lstrip("-")
    param = getattr(exc, "param", None)
    return param.name if param is not None else None


__all__ = ["app", "handled", "main"]
