"""A local Citus cluster for trying pgbraid on one: a coordinator and N workers from the
embedded wheel, with Citus built into the data dir (``pgbraid extension build``).

Each node is an embedded server of its own (``<data dir>/citus/<node>/``), loading
the data dir's built extensions with ``shared_preload_libraries = citus``. The nodes
talk over their **Unix sockets**: Citus takes a socket folder as a node's host name
(libpq treats a host starting with ``/`` as one), so nothing listens on TCP at all,
not even loopback, and no password is needed (socket trust, mode 0700, as for the
embedded server). ``start`` is idempotent: it starts what is stopped, creates the
extension where it is missing, and adds the workers the coordinator does not list yet.

Pointed at the coordinator (``PGBRAID_DSN``), pgbraid distributes its schema on
it when it migrates (db/distribute.py; docs/scale.md, section 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from ..errors import InvalidRequest, NotEnabled
from . import extensions
from .server import EmbeddedServer, ServerStatus

MAX_WORKERS = 8


class LocalCluster:
    def __init__(self, data_dir: Path, folder: Path | None = None) -> None:
        self.data_dir = data_dir
        """Where Citus is built (``pgbraid extension build``)."""
        self.folder = folder or data_dir / "citus"
        """Where the nodes live."""

    def node(self, name: str) -> EmbeddedServer:
        server = EmbeddedServer(self.folder / name)
        server.extensions_dir = self.data_dir  # Citus is built there
        return server

    def names(self) -> list[str]:
        workers = sorted((p.name for p in self.folder.glob("worker*") if p.is_dir()),
                         key=lambda n: int(n.removeprefix("worker") or 0))
        return ["coordinator", *workers] if (self.folder / "coordinator").exists() else workers

    def start(self, workers: int = 2) -> dict[str, Any]:
        if not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
            raise InvalidRequest(f"--workers must be from 1 to {MAX_WORKERS}", field="workers")
        if not any(b.name == "citus" for b in extensions.installed(self.data_dir)):
            raise NotEnabled("Citus is not built here: pgbraid extension build "
                             "../shared/vendor/citus-14.0.1.tar.gz", extension="citus")
        names = ["coordinator", *(f"worker{i}" for i in range(1, workers + 1))]
        running = {name: self.node(name).start() for name in names}
        for status in running.values():
            with psycopg.connect(status.dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
        coordinator = running["coordinator"]
        with psycopg.connect(coordinator.dsn, autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host(%s, %s)",
                         (str(coordinator.socket_dir), coordinator.port))
            known = {(host, port) for host, port in conn.execute(
                "SELECT nodename, nodeport FROM pg_dist_node")}
            for name in names[1:]:
                node = (str(running[name].socket_dir), running[name].port)
                if node not in known:
                    conn.execute("SELECT citus_add_node(%s, %s)", node)
        return self.status()

    def stop(self) -> dict[str, Any]:
        for name in reversed(self.names()):  # workers first, the coordinator last
            self.node(name).stop()
        return self.status()

    def status(self) -> dict[str, Any]:
        nodes = {name: self.node(name).status() for name in self.names()}
        coordinator = nodes.get("coordinator")
        body: dict[str, Any] = {
            "coordinator": _node(coordinator) if coordinator else None,
            "workers": [_node(s) | {"name": n} for n, s in nodes.items() if n != "coordinator"],
            "active_workers": None,
        }
        if coordinator is not None and coordinator.running:
            with psycopg.connect(coordinator.dsn, autocommit=True) as conn:
                body["active_workers"] = conn.execute(
                    "SELECT count(*) FROM citus_get_active_worker_nodes()").fetchone()[0]
        return body


def _node(status: ServerStatus) -> dict[str, Any]:
    return {"running": status.running, "dsn": status.dsn, "data_dir": str(status.data_dir)}


def active_workers(conn: psycopg.Connection) -> int | None:
    """Active Citus workers of the server behind ``conn`` (None: not a Citus coordinator)."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
                        ).fetchone()[0]:
        return None
    return conn.execute("SELECT count(*) FROM citus_get_active_worker_nodes()").fetchone()[0]
