"""``pgbraid serve`` as an operator sees it: graceful shutdown, the no-auth rule,
workers, and PostgreSQL slow (504) or gone (503). Each test runs a server of its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx
import psycopg
import pytest

from .serving import SRC, Served, free_port, tenant_client


def test_shutdown_lets_an_ingestion_in_flight_finish_and_commit_whole(
        data_dir, server, tmp_path, superuser):
    served = Served(data_dir, tmp_path / "serve.log")
    with tenant_client(data_dir) as tenant:
        tenant.create_pipeline("bulk", embedder="none")
        key = tenant.create_key(pipeline="bulk", permissions="write")["key"]
        docs = [{"id": f"d{i:04d}", "text": f"document {i} about pumps and valves " * 20}
                for i in range(600)]
        answer: dict = {}

        def post() -> None:
            with served.client(key) as http:
                answer["response"] = http.post("/pipelines/bulk/documents", json=docs, timeout=120)

        writer = threading.Thread(target=post)
        writer.start()
        count = "SELECT count(*) FROM pgbraid.documents WHERE tenant_id = %s"
        deadline = time.monotonic() + 60
        while superuser.execute(count, (tenant.tenant,)).fetchone()[0] == 0:
            assert time.monotonic() < deadline, served.output()
            time.sleep(0.02)
        stopped_at = superuser.execute(count, (tenant.tenant,)).fetchone()[0]
        served.process.terminate()  # SIGTERM while batches are still being written
        writer.join(120)
        # uvicorn finishes its shutdown, then re-raises the signal: exit status "killed by TERM"
        assert served.process.wait(60) in (0, -signal.SIGTERM), served.output()
        assert "Application shutdown complete" in served.output()
        response = answer["response"]
        assert response.status_code == 200 and response.json()["added"] == 600
        assert stopped_at < 600  # it was in flight
        assert superuser.execute(count, (tenant.tenant,)).fetchone()[0] == 600
        with pytest.raises(httpx.TransportError):  # and nothing is accepted after it
            httpx.get(served.url + "/healthz", timeout=2)


def test_no_auth_is_refused_off_loopback_and_said_aloud_on_it(data_dir, server, tmp_path):
    refused = subprocess.run(
        [sys.executable, "-m", "pgbraid", "serve", "--no-auth", "--host", "0.0.0.0",
         "--port", str(free_port())], capture_output=True, text=True, timeout=60,
        env={"PGBRAID_DATA_DIR": str(data_dir), "PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert refused.returncode == 2 and "loopback" in refused.stdout + refused.stderr
    tenant = f"t{uuid.uuid4().hex[:10]}"
    with tenant_client(data_dir, tenant) as client:
        client.create_pipeline("local", embedder="none")
    served = Served(data_dir, tmp_path / "serve.log", "--no-auth", "--workers", "2",
                    env={"PGBRAID_TENANT": tenant})
    try:
        assert "authentication is OFF" in served.output()
        with served.client() as http:
            for _ in range(6):  # spread over both workers
                assert [p["name"] for p in http.get("/pipelines").json()] == ["local"]
            made = http.post("/pipelines", json={"name": "made", "embedder": "none"})
            assert made.status_code == 201
    finally:
        assert served.stop() in (0, -signal.SIGTERM)


def test_a_statement_over_the_timeout_is_504(data_dir, server, tmp_path):
    served = Served(data_dir, tmp_path / "serve.log", env={"PGBRAID_STATEMENT_TIMEOUT_MS": "300"})
    try:
        with tenant_client(data_dir) as tenant:
            tenant.create_pipeline("slow", embedder="none")
            key = tenant.create_key(pipeline="slow", permissions="read")["key"]
            with psycopg.connect(server.status().dsn) as locker, served.client(key) as http:
                locker.execute("LOCK TABLE pgbraid.pipelines IN ACCESS EXCLUSIVE MODE")
                response = http.get("/pipelines/slow")
                locker.rollback()
                assert response.status_code == 504, response.text
                assert response.json()["error"]["code"] == "backend_timeout"
                assert http.get("/pipelines/slow").status_code == 200
    finally:
        served.stop()


def test_postgresql_out_of_reach_is_503_and_liveness_stays_up(data_dir, server, tmp_path):
    dsn = f"host=127.0.0.1 port={free_port()} user=nobody dbname=none connect_timeout=1"
    served = Served(data_dir, tmp_path / "serve.log", wait="/healthz",
                    env={"PGBRAID_DSN": dsn, "PGBRAID_POOL_TIMEOUT": "1"})
    try:
        with served.client("pgb_" + "A" * 43) as http:
            assert http.get("/healthz").status_code == 200
            for path in ("/readyz", "/pipelines"):
                response = http.get(path)
                assert response.status_code == 503, response.text
                body = response.json()["error"]
                assert body["code"] == "backend_unavailable"
        with served.client() as anonymous:
            assert anonymous.get("/pipelines").status_code == 401  # no key: nothing to look up
    finally:
        served.stop()
