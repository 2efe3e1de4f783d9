"""Housekeeping after a commit (housekeeping.py) that meets a lock another session holds:
the committed call returns its normal result with a warning, the same over Python, CLI
and HTTP, never an error; a deleted pipeline's indexes left behind are dropped by the
tenant's next pipeline delete.

Each test holds a real lock on a second connection, and gives every connection of the
process an operator's short ``lock_timeout`` (PGOPTIONS): before the fix, housekeeping
that met the lock raised after the commit (and without one, waited for the lock)."""

from __future__ import annotations

import json
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid import housekeeping
from pgbraid.cli import app
from pgbraid.db.server import EmbeddedServer
from pgbraid.errors import NotFound

from .serving import Served, served  # noqa: F401  (fixture)

LOCK_MS = 300
HELD_AT_MOST = 60.0  # a lock the test forgot is let go of, so nothing waits for ever
LOCKED = "another session held a lock it needs"


@pytest.fixture()
def short_locks(monkeypatch) -> dict[str, str]:
    env = {"PGOPTIONS": f"-c lock_timeout={LOCK_MS}",
           "PGBRAID_HOUSEKEEPING_LOCK_TIMEOUT_MS": str(LOCK_MS)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@contextmanager
def held(dsn: str, *statements: str) -> Iterator[psycopg.Connection]:
    """A second connection whose transaction runs ``statements`` and holds their locks."""
    conn = psycopg.connect(dsn)
    timer = threading.Timer(HELD_AT_MOST, conn.cancel)
    timer.start()
    try:
        for statement in statements:
            conn.execute(statement)
        yield conn
    finally:
        timer.cancel()
        conn.rollback()
        conn.close()


def _docs(n: int, tag: str) -> list[dict]:
    return [{"id": f"{tag}-{i}", "text": f"housekeeping {tag} words number {i}"} for i in range(n)]


def test_a_small_ingest_whose_merge_meets_a_lock_is_committed_with_a_warning(
        data_dir, server, short_locks):
    name, dsn = f"hk-{uuid.uuid4().hex[:8]}", server.status().dsn
    with pgbraid.connect(data_dir=data_dir, tenant=f"t{uuid.uuid4().hex[:10]}") as client:
        client.create_pipeline(name, embedder="none")
        holder = psycopg.connect(dsn)

        def lock_after_commit(report) -> None:  # after the only batch commits
            holder.execute("DROP INDEX pgbraid.fragments_tsv")  # its AccessExclusive lock, held

        try:
            report = client.ingest(name, _docs(3, "small"), progress=lock_after_commit)
        finally:
            holder.rollback()
            holder.close()
        assert (report.added, report.fragments) == (3, 3)
        assert [w["step"] for w in report.warnings] == ["merge_pending_lists"]
        assert LOCKED in report.warnings[0]["message"]
        assert report.as_dict()["warnings"] == report.warnings
        hits = client.search(name, "housekeeping words", type="fulltext", params={"k": 10}).hits
        assert {h.document_id for h in hits} == {"small-0", "small-1", "small-2"}
        again = client.ingest(name, _docs(1, "later"))  # the lock is gone: no warning
        assert again.added == 1 and again.warnings == []


@pytest.fixture()
def fresh(tmp_path) -> Iterator[Path]:
    """A data dir of its own: its planner statistics are those of this test's ingests,
    so a 1,000-fragment ingest is a bulk load that refreshes them (writes.ANALYZE_SHARE)."""
    data_dir = tmp_path / "fresh"
    yield data_dir
    EmbeddedServer(data_dir).stop()


def test_a_bulk_ingest_whose_analyze_meets_a_lock_answers_alike_everywhere(
        fresh, short_locks, tmp_path):
    """ANALYZE waits for SHARE UPDATE EXCLUSIVE, which inserts do not: the lock held from
    the start lets every batch commit and stops only the statistics."""
    with pgbraid.connect(data_dir=fresh, tenant="default") as client:
        client.create_pipeline("bulk", embedder="none")
        key = client.create_key(pipeline="bulk", permissions="write")["key"]
        dsn = client._db.dsn
    http = Served(fresh, tmp_path / "serve.log", env=short_locks)
    answers = {}
    try:
        with held(dsn, "LOCK TABLE pgbraid.versions IN SHARE UPDATE EXCLUSIVE MODE"):
            with pgbraid.connect(data_dir=fresh, tenant="default") as client:
                answers["python"] = client.ingest("bulk", _docs(1000, "py")).as_dict()
            records = tmp_path / "cli.jsonl"
            records.write_text("".join(json.dumps(d) + "\n" for d in _docs(1000, "cli")))
            result = CliRunner().invoke(app, ["ingest", "bulk", str(records), "--json"],
                                        env={"PGBRAID_DATA_DIR": str(fresh), **short_locks})
            assert result.exit_code == 0, result.output
            answers["cli"] = json.loads(result.stdout)
            with http.client(key) as api:
                posted = api.post("/pipelines/bulk/documents", json=_docs(1000, "http"))
            assert posted.status_code == 200, posted.text
            answers["http"] = posted.json()
    finally:
        http.stop()
    for where, body in answers.items():
        assert (body["added"], body["fragments"], body["failed"]) == (1000, 1000, []), where
        assert [w["step"] for w in body["warnings"]] == ["merge_pending_lists"], (where, body)
        assert LOCKED in body["warnings"][0]["message"], where
        assert set(body) == set(answers["python"]), where
    with pgbraid.connect(data_dir=fresh, tenant="default") as client:
        assert client.pipeline("bulk").documents == 3000


def _hnsw(superuser, pipeline_id: int) -> list[str]:
    return [r[0] for r in superuser.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname LIKE %s",
        (f"embeddings_p{pipeline_id}\\_%",))]


