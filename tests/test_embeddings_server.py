"""``embeddings-serve``: a bearer key when given (and required off loopback), and a
body limit checked before the body is read."""

from __future__ import annotations

import threading

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid.cli import app
from pgbraid.embedders.server import MAX_BODY_BYTES, make_server

KEY = "s3cret-embeddings-key"


@pytest.fixture(scope="module")
def model():
    return pgbraid.embedders.get("minilm")


@pytest.fixture()
def keyed(model):
    server = make_server(model, "127.0.0.1", 0, key=KEY)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_a_keyed_server_refuses_requests_without_the_key(keyed):
    body = {"input": "hello", "model": "minilm"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        assert httpx.post(keyed + "/embeddings", json=body, headers=headers).status_code == 401
        assert httpx.get(keyed + "/models", headers=headers).status_code == 401
    ok = httpx.post(keyed + "/embeddings", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == 384


def test_the_openai_embedder_sends_the_key(data_dir, server, keyed, model):
    with pgbraid.connect(data_dir=data_dir, openai_url=keyed, openai_model="minilm",
                         openai_key=KEY) as client:
        np.testing.assert_allclose(client.embedder("openai").embed_documents(["a sentence"]),
                                   model.embed_documents(["a sentence"]), atol=1e-5)


def test_a_body_over_the_limit_is_413_unread(keyed):
    answer = httpx.post(keyed + "/embeddings", content=b"x" * (MAX_BODY_BYTES + 1),
                        headers={"Authorization": f"Bearer {KEY}",
                                 "Content-Type": "application/json"})
    assert answer.status_code == 413


def test_without_a_key_only_loopback_is_bound(model, monkeypatch):
    with pytest.raises(ValueError, match="loopback"):
        make_server(model, "0.0.0.0", 0)
    monkeypatch.delenv("PGBRAID_EMBEDDINGS_KEY", raising=False)
    result = CliRunner().invoke(app, ["embeddings-serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2 and "PGBRAID_EMBEDDINGS_KEY" in result.output
