"""Tests run against a real embedded PostgreSQL, started here once per session."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import pgbraid
from pgbraid.db.server import EmbeddedServer

# The shared corpora sit beside the checkout (../shared/data); PGBRAID_SHARED_DATA overrides.
DATA = Path(os.environ.get("PGBRAID_SHARED_DATA")
            or Path(__file__).resolve().parents[1].parent / "shared" / "data")


def pytest_configure(config):
    os.environ.pop("PGBRAID_DSN", None)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pgbraid-data")


@pytest.fixture(scope="session")
def server(data_dir):
    server = EmbeddedServer(data_dir)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def env(data_dir, server) -> dict[str, str]:
    """Environment for CLI runs against the session's server."""
    return {"PGBRAID_DATA_DIR": str(data_dir)}


@pytest.fixture()
def client(data_dir, server):
    with pgbraid.connect(data_dir=data_dir) as client:
        yield client


@pytest.fixture()
def pipeline(client) -> str:
    """A lexical pipeline (no embedder: nothing to embed, fast)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    return name


def shared(*parts: str) -> Path:
    path = DATA.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"shared data missing: {path}")
    return path


@pytest.fixture()
def superuser(server):
    """A superuser connection for test set-up (user tables, catalog checks); pgbraid
    itself offers no such handle."""
    import psycopg

    with psycopg.connect(server.status().dsn, autocommit=True) as conn:
        yield conn
