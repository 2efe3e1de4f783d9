"""A streaming replica of the embedded server, made with the wheel's ``pg_basebackup -R``.

``pgbraid server replica start`` copies the running embedded server into
``<data dir>/replicas/<name>/cluster`` (``pg_basebackup -R -X stream`` over the
primary's Unix socket, with a physical replication slot so the primary keeps the
WAL the replica has not received yet) and starts it as a hot standby on its own
socket folder: socket only, like the primary. Its DSN goes into
``PGBRAID_READ_DSN``. ``remove`` stops it, deletes its folder and drops its slot
(a slot left behind would keep WAL on the primary for ever).
"""

from __future__ import annotations

import re
import shutil

import psycopg
from psycopg import sql

from ..errors import BackendUnavailable, InvalidRequest
from .server import EmbeddedServer, ServerStatus, bin_dir

NAME = re.compile(r"[a-z0-9_]{1,40}")
STANDBY_OPTIONS = "-c hot_standby=on -c hot_standby_feedback=on"
"""Feedback: the primary's vacuum keeps rows a replica's running search still reads,
so a long search on a replica is not cancelled by replay."""


def slot_name(name: str) -> str:
    return f"pgbraid_{name}"


class EmbeddedReplica(EmbeddedServer):
    def __init__(self, primary: EmbeddedServer, name: str = "replica1") -> None:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise InvalidRequest("a replica name is 1 to 40 of a-z, 0-9 and _", field="name")
        super().__init__(primary.data_dir / "replicas" / name)
        self.name = name
        self.primary = primary
        self.extensions_dir = primary.data_dir
        self.extra_options = STANDBY_OPTIONS

    def _initdb(self) -> None:
        """Instead of initdb: a base backup of the running primary, set up to follow it."""
        primary = self.primary.status()
        if not primary.running:
            raise BackendUnavailable("the embedded server is not running: `pgbraid server "
                                     "start` first")
        if self.cluster.exists() and any(self.cluster.iterdir()):
            raise BackendUnavailable(f"{self.cluster} exists but holds no PostgreSQL cluster")
        self._drop_slot(primary)  # a slot left by a replica removed by hand
        self._run([str(bin_dir() / "pg_basebackup"), "-D", str(self.cluster),
                   "-h", str(primary.socket_dir), "-p", str(primary.port), "-U", "postgres",
                   "-R", "-X", "stream", "-c", "fast", "-C", "-S", slot_name(self.name)])

    def remove(self) -> ServerStatus:
        """Stop it, delete its folder and drop its replication slot on the primary."""
        status = self.stop()
        if status.running:
            raise BackendUnavailable(f"replica {self.name} did not stop")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        primary = self.primary.status()
        if primary.running:
            self._drop_slot(primary)
        return self.status()

    def _drop_slot(self, primary: ServerStatus) -> None:
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SELECT pg_drop_replication_slot(slot_name) FROM "
                                 "pg_replication_slots WHERE slot_name = {} AND NOT active")
                         .format(sql.Literal(slot_name(self.name))))
