"""A server that cannot reach PostgreSQL tells its clients so without saying where it
tried: no user, database, host, port, options or ssl settings in an HTTP body, a CLI
message or a Python exception; the server's log has them, without the passwords."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid import BackendUnavailable
from pgbraid.cli import app
from pgbraid.errors import error_body

from .serving import Served, free_port

runner = CliRunner()
PORT = str(free_port())  # nothing listens there
DSN = (f"host=127.0.0.1 port={PORT} user=appuser dbname=proddb password=hunter2 "
       "options='-c search_path=private' sslmode=disable sslpassword=sslsecret "
       "sslkey=/secret/client.key")
DETAILS = ("appuser", "proddb", "127.0.0.1", PORT, "search_path", "private", "sslmode",
           "client.key", "hunter2", "sslsecret")
SECRETS = ("hunter2", "sslsecret")


def _clean(text: str) -> None:
    for part in DETAILS:
        assert part not in text, (part, text)


def test_http_503_and_readyz_name_no_connection_detail(tmp_path, server):
    served = Served(tmp_path / "data", tmp_path / "serve.log", wait="/healthz",
                    env={"PGBRAID_DSN": DSN, "PGBRAID_POOL_TIMEOUT": "1"})
    try:
        with served.client() as http:
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["error"]["code"] == "backend_unavailable"
            _clean(ready.text)
            listed = http.get("/pipelines", headers={"Authorization": "Bearer pgb_" + "A" * 43})
            assert listed.status_code == 503, listed.text
            _clean(listed.text)
    finally:
        served.stop()
    log = served.log.read_text(errors="replace")
    assert "user=appuser" in log and "dbname=proddb" in log  # the operator's copy
    for secret in SECRETS:
        assert secret not in log


def test_python_and_cli_messages_name_no_connection_detail(env):
    with pgbraid.connect(dsn=DSN, pool_timeout=1) as client:
        with pytest.raises(BackendUnavailable) as raised:
            client.ready()
    _clean(str(raised.value))
    _clean(json.dumps(error_body(raised.value)))
    environment = {**env, "PGBRAID_DSN": DSN, "PGBRAID_POOL_TIMEOUT": "1"}
    result = runner.invoke(app, ["pipeline", "list", "--json"], env=environment)
    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["error"]["code"] == "backend_unavailable"
    _clean(result.output)
    human = runner.invoke(app, ["pipeline", "list"], env=environment)
    assert human.exit_code == 3 and "cannot connect to PostgreSQL" in human.output
    _clean(human.output)


def test_the_command_prints_no_connection_detail_on_stderr_either(env):
    import os
    import subprocess
    import sys

    from .serving import SRC

    environment = {**os.environ, **env, "PGBRAID_DSN": DSN, "PGBRAID_POOL_TIMEOUT": "1",
                   "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "pgbraid", "pipeline", "list"],
                          env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "cannot connect to PostgreSQL" in done.stdout + done.stderr
    _clean(done.stdout + done.stderr)
