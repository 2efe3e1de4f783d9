"""Tests run against a real embedded PostgreSQL, started here once per session."""

from __future__ import annotations

import base64
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
    # Live sources in the tests are HTTP servers on loopback (tests/test_live.py).
    os.environ.setdefault("PGBRAID_LIVE_PRIVATE_HOSTS", "1")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pgbraid-data")


CITUS = os.environ.get("PGBRAID_TEST_CITUS", "") not in ("", "0")
"""PGBRAID_TEST_CITUS=1: the session's server is the coordinator of a local Citus
cluster (coordinator + 2 workers, ``pgbraid cluster start``), so any test module runs
against a distributed pgbraid schema; Citus is built from ../shared/vendor into
PGBRAID_TEST_CITUS_DIR (default /tmp/pgbraid-test-citus, cached there), and every
test skips where it cannot be built. Run a chosen subset: README, "Citus"."""
CITUS_DIR = Path(os.environ.get("PGBRAID_TEST_CITUS_DIR") or "/tmp/pgbraid-test-citus")


def citus_build() -> Path:
    """The Citus build the tests use (a no-op once built); skips where it cannot be."""
    import shutil

    from pgbraid.db import extensions

    source = VENDOR / VENDORED["citus"]
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("citus cannot be built here: no gcc or make")
    if not source.exists():
        pytest.skip(f"citus cannot be built here: {source} is missing")
    extensions.build(source, CITUS_DIR)
    return CITUS_DIR


@pytest.fixture(scope="session")
def server(data_dir):
    if CITUS:
        from pgbraid.db.cluster import LocalCluster

        cluster = LocalCluster(citus_build(), folder=data_dir / "citus")
        started = cluster.start(2)
        os.environ["PGBRAID_DSN"] = started["coordinator"]["dsn"]
        # an external server: what the embedded one allows the default tenant by default
        os.environ.setdefault("PGBRAID_SOURCE_SCHEMAS", "default=public")
        # and the key the embedded server keeps in its data dir (keyring.py)
        os.environ.setdefault("PGBRAID_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
        yield cluster.node("coordinator")
        os.environ.pop("PGBRAID_DSN", None)
        cluster.stop()
        return
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


VENDOR = Path(os.environ.get("PGBRAID_SHARED_VENDOR")
              or Path(__file__).resolve().parents[1].parent / "shared" / "vendor")
VENDORED = {"age": "apache-age-PG18-1.8.0.tar.gz", "pg_textsearch": "pg_textsearch-1.4.0.tar.gz",
            "citus": "citus-14.0.1.tar.gz"}


@pytest.fixture(scope="session")
def build_extension(data_dir, server):
    """Build a vendored extension into the session's data dir, once per test session
    (restarting the session's server when it needs shared_preload_libraries); skips
    where it cannot be built (no gcc/make, no vendored source)."""
    import shutil

    from pgbraid.db import extensions

    def build(name: str):
        if CITUS:
            pytest.skip(f"{name} is not tried on a Citus coordinator (docs/scale.md, section 3)")
        source = VENDOR / VENDORED[name]
        if shutil.which("gcc") is None or shutil.which("make") is None:
            pytest.skip(f"{name} cannot be built here: no gcc or make")
        if not source.exists():
            pytest.skip(f"{name} cannot be built here: {source} is missing")
        built = extensions.build(source, data_dir)
        if built.restart_required:
            server.restart()
        return built

    return build
