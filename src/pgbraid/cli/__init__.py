"""The ``pgbraid`` command line: the same engine as Python and HTTP.

``base`` holds the Typer app and the one way errors are shown; ``commands``,
``entities``, ``documents`` and ``keys`` register their commands on it (imported
here, so nothing imports back up).
"""

import logging

from . import commands, documents, entities, extensions, keys  # noqa: F401  (register the commands)
from .base import app, handled


def main() -> None:
    # psycopg's pool logs each failed connection attempt with the host and port: the
    # command's message says PostgreSQL is unreachable, without where (``serve``
    # sends these lines to the server's log).
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    app()


__all__ = ["app", "handled", "main"]
