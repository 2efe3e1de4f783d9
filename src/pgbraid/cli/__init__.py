"""The ``pgbraid`` command line: the same engine as Python and HTTP.

``base`` holds the Typer app and the one way errors are shown; ``commands``,
``entities``, ``documents`` and ``keys`` register their commands on it (imported
here, so nothing imports back up).
"""

from . import commands, documents, entities, extensions, keys  # noqa: F401  (register the commands)
from .base import app, handled


def main() -> None:
    app()


__all__ = ["app", "handled", "main"]
