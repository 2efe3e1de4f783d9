"""PostgreSQL restarted under a running client or server: the pool's connections of the
old server are replaced before a request uses one. Each test runs a server of its own."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import psycopg
import pytest

import pgbraid
from pgbraid.db.liveness import in_words
from pgbraid.db.server import EmbeddedServer

from .serving import Served

DOCS = [{"id": "log4j", "title": "Apache Log4j2", "text": "Remote code execution through JNDI "
         "lookups in Apache Log4j2 (CVE-2021-44228)."},
        {"id": "exchange", "title": "Microsoft Exchange Server", "text": "Server-side request "
         "forgery in Microsoft Exchange Server (ProxyLogon)."}]


@pytest.fixture()
def own_server(tmp_path):
    server = EmbeddedServer(tmp_path / "own")
    server.start()
    yield server
    server.stop()


def _idle(client: pgbraid.Client, count: int) -> None:
    """Leave ``count`` connections idle in the client's pool (all die with the server)."""
    with ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(client._db.session(client.tenant))


def test_a_client_searches_on_after_the_server_restarts(own_server):
    with pgbraid.connect(data_dir=own_server.data_dir) as client:
        client.create_pipeline("kev", embedder="none")
        client.ingest("kev", DOCS)
        _idle(client, 4)
        own_server.restart()
        for _ in range(5):  # not one of the old server's connections answers any of them
            hits = client.search("kev", "jndi lookups", type="hybrid").hits
            assert [hit.document_id for hit in hits] == ["log4j"]
        assert client.ready() == {"status": "ready"}


def test_a_genuine_outage_says_what_happened_in_words(own_server):
    with pgbraid.connect(data_dir=own_server.data_dir, pool_timeout=1) as client:
        client.create_pipeline("kev", embedder="none")
        own_server.stop()
        with pytest.raises(pgbraid.BackendUnavailable) as raised:
            client.search("kev", "log4j")
    message = raised.value.message
    assert not re.search(r": [0-9A-Z]{5}$", message), message  # not only a SQLSTATE
    assert message.startswith("PostgreSQL is unavailable: the "), message
    assert message.endswith("no new connection came in time"), message


def test_a_lost_connection_is_said_in_words():
    assert in_words(psycopg.errors.AdminShutdown()) == (
        "the server was shut down or restarted, or an administrator ended the connection "
        "(SQLSTATE 57P01)")
    assert "lost" in in_words(psycopg.OperationalError("server closed the connection"))
    assert in_words(psycopg.errors.ConnectionFailure()).startswith("the connection to the "
                                                                   "server failed or was lost")


def test_http_search_and_readyz_answer_after_the_server_restarts(own_server, tmp_path):
    with pgbraid.connect(data_dir=own_server.data_dir) as client:
        client.create_pipeline("kev", embedder="none")
        client.ingest("kev", DOCS)
    served = Served(own_server.data_dir, tmp_path / "serve.log", "--no-auth")
    try:
        with served.client() as http:
            def search(_: int) -> int:
                return http.post("/pipelines/kev/search",
                                 json={"query": "jndi lookups", "type": "hybrid"}).status_code

            with ThreadPoolExecutor(4) as threads:  # several connections in the pool
                assert list(threads.map(search, range(8))) == [200] * 8
            own_server.restart()
            first = http.post("/pipelines/kev/search",
                              json={"query": "jndi lookups", "type": "hybrid"})
            assert first.status_code == 200, first.text
            assert [h["document_id"] for h in first.json()["hits"]] == ["log4j"]
            assert http.get("/readyz").status_code == 200
            assert [search(i) for i in range(4)] == [200] * 4
    finally:
        served.stop()
