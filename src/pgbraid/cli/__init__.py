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
from .base import app, handled, show_error


def main() -> None:
    # psycopg's pool logs each failed connection attempt with the host and port: the
    # command's message says PostgreSQL is unreachable, without where (``serve``
    # sends these lines to the server's log).
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    try:  # a usage error (unknown option, bad value) is shown as every error is
        code = app(standalone_mode=False, prog_name="pgbraid")
    except USAGE_ERRORS as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help is printed: that is all
            sys.exit(exc.exit_code)
        message = " ".join(exc.format_message().split()).rstrip(".")  # one line, as every error
        error = describe(InvalidRequest(message, field=_field(exc)), "cli")
        context = getattr(exc, "ctx", None)
        show_error(error, "--json" in sys.argv[1:],
                   f" (see '{context.command_path} --help')" if context is not None else "")
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
