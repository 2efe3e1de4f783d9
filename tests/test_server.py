"""The embedded server's lifecycle, including the traps listed in DESIGN.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from typer.testing import CliRunner

from pgbraid.cli import app
from pgbraid.db.server import EmbeddedServer

runner = CliRunner()


def _cli(args, data_dir):
    return runner.invoke(app, args, env={"PGBRAID_DATA_DIR": str(data_dir)})


def _wait_dead(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def test_dsn_has_socket_folder_and_port(server):
    status = server.status()
    assert status.running
    assert f"port={status.port}" in status.dsn and str(status.socket_dir) in status.dsn
    with psycopg.connect(status.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_socket_only_by_default(server):
    with psycopg.connect(server.status().dsn) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW unix_socket_permissions").fetchone() == ("0700",)


def test_kill_9_of_the_holding_process_then_status_and_start_recover(tmp_path):
    data_dir = tmp_path / "srv"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, pgbraid; c = pgbraid.connect(data_dir=sys.argv[1]);"
         " c.pipelines(); print('ready', flush=True); time.sleep(600)", str(data_dir)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)

        status = json.loads(_cli(["server", "status", "--json"], data_dir).stdout)
        assert status["running"] is True  # the server outlives the process that started it
        started = _cli(["server", "start", "--json"], data_dir)
        assert started.exit_code == 0 and json.loads(started.stdout)["pid"] == status["pid"]

        # Now kill the postmaster itself: a stale postmaster.pid is left behind.
        os.kill(status["pid"], signal.SIGKILL)
        _wait_dead(status["pid"])
        stale = json.loads(_cli(["server", "status", "--json"], data_dir).stdout)
        assert stale["running"] is False and "stale" in stale["detail"]
        recovered = _cli(["server", "start", "--json"], data_dir)
        assert recovered.exit_code == 0, recovered.stdout
        body = json.loads(recovered.stdout)
        assert body["running"] and body["pid"] != status["pid"]
        with psycopg.connect(body["dsn"]) as conn:
            assert conn.execute("SELECT count(*) FROM pgbraid.pipelines").fetchone() is not None
    finally:
        holder.kill()
        EmbeddedServer(data_dir).stop()
    assert not EmbeddedServer(data_dir).status().running


def test_zombie_postmaster_pid_file_is_cleared(tmp_path):
    """A postmaster that died but was never reaped still answers kill(pid, 0)."""
    server = EmbeddedServer(tmp_path / "z")
    server.start()
    server.stop()
    zombie = subprocess.Popen(["sleep", "0"])  # our child; never waited on -> zombie
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{zombie.pid}/stat") as stat:
            if stat.read().split()[2] == "Z":
                break
        time.sleep(0.05)
    pid_file = server.cluster / "postmaster.pid"
    pid_file.write_text(f"{zombie.pid}\n{server.cluster}\n0\n5432\n{server.socket_dir}\n\n0 0\nready\n")
    try:
        status = server.start(timeout=30)
        assert status.running and status.pid != zombie.pid
    finally:
        zombie.wait()
        server.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="the root trap applies to root only")
def test_as_root_the_server_runs_as_its_own_system_user(server):
    import psutil

    assert psutil.Process(server.status().pid).username() == "pgbraid"
