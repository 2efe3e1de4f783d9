"""Key rotation: killed with -9 mid-way and run again, every fragment and version is
under the new key and readable, none lost; a second rotation at once is refused;
searches keep answering during one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid.cli import app
from pgbraid.errors import Conflict, InvalidRequest

from .serving import SRC

DOCS = 40


def _documents() -> list[dict]:
    return [{"id": f"doc{i:03d}", "title": f"Ledger {i}",
             "text": f"Entry {i}: the harbour ledger records cargo {i} of marmalade and tin. "
                     + "Paragraph of filler text about shipping. " * 40,
             "metadata": {"owner": f"clerk {i}"}} for i in range(DOCS)]


@pytest.fixture()
def ledger(client) -> str:
    name = f"rot-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none", encrypt=True, encrypt_metadata=["owner"],
                           chunk_size=400)
    client.ingest(name, _documents())
    client.ingest(name, [{**_documents()[0], "text": "Entry 0, second version: marmalade."}])
    return name


def _keys(superuser, name: str) -> dict[str, int]:
    """Rows per key id, fragments and versions together, and the pipeline's current key."""
    rows = superuser.execute(
        "SELECT key_id, count(*) FROM (SELECT f.key_id FROM pgbraid.fragments f"
        "  JOIN pgbraid.pipelines p ON p.id = f.pipeline_id WHERE p.name = %(n)s"
        " UNION ALL SELECT v.key_id FROM pgbraid.versions v JOIN pgbraid.documents d"
        "  ON d.id = v.document_id JOIN pgbraid.pipelines p ON p.id = d.pipeline_id"
        "  WHERE p.name = %(n)s) AS k GROUP BY key_id", {"n": name}).fetchall()
    return dict(rows)


def _current(superuser, name: str) -> str:
    return superuser.execute("SELECT settings #>> '{encryption,key_id}' FROM pgbraid.pipelines"
                             " WHERE name = %s", (name,)).fetchone()[0]


def _rotation(data_dir, name: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PGBRAID_DATA_DIR": str(data_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    env.pop("PGBRAID_DSN", None)
    return subprocess.Popen([sys.executable, "-m", "pgbraid", "keys", "rotate-encryption", name,
                             "--quiet", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_progress(superuser, name: str, old: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        keys = _keys(superuser, name)
        if _current(superuser, name) != old and len(keys) == 2:
            return  # some rows under the new key, some still under the old one
        time.sleep(0.02)
    raise AssertionError("the rotation made no progress")


def _readable(client, name: str) -> int:
    """Every current document's fragments read, opened, through a search and reads."""
    for doc in _documents()[1:]:
        assert client.document(name, doc["id"])["text"] == doc["text"]
    assert client.document(name, "doc000", version=1)["text"] == _documents()[0]["text"]
    texts = {d["id"]: d["text"] for d in _documents()}
    texts["doc000"] = "Entry 0, second version: marmalade."
    hits = client.search(name, "harbour ledger shipping marmalade", type="bm25",
                         params={"k": 1000}).hits
    assert hits and all(h.page_content in texts[h.document_id] for h in hits)
    return len(hits)


def _once_released(client, name: str) -> dict:
    """Rotate as soon as PostgreSQL has ended the killed run's session (and its lock)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return client.rotate_encryption(name)
        except Conflict:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_rotation_killed_mid_way_finishes_when_run_again(client, ledger, superuser, data_dir):
    old = _current(superuser, ledger)
    before = _keys(superuser, ledger)
    assert list(before) == [old]
    found = _readable(client, ledger)
    process = _rotation(data_dir, ledger, "--batch-size", "3", "--pause", "0.05")
    _wait_for_progress(superuser, ledger, old, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    new = _current(superuser, ledger)
    midway = _keys(superuser, ledger)
    assert set(midway) == {old, new} and midway[old] > 0 and midway[new] > 0
    assert sum(midway.values()) == before[old]
    assert _readable(client, ledger) == found  # both keys open, mid-way

    result = _once_released(client, ledger)
    assert result["resumed"] and result["key_id"] == new and result["remaining"] == 0
    assert result["fragments"] + result["versions"] == midway[old]
    assert _keys(superuser, ledger) == {new: before[old]}  # none lost
    assert _readable(client, ledger) == found

    again = client.rotate_encryption(ledger)  # a fresh rotation: a newer key, every row
    assert not again["resumed"] and again["key_id"] not in (old, new)
    assert _keys(superuser, ledger) == {again["key_id"]: before[old]}


def test_a_second_rotation_at_once_is_refused_and_searches_go_on(client, ledger, superuser,
                                                                  data_dir):
    old = _current(superuser, ledger)
    process = _rotation(data_dir, ledger, "--batch-size", "2", "--pause", "0.1", "--json")
    _wait_for_progress(superuser, ledger, old, process)
    with pytest.raises(Conflict, match="already running"):
        client.rotate_encryption(ledger)
    assert _readable(client, ledger)  # searches during the rotation
    result = CliRunner().invoke(app, ["keys", "rotate-encryption", ledger, "--json"],
                                env={"PGBRAID_DATA_DIR": str(data_dir)})
    assert result.exit_code == 2 and json.loads(result.stdout)["error"]["code"] == "conflict"
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    body = json.loads(out)
    assert body["remaining"] == 0 and not body["resumed"]
    assert list(_keys(superuser, ledger)) == [body["key_id"]]


def test_writes_during_a_rotation_are_sealed_with_the_new_key(client, ledger, superuser, data_dir):
    old = _current(superuser, ledger)
    process = _rotation(data_dir, ledger, "--batch-size", "2", "--pause", "0.05")
    _wait_for_progress(superuser, ledger, old, process)
    client.ingest(ledger, [{"id": "late", "text": "A late entry about marmalade."}])
    assert process.wait(timeout=300) == 0
    new = _current(superuser, ledger)
    assert list(_keys(superuser, ledger)) == [new]
    assert client.document(ledger, "late")["text"] == "A late entry about marmalade."


def test_the_progress_bar_goes_to_stderr(ledger, data_dir):
    result = CliRunner().invoke(app, ["keys", "rotate-encryption", ledger],
                                env={"PGBRAID_DATA_DIR": str(data_dir)})
    assert result.exit_code == 0, result.output
    assert "re-sealed under key" in result.stdout and "rotate" in result.stderr


def test_an_unencrypted_pipeline_has_nothing_to_rotate(client, pipeline):
    with pytest.raises(InvalidRequest, match="not encrypted"):
        client.rotate_encryption(pipeline)


def test_an_environment_keyring_rotates_to_its_first_key(data_dir, server, superuser):
    import base64

    first, second = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    name = f"env-{uuid.uuid4().hex[:8]}"
    with pgbraid.connect(data_dir=data_dir, encryption_key=first) as client:
        client.create_pipeline(name, embedder="none", encrypt=True)
        client.ingest(name, _documents()[:3])
        with pytest.raises(InvalidRequest, match="put the new key first"):
            client.rotate_encryption(name)
    with pgbraid.connect(data_dir=data_dir, encryption_key=f"{second},{first}") as client:
        result = client.rotate_encryption(name)
        assert result["remaining"] == 0 and result["key_id"] == client.keyring.ids()[0]
        assert client.document(name, "doc001")["text"] == _documents()[1]["text"]
    with pgbraid.connect(data_dir=data_dir, encryption_key=second) as client:
        assert client.document(name, "doc002")["text"] == _documents()[2]["text"]