def test_a_pipeline_delete_whose_index_drop_meets_a_lock_is_done_and_cleaned_up_later(
        data_dir, server, superuser, short_locks, served):
    tenant = f"t{uuid.uuid4().hex[:10]}"
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": tenant, **short_locks}
    with pgbraid.connect(data_dir=data_dir, tenant=tenant) as client:
        ids = {}
        for where in ("python", "cli", "http", "later"):
            client.create_pipeline(f"hk-{where}", embedder="minilm")
            ids[where] = superuser.execute(
                "SELECT id FROM pgbraid.pipelines WHERE tenant_id = %s AND name = %s",
                (tenant, f"hk-{where}")).fetchone()[0]
            assert len(_hnsw(superuser, ids[where])) == 3
        key = client.create_key(pipeline="*", permissions="admin", admin=True)["key"]
        answers = {}
        # a search's lock on the embeddings table: DROP INDEX waits for it, DELETE does not
        with held(server.status().dsn, "SELECT count(*) FROM pgbraid.embeddings"):
            answers["python"] = client.delete_pipeline("hk-python")
            result = CliRunner().invoke(app, ["pipeline", "delete", "hk-cli", "--json"], env=env)
            assert result.exit_code == 0, result.output
            answers["cli"] = json.loads(result.stdout)
            with served.client(key) as api:
                answers["http"] = api.delete("/pipelines/hk-http").json()
        for where, body in answers.items():
            assert body["deleted"] == f"hk-{where}", body
            assert [w["step"] for w in body["warnings"]] == ["drop_vector_indexes"], body
            assert "is deleted" in body["warnings"][0]["message"], body
            with pytest.raises(NotFound):
                client.pipeline(f"hk-{where}")
        left = {item.deleted for item in housekeeping.leftovers(client._db, tenant)}
        assert left == {ids["python"], ids["cli"], ids["http"]}
        assert all(len(_hnsw(superuser, ids[w])) == 3 for w in ("python", "cli", "http"))
        # the lock is gone: the next delete drops its own indexes and those left
        assert client.delete_pipeline("hk-later") == {"deleted": "hk-later", "warnings": []}
        assert housekeeping.leftovers(client._db, tenant) == []
        assert all(_hnsw(superuser, i) == [] for i in ids.values())
