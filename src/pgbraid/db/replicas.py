"""Read replicas: searches on streaming standbys, everything else on the primary.

``PGBRAID_READ_DSN`` names one or more standbys (comma-separated). Each is
checked before it serves: it must be in recovery (``pg_is_in_recovery()``) and
a copy of the primary's cluster (``pg_control_system()``'s system identifier);
a DSN that fails either is refused with InvalidRequest when pgbraid connects,
and skipped for good if it fails later (a promoted standby). Its connections
are also opened with ``default_transaction_read_only=on``, so even a server
that stopped being a standby receives no write from pgbraid.

A monitor thread samples, every ``refresh_s``, the primary's WAL position and
each standby's replay position; a standby is *usable* when it answered the last
sample and its replay lag (bytes of WAL behind the primary) is within
``max_lag_bytes``. ``choose`` picks one for a search:

- ``consistency: "primary"`` → the primary;
- ``min_lsn`` → a usable standby whose replay position has reached it; the
  router polls for up to ``wait_ms`` and then answers from the primary;
- otherwise → the usable standbys in turn (round robin), else the primary.

Which server answered, why, and its lag go into the trace (``Served``). ``run``
reruns a search on the primary when a standby fails under it (and skips that
standby until it answers a sample), so a standby going down costs a retry,
never an error.

The BM25 posting cache stays exact on any server of the cluster: its entries
are immutable segments keyed by pipeline id, creation time and segment number,
and the segments a query uses are decided by the server queried, in its snapshot.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, TypeVar

import psycopg

from ..errors import BackendUnavailable, InvalidRequest
from ..models import LSN
from .database import Database, logged_dsn

logger = logging.getLogger("pgbraid")

POLL_S = 0.01
T = TypeVar("T")
_STANDBY = """
SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system()),
       pg_last_wal_replay_lsn()::text,
       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END
