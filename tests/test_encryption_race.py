"""Encryption at rest, several processes at once on a fresh data dir: the embedded
server's default key file (``<data dir>/encryption.keys``, created on first use) gets
one first key, which every process seals under, so a later process opens everything."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import pgbraid
from pgbraid.db.server import EmbeddedServer
from pgbraid.keyring import KEY_FILE, Keyring

PROCESSES = 4
TENANT = "race"


def _write(data_dir: str, name: str, barrier, results) -> None:
    """One process: its keyring is built while no key file exists, then, with the others
    at once, an encrypted pipeline and a document in it."""
    with pgbraid.connect(data_dir=data_dir, tenant=TENANT) as client:
        client.pipelines()  # the server is up, and this process's keyring holds no key
        assert not client.keyring.ids()
        barrier.wait(timeout=120)
        client.create_pipeline(name, embedder="none", encrypt=True)
        report = client.ingest(name, [{"id": "d", "text": f"sealed words of {name} here"}])
        results.put((name, client.keyring.current(), report.added))


def _read(data_dir: str, names: list[str], results) -> None:
    with pgbraid.connect(data_dir=data_dir, tenant=TENANT) as client:
        for name in names:
            hits = client.search(name, "sealed words", type="fulltext").hits
            results.put((name, [hit.page_content for hit in hits]))


def _run(target, *args) -> None:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


@pytest.fixture()
def fresh(tmp_path) -> Path:
    data_dir = tmp_path / "fresh"
    yield data_dir
    EmbeddedServer(data_dir).stop()


def test_processes_racing_on_a_fresh_data_dir_share_one_first_key(fresh):
    spawn = multiprocessing.get_context("spawn")
    barrier, results = spawn.Barrier(PROCESSES), spawn.Queue()
    names = [f"race-{i}" for i in range(PROCESSES)]
    writers = [_run(_write, str(fresh), name, barrier, results) for name in names]
    for writer in writers:
        writer.join(timeout=300)
    assert [w.exitcode for w in writers] == [0] * PROCESSES
    written = [results.get(timeout=10) for _ in names]
    lines = [line for line in (fresh / KEY_FILE).read_text().splitlines() if line.strip()]
    assert len(lines) == 1, f"{len(lines)} keys in a fresh key file"
    currents = {current for _, current, _ in written}
    assert len(currents) == 1 and all(added == 1 for *_, added in written), written
    (only,) = currents
    assert Keyring(path=fresh / KEY_FILE).ids() == [only]
    reader = _run(_read, str(fresh), names, results)
    reader.join(timeout=120)
    assert reader.exitcode == 0
    opened = dict(results.get(timeout=10) for _ in names)
    assert opened == {name: [f"sealed words of {name} here"] for name in names}
