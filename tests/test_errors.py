"""The error table: every class has a row, a README entry and a test; any exception maps
to one shape and one exit code; PostgreSQL going away is BackendUnavailable (exit 3)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import pgbraid
from pgbraid import errors
from pgbraid.cli import app, handled
from pgbraid.db.server import EmbeddedServer
from pgbraid.errors import (ERRORS, BackendTimeout, BackendUnavailable, Conflict, Forbidden,
                            InvalidRequest, PgbraidError, Unauthorized, describe)
from pgbraid.scope import Principal

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
NOT_RAISED_YET: set[type] = set()


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(c) for c in found))


def test_every_error_class_has_a_row_a_readme_entry_and_a_test():
    classes = {c for c in _subclasses(PgbraidError) if c.__module__ == "pgbraid.errors"}
    assert classes == set(ERRORS), "an error class without a row in errors.ERRORS (or the reverse)"
    readme = (ROOT / "README.md").read_text()
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "pgbraid").rglob("*.py"))
    for cls, row in ERRORS.items():
        entry = re.search(rf"^\| `{row.code}` \| {row.status} \| {row.exit} \| .+\|$", readme, re.M)
        assert entry, f"README has no error-table row for {row.code} ({row.status}, exit {row.exit})"
        raised = re.search(rf"raise {cls.__name__}\(", source)
        if cls in NOT_RAISED_YET:
            assert not raised, f"{cls.__name__} is raised now: give it a test, drop it from the list"
            continue
        assert raised, f"nothing raises {cls.__name__}: remove it or list it in NOT_RAISED_YET"
        assert re.search(rf"raises\((?:\(?[\w., ]*\b)?{cls.__name__}\b", tests), \
            f"no test expects {cls.__name__} (pytest.raises({cls.__name__}...))"
    internal = errors.INTERNAL
    assert f"| `{internal.code}` | {internal.status} | {internal.exit} |" in readme
    codes = [row.code for row in ERRORS.values()] + [internal.code]
    assert len(set(codes)) == len(codes)
    assert 1 not in {row.exit for row in ERRORS.values()}  # kept for failed ingestion


def test_subclasses_keep_their_parents_contract():
    assert issubclass(Conflict, InvalidRequest) and issubclass(errors.PayloadTooLarge, InvalidRequest)
    assert Conflict("x").code == "conflict" and Conflict("x").http_status == 409


def test_an_unknown_exception_is_internal_without_its_text_and_logged(caplog):
    try:
        raise RuntimeError("SELECT secret FROM /etc/passwd")
    except RuntimeError as exc:
        with caplog.at_level(logging.ERROR, logger="pgbraid"):
            described = describe(exc)
    assert (described.code, described.status, described.exit) == ("internal", 500, 70)
    assert described.body() == {"error": {"code": "internal", "message": "internal error",
                                          "details": {}}}
    record = caplog.records[-1]
    assert record.exc_info and "secret" in str(record.exc_info[1])  # for operators only


def _raising(exc: BaseException) -> typer.Typer:
    """A one-command app whose command raises exc inside the CLI's handled()."""
    probe = typer.Typer()

    @probe.command()
    def go(as_json: bool = typer.Option(False, "--json")) -> None:
        with handled(as_json):
            raise exc

    @probe.command()
    def other() -> None:
        pass

    return probe


@pytest.mark.parametrize("cls", list(ERRORS), ids=lambda c: c.__name__)
def test_the_cli_exits_with_the_tables_code(cls):
    result = runner.invoke(_raising(cls("it went wrong", field="x")), ["go", "--json"])
    row = ERRORS[cls]
    assert result.exit_code == row.exit
    assert json.loads(result.stdout) == {"error": {"code": row.code, "message": "it went wrong",
                                                   "details": {"field": "x"}}}


def test_the_cli_shows_an_internal_error_as_exit_70_without_its_text():
    for args in (["go", "--json"], ["go"]):
        result = runner.invoke(_raising(KeyError("fragments.secret_column")), args)
        assert result.exit_code == 70 and "secret" not in result.stdout
        assert "internal error" in result.stdout


def test_a_missing_permission_is_forbidden():
    reader = Principal("t", {"docs": frozenset({"read"})})
    reader.require("docs", "read")
    with pytest.raises(Forbidden) as denied:
        reader.require("docs", "write")
    assert describe(denied.value).status == 403 and describe(denied.value).exit == 77


def test_a_cancelled_statement_is_backend_timeout(data_dir, server):
    with pgbraid.connect(data_dir=data_dir, statement_timeout_ms=50) as client:
        with pytest.raises(BackendTimeout), client.session() as conn:
            conn.execute("SELECT pg_sleep(2)")


def test_an_existing_pipeline_is_a_conflict(client, pipeline, env):
    with pytest.raises(Conflict, match="already exists"):
        client.create_pipeline(pipeline, embedder="none")
    result = runner.invoke(app, ["pipeline", "create", pipeline, "--embedder", "none", "--json"],
                           env=env)
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "conflict"


def test_an_existing_entity_source_is_a_conflict(client, superuser):
    table = f"conflict_{uuid.uuid4().hex[:6]}"
    superuser.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text)")
    client.add_source(f"s_{table}", table=table, key="id", text="name")
    with pytest.raises(Conflict, match="already exists"):
        client.add_source(f"s_{table}", table=table, key="id", text="name")


def test_a_bad_setting_is_invalid_request_by_name(env):
    with pytest.raises(InvalidRequest, match="PGBRAID_POOL_SIZE"):
        pgbraid.connect(dsn="host=/nonexistent", pool_size=0)
    result = runner.invoke(app, ["pipeline", "list", "--json"],
                           env={**env, "PGBRAID_POOL_SIZE": "many"})
    assert result.exit_code == 2 and "PGBRAID_POOL_SIZE" in json.loads(result.stdout)["error"]["message"]


def _wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def test_a_killed_postmaster_is_backend_unavailable_and_cli_exit_3(tmp_path):
    """A server of its own: connected, then its postmaster killed with -9."""
    doomed = EmbeddedServer(tmp_path / "doomed")
    status = doomed.start()
    try:
        with pgbraid.connect(dsn=status.dsn, pool_timeout=1) as client:
            client.create_pipeline("p", embedder="none")
            client.ingest("p", [{"id": "a", "text": "pump maintenance"}])
            assert client.search("p", "pump").hits
            os.kill(status.pid, signal.SIGKILL)
            _wait_gone(status.pid)
            for _ in range(2):  # a broken pooled connection, then no connection in time
                with pytest.raises(BackendUnavailable):
                    client.search("p", "pump", type="bm25")
            with pytest.raises(BackendUnavailable):
                client.search("p", "pump", type="hybrid")
        env = {"PGBRAID_DSN": status.dsn, "PGBRAID_POOL_TIMEOUT": "1"}
        result = runner.invoke(app, ["search", "p", "pump", "--json"], env=env)
        assert result.exit_code == 3, result.stdout
        assert json.loads(result.stdout)["error"]["code"] == "backend_unavailable"
        human = runner.invoke(app, ["search", "p", "pump"], env=env)
        assert human.exit_code == 3 and "cannot connect to PostgreSQL" in human.stdout
    finally:
        doomed.start()  # recovers from the stale postmaster.pid (see db/server.py) ...
        doomed.stop()   # ... so nothing of it is left running
    assert not doomed.status().running
