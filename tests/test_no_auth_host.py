"""``serve --no-auth`` takes requests for a loopback Host only and from no web page of
another origin (DNS rebinding: a page from attacker.example resolved to 127.0.0.1)."""

from __future__ import annotations

import signal
import uuid

import pytest

from .serving import Served, tenant_client


@pytest.fixture(scope="module")
def local(data_dir, server, tmp_path_factory):
    tenant = f"t{uuid.uuid4().hex[:10]}"
    with tenant_client(data_dir, tenant) as client:
        client.create_pipeline("local", embedder="none")
    served = Served(data_dir, tmp_path_factory.mktemp("noauth") / "serve.log", "--no-auth",
                    env={"PGBRAID_TENANT": tenant})
    yield served
    assert served.stop() in (0, -signal.SIGTERM)


def _refused(answer) -> None:
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "forbidden" and '"name"' not in answer.text


@pytest.mark.parametrize("host", ["attacker.example:{port}", "attacker.example",
                                  "127.0.0.1.attacker.example:{port}", "localhost.:{port}",
                                  "10.0.0.1:{port}", "localhost:{port}@evil"])
def test_a_foreign_host_is_refused(local, host):
    with local.client() as http:
        _refused(http.get("/pipelines", headers={"Host": host.format(port=local.port)}))
        _refused(http.post("/pipelines", json={"name": "rebound", "embedder": "none"},
                           headers={"Host": host.format(port=local.port)}))


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}",
                                  "LOCALHOST:{port}", "127.0.0.1"])
def test_a_loopback_host_is_taken(local, host):
    with local.client() as http:
        answer = http.get("/pipelines", headers={"Host": host.format(port=local.port)})
        assert answer.status_code == 200, answer.text
        assert [p["name"] for p in answer.json()] == ["local"]


def test_a_foreign_origin_is_refused_and_the_same_origin_taken(local):
    host = f"127.0.0.1:{local.port}"
    with local.client() as http:
        for origin in ("http://attacker.example", f"http://attacker.example:{local.port}",
                       "null", f"http://localhost:{local.port}", f"file://{host}"):
            _refused(http.get("/pipelines", headers={"Origin": origin}))
            _refused(http.delete("/pipelines/local", headers={"Origin": origin}))
        assert http.get("/pipelines", headers={"Origin": f"http://{host}"}).status_code == 200
        listed = http.get("/pipelines")  # no Origin: not a web page's request
        assert [p["name"] for p in listed.json()] == ["local"]  # nothing was deleted
        assert http.get("/healthz", headers={"Host": "attacker.example"}).status_code == 200