"""
_PRIMARY = "SELECT (SELECT system_identifier FROM pg_control_system()), pg_current_wal_lsn()::text"


def parse_lsn(value: Any, field_name: str = "min_lsn") -> int:
    """A ``pg_lsn`` text (``16/B374D848``) as an integer; InvalidRequest otherwise."""
    if not isinstance(value, str) or not LSN.fullmatch(value):
        raise InvalidRequest(f"{field_name} must be a PostgreSQL LSN such as '0/16B3748' "
                             "(the lsn of an ingest answer)", field=field_name)
    high, low = value.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def split_dsns(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@dataclass(frozen=True)
class Served:
    """Which server answered a search, and why (the trace's ``server``)."""

    server: str
    role: Literal["primary", "replica"]
    reason: str | None = None
    replay_lsn: str | None = None
    lag_bytes: int | None = None
    lag_s: float | None = None
    wait_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Replica:
    name: str
    db: Database
    usable: bool = False
    refused: str | None = None
    replay: int = 0
    lag_bytes: int | None = None
    lag_s: float | None = None
    sampled: float = 0.0
    problem: str = "not checked yet"
    lock: threading.Lock = field(default_factory=threading.Lock)


class Router:
    def __init__(self, primary: Database, dsns: list[str], *, max_lag_bytes: int,
                 wait_ms: int, refresh_s: float, connect_timeout: float = 2.0) -> None:
        self.primary = primary
        self.max_lag_bytes = max_lag_bytes
        self.wait_ms = wait_ms
        self.refresh_s = refresh_s
        # Named by position in the trace (a DSN would show hosts, users and paths).
        self.replicas = [Replica(f"replica-{n}", Database(
            dsn, statement_timeout_ms=primary.statement_timeout_ms, max_size=primary._max_size,
            timeout=connect_timeout, standby=True)) for n, dsn in enumerate(dsns, start=1)]
        self._system_id: int | None = None
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------

    def open(self) -> None:
        """Check every standby once (refusing a primary or another cluster's standby)
        and start the monitor. A standby that is down now is checked when it is back."""
        with self._started:
            if self._thread is not None:
                return
            self.sample()
            # By name: a client never sees a DSN (the server's log has it, below).
            refused = [f"{r.name} {r.refused}" for r in self.replicas if r.refused]
            if refused:
                raise InvalidRequest("PGBRAID_READ_DSN refused: " + "; ".join(refused),
                                     setting="PGBRAID_READ_DSN")
            self._thread = threading.Thread(target=self._monitor, name="pgbraid-replicas",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for replica in self.replicas:
            replica.db.close()

    def _monitor(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.sample()
            except Exception:  # the primary down: searches report it themselves
                logger.warning("pgbraid: replica monitor could not sample", exc_info=True)

    # -- sampling -------------------------------------------------------------------

    def sample(self) -> None:
        """The primary's WAL position, then each standby's replay position and lag."""
        with self.primary.admin() as conn:
            system_id, lsn = conn.execute(_PRIMARY).fetchone()
        self._system_id = system_id
        primary_lsn = parse_lsn(lsn, "primary lsn")
        for replica in self.replicas:
            self._sample(replica, primary_lsn)

    def _sample(self, replica: Replica, primary_lsn: int | None) -> None:
        if replica.refused:
            return
        try:
            with replica.db.admin() as conn:
                recovering, system_id, replay, lag_s = conn.execute(_STANDBY).fetchone()
        except (BackendUnavailable, psycopg.Error) as exc:
            self._down(replica, f"unreachable ({getattr(exc, 'message', None) or 'error'})")
            return
        if not recovering:
            replica.refused = "is not a standby (pg_is_in_recovery() is false): a primary"
        elif self._system_id is not None and system_id != self._system_id:
            replica.refused = (f"is a standby of another cluster (system identifier "
                               f"{system_id}, the primary's is {self._system_id})")
        if replica.refused:
            replica.usable = False
            logger.error("pgbraid: read DSN %s (%s) refused: %s", replica.name,
                         logged_dsn(replica.db.dsn), replica.refused)
            return
        replica.replay = parse_lsn(replay, "replay lsn") if replay else 0
        replica.lag_s = round(float(lag_s), 3) if lag_s is not None else None
        replica.sampled = time.monotonic()
        if primary_lsn is not None:
            replica.lag_bytes = max(0, primary_lsn - replica.replay)
        if replica.lag_bytes is not None and replica.lag_bytes > self.max_lag_bytes:
            replica.usable = False
            replica.problem = (f"lagging {replica.lag_bytes} bytes of WAL "
                               f"(PGBRAID_READ_MAX_LAG_BYTES={self.max_lag_bytes})")
        else:
            replica.usable, replica.problem = True, ""

    def _down(self, replica: Replica, problem: str) -> None:
        replica.usable, replica.problem = False, problem

    def failed(self, name: str, exc: Exception) -> None:
        """A search on this standby failed for want of it: skip it until it answers a sample."""
        for replica in self.replicas:
            if replica.name == name:
                self._down(replica, f"failed a search ({getattr(exc, 'message', 'error')})")

    # -- routing --------------------------------------------------------------------

    def run(self, consistency: str | None, min_lsn: str | None,
            search: Callable[[Database], T]) -> tuple[T, Served]:
        """``search`` on the chosen server; if a replica fails under it (down, crashed),
        the whole search again on the primary: a complete answer, never part of one."""
        db, served = self.choose(consistency, min_lsn)
        try:
            return search(db), served
        except BackendUnavailable as exc:
            if served.role != "replica":
                raise
            self.failed(served.server, exc)
            return search(self.primary), Served(
                "primary", "primary",
                reason=f"{served.server} failed during the search: {exc.message}")

    def choose(self, consistency: str | None, min_lsn: str | None) -> tuple[Database, Served]:
        if consistency == "primary":
            return self.primary, Served("primary", "primary", reason="consistency: primary")
        self.open()
        if min_lsn is not None:
            return self._reached(parse_lsn(min_lsn))
        usable = [r for r in self.replicas if r.usable]
        if not usable:
            return self.primary, Served("primary", "primary", reason=self._why_not())
        best = usable[next(self._turn) % len(usable)]  # every usable replica takes its turn
        return best.db, Served(best.name, "replica", replay_lsn=format_lsn(best.replay),
                               lag_bytes=best.lag_bytes, lag_s=best.lag_s)

    def _reached(self, wanted: int) -> tuple[Database, Served]:
        """The least-lagging usable standby that has replayed ``wanted``, waiting up to
        ``wait_ms`` for one; else the primary (which has it: it issued the lsn)."""
        began = time.monotonic()
        deadline = began + self.wait_ms / 1000
        while True:
            usable = sorted((r for r in self.replicas if r.usable), key=lambda r: r.lag_bytes or 0)
            if not usable:
                return self.primary, Served("primary", "primary", reason=self._why_not())
            for replica in usable:
                if replica.replay < wanted:
                    with replica.lock:
                        self._sample(replica, None)
                if replica.usable and replica.replay >= wanted:
                    return replica.db, Served(
                        replica.name, "replica", replay_lsn=format_lsn(replica.replay),
                        lag_bytes=replica.lag_bytes, lag_s=replica.lag_s,
                        wait_ms=round((time.monotonic() - began) * 1000, 3))
            if time.monotonic() >= deadline:
                reason = (f"no replica replayed min_lsn {format_lsn(wanted)} within "
                          f"{self.wait_ms} ms (PGBRAID_READ_WAIT_MS)")
                return self.primary, Served("primary", "primary", reason=reason,
                                            wait_ms=round((time.monotonic() - began) * 1000, 3))
            time.sleep(POLL_S)

    def _why_not(self) -> str:
        return "no usable replica: " + "; ".join(
            f"{r.name} {r.refused or r.problem}" for r in self.replicas)

    def status(self) -> list[dict[str, Any]]:
        return [{"server": r.name, "usable": r.usable, "problem": r.refused or r.problem or None,
                 "replay_lsn": format_lsn(r.replay) if r.replay else None,
                 "lag_bytes": r.lag_bytes, "lag_s": r.lag_s} for r in self.replicas]
