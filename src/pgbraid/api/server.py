"""``pgbraid serve``: uvicorn over the app factory, with the no-auth rule.

Auth may be off (``--no-auth``: every request acts as the local tenant's admin)
only on a loopback address; anything else is refused before a socket is bound,
and so is a ``PGBRAID_READ_DSN`` that is not a standby of this cluster.
On SIGTERM or SIGINT uvicorn stops accepting, lets in-flight requests finish
(up to ``PGBRAID_SHUTDOWN_TIMEOUT`` seconds), then the app closes its pool: an
ingestion batch is one transaction, so it commits or rolls back whole.
"""

from __future__ import annotations

import os
import sys

import uvicorn

from ..client import connect, load_settings
from ..db.replicas import split_dsns
from ..keyring import Keyring
from ..errors import InvalidRequest
from ..models import number
from .auth import is_loopback

FACTORY = "pgbraid.api.app:from_environment"


def serve(host: str = "127.0.0.1", port: int = 8400, workers: int = 1,
          no_auth: bool = False, mcp: bool = False) -> None:
    settings = load_settings()
    if no_auth and not is_loopback(host):
        raise InvalidRequest(f"--no-auth is only allowed on a loopback address (127.0.0.1, "
                             f"::1, localhost), not {host!r}: create a key with `pgbraid keys "
                             "create` instead", field="host")
    if not 1 <= workers <= 64:
        raise InvalidRequest("--workers must be from 1 to 64", field="workers")
    number({"port": port}, "port", None, 0, 65535, integer=True, label="--port")  # 0: any free
    # A key file others may read, or a bad key, refuses to start here, said in one line.
    Keyring.from_settings(settings, embedded=not settings.dsn)
    if split_dsns(settings.read_dsn):
        # A read DSN that is a primary or another cluster's standby: refused before
        # a socket is bound, not on the first search.
        with connect() as client:
            client.replicas()
    os.environ["PGBRAID_NO_AUTH"] = "1" if no_auth else "0"
    os.environ["PGBRAID_MCP"] = "1" if mcp else "0"
    if mcp:
        import mcp as sdk  # noqa: F401  (fail here, not in every worker, without the extra)
    if no_auth:
        print(f"pgbraid: authentication is OFF: every request from loopback acts as the "
              f"admin of tenant {settings.tenant!r}", file=sys.stderr, flush=True)
    else:
        print("pgbraid: requests need an API key (Authorization: Bearer KEY)", file=sys.stderr,
              flush=True)
    uvicorn.run(FACTORY, factory=True, host=host, port=port, workers=workers,
                access_log=False, server_header=False, log_level="info",
                timeout_graceful_shutdown=settings.shutdown_timeout or None)
