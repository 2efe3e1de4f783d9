"""db/pipelining.py: a pipeline written in one go, against the pinned psycopg and the
suite's PostgreSQL (the same results and errors as psycopg's own pipeline)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import _pipeline_base

from pgbraid.db.pipelining import batched


@pytest.fixture()
def conn(server):
    with psycopg.connect(server.status().dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture()
def communicated(monkeypatch) -> list[int]:
    """Each run of psycopg's own send-as-you-queue step (one write per statement)."""
    runs: list[int] = []
    step = _pipeline_base.BasePipeline._communicate_gen

    def counted(self):
        runs.append(1)
        return (yield from step(self))

    monkeypatch.setattr(_pipeline_base.BasePipeline, "_communicate_gen", counted)
    return runs


def test_the_statements_and_their_rows_are_those_of_a_pipeline(conn, communicated):
    with batched(conn):
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        first = conn.cursor()
        first.execute("SELECT %s::int + 1", (41,))
        binary = conn.cursor(binary=True)
        binary.execute("SELECT x, md5(x::text) FROM generate_series(1, %s) x", (3000,))
        conn.execute("COMMIT")
    assert communicated == []  # nothing written statement by statement
    assert first.fetchone() == (42,)
    rows = binary.fetchall()
    assert len(rows) == 3000 and rows[-1][0] == 3000
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_rows_asked_for_inside_the_block_arrive(conn):
    with batched(conn):
        cur = conn.cursor()
        cur.execute("SELECT 'inside'")
        assert cur.fetchone() == ("inside",)
        cur.execute("SELECT %s", ("after",))
    assert cur.fetchone() == ("after",)


def test_an_error_stops_what_follows_and_leaves_the_connection_usable(conn):
    name = f"t_{uuid.uuid4().hex[:8]}"
    with pytest.raises(psycopg.errors.DivisionByZero):
        with batched(conn):
            conn.execute("BEGIN")
            conn.execute(psycopg.sql.SQL("CREATE TEMP TABLE {} (x int)").format(
                psycopg.sql.Identifier(name)))
            conn.execute("SELECT 1 / 0")
            conn.execute(psycopg.sql.SQL("INSERT INTO {} VALUES (1)").format(
                psycopg.sql.Identifier(name)))
    conn.rollback()
    assert conn.execute("SELECT to_regclass(%s)", (f"pg_temp.{name}",)).fetchone() == (None,)
    assert conn.execute("SELECT 2").fetchone() == (2,)


def test_a_nested_pipeline_is_psycopgs_own(conn):
    with conn.pipeline():
        outer = conn.cursor()
        outer.execute("SELECT 1")
        with batched(conn):
            inner = conn.cursor()
            inner.execute("SELECT 2")
    assert (outer.fetchone(), inner.fetchone()) == ((1,), (2,))


def test_a_known_bm25_search_writes_no_statement_alone(client, communicated):
    """Both round trips of a known bm25 search (tests/test_opening.py) are batched."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    client.create_pipeline(name, embedder="none")
    client.ingest(name, [{"id": f"d{i}", "title": "t", "text": f"quillwort {i}"}
                         for i in range(3)])
    client.search(name, "quillwort", type="bm25")  # the request is now known
    communicated.clear()
    response = client.search(name, "quillwort", type="bm25")
    assert len(response.hits) == 3
    assert communicated == []
