"""A real ``pgbraid serve`` process on a free loopback port, for the HTTP tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

import pgbraid

SRC = Path(pgbraid.__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """``python -m pgbraid serve`` with its own environment, stderr kept in a file."""

    def __init__(self, data_dir: Path, log: Path, *args: str, env: dict[str, str] | None = None,
                 wait: str | None = "/readyz") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
        environment = {**os.environ, "PGBRAID_DATA_DIR": str(data_dir), "PYTHONPATH": path,
                       **(env or {})}
        if "PGBRAID_DSN" not in (env or {}):
            environment.pop("PGBRAID_DSN", None)
        self._stderr = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pgbraid", "serve", "--port", str(self.port), *args],
            env=environment, stdout=subprocess.DEVNULL, stderr=self._stderr)
        if wait:
            self.wait_for(wait)

    def wait_for(self, path: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not answering {path} within {timeout} s: {self.output()}")

    def output(self) -> str:
        self._stderr.flush()
        return self.log.read_text(errors="replace")

    def access_lines(self) -> list[dict]:
        lines = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                lines.append(json.loads(line))
        return lines

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()
        return self.process.returncode


@pytest.fixture(scope="session")
def served(data_dir, server, tmp_path_factory):
    """The session's HTTP server over the session's embedded PostgreSQL."""
    process = Served(data_dir, tmp_path_factory.mktemp("http") / "serve.log")
    yield process
    process.stop()


def tenant_client(data_dir: Path, tenant: str | None = None, **settings) -> pgbraid.Client:
    """A local admin Client of a tenant of its own (test set-up: pipelines, keys)."""
    return pgbraid.connect(data_dir=data_dir, tenant=tenant or f"t{uuid.uuid4().hex[:10]}",
                           **settings)
