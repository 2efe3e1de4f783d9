"""Key rotation: re-seal an encrypted pipeline's values under a new current key.

1. One rotation per pipeline at a time: a session-level advisory lock on the one
   connection the run holds; a second run is refused (Conflict), never interleaved.
2. Unless an earlier run was interrupted (rows still sealed under another key than
   the pipeline's current one: it is finished, under that current key), a new key
   becomes current: a new random key added to the key file, or, for a keyring from
   PGBRAID_ENCRYPTION_KEY, its first key. The switch commits under the pipeline's
   index lock (bm25_index.lock), and writers read the current key in their own
   transaction under that lock, so every batch written after it seals with the new
   key: no row under the old key appears behind the run.
3. Fragments, then versions, in id order, ``batch_size`` rows a transaction (under
   the same lock, taken first as writers do, so a writer waits for one batch at
   most and never deadlocks with one): read, open under their key, seal under the
   new one, write. A kill loses the batch in flight (rolled back); running again
   finishes the rest.

Searches keep working throughout: a snapshot sees each row under the old key or
the new one, and the keyring holds both. Drop an old key from the keyring only
after every pipeline sealed with it has finished rotating (``remaining`` 0).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import encryption, pipelines
from .db.database import Database
from .errors import Conflict, InvalidRequest
from .ingest import bm25_index

BATCH = 500
_LOCK = "SELECT pg_try_advisory_lock(hashtext('pgbraid.rotate'), hashtext(%s::text))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtext('pgbraid.rotate'), hashtext(%s::text))"
# Pipeline ids are unique across tenants: the id alone names the lock.

_REMAINING = """
SELECT (SELECT count(*) FROM pgbraid.fragments f
        WHERE f.pipeline_id = %(p)s AND f.key_id IS NOT NULL AND f.key_id <> %(key)s),
       (SELECT count(*) FROM pgbraid.versions v JOIN pgbraid.documents d ON d.pipeline_id = v.pipeline_id AND d.id = v.document_id
        WHERE d.pipeline_id = %(p)s AND v.key_id IS NOT NULL AND v.key_id <> %(key)s)
"""
_FRAGMENTS = """
SELECT f.id, v.version, f.title, f.section, f.body, f.metadata
FROM pgbraid.fragments f JOIN pgbraid.versions v ON v.pipeline_id = f.pipeline_id AND v.id = f.version_id
WHERE f.pipeline_id = %(p)s AND f.key_id IS NOT NULL AND f.key_id <> %(key)s AND f.id > %(after)s
ORDER BY f.id LIMIT %(n)s FOR UPDATE OF f
"""
_VERSIONS = """
SELECT v.id, v.document_id, v.version, v.title, v.body, v.metadata
FROM pgbraid.versions v JOIN pgbraid.documents d ON d.pipeline_id = v.pipeline_id AND d.id = v.document_id
WHERE d.pipeline_id = %(p)s AND v.key_id IS NOT NULL AND v.key_id <> %(key)s AND v.id > %(after)s
ORDER BY v.id LIMIT %(n)s FOR UPDATE OF v
"""
_SWITCH = """
UPDATE pgbraid.pipelines
SET settings = jsonb_set(settings, '{encryption,key_id}', to_jsonb(%s::text)) WHERE id = %s
"""


def rotate(db: Database, tenant: str, name: str, ring: encryption.Keyring, *,
           batch_size: int = BATCH, pause: float = 0.0,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Rotate pipeline ``name``'s key (see the module docstring); ``progress(done, total)``
    after each batch. Returns what was done."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) \
            or not 1 <= batch_size <= 100_000:
        raise InvalidRequest("batch_size must be an integer from 1 to 100000", field="batch_size")
    if not 0 <= pause <= 60:
        raise InvalidRequest("pause must be between 0 and 60 seconds", field="pause")
    with db.admin() as conn:  # one connection: the advisory lock lives as long as the run
        with db.within(conn, tenant):
            pipeline = dataclasses.replace(pipelines.get(conn, name), keyring=ring)
        if not encryption.encrypted(pipeline):
            raise InvalidRequest(f"pipeline {name!r} is not encrypted", field="pipeline")
        lock = str(pipeline.id)
        if not conn.execute(_LOCK, (lock,)).fetchone()[0]:
            raise Conflict(f"a key rotation of pipeline {name!r} is already running",
                           pipeline=name)
        try:
            return _run(db, conn, tenant, pipeline, ring, batch_size, pause, progress)
        finally:
            if not conn.closed:
                conn.execute(_UNLOCK, (lock,))


def _run(db: Database, conn: psycopg.Connection, tenant: str, pipeline: pipelines.Pipeline,
         ring: encryption.Keyring, batch_size: int, pause: float,
         progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    with db.within(conn, tenant):
        current = encryption.sealing(conn, pipeline).key_id
        left = sum(conn.execute(_REMAINING, {"p": pipeline.id, "key": current}).fetchone())
    resumed = left > 0
    target = current if resumed else _new_key(ring, pipeline, current)
    if not resumed:
        ring.cipher(target)  # present before anything is sealed with it
        with db.within(conn, tenant):
            bm25_index.lock(conn, pipeline.id)
            conn.execute(_SWITCH, (target, pipeline.id))
            left = sum(conn.execute(_REMAINING, {"p": pipeline.id, "key": target}).fetchone())
    sealed = encryption.Sealing(ring, target, encryption.metadata_fields(pipeline))
    done = {"fragments": 0, "versions": 0}
    if progress:
        progress(0, left)
    for table, step in (("fragments", _fragments), ("versions", _versions)):
        after = 0
        while True:
            with db.within(conn, tenant):
                bm25_index.lock(conn, pipeline.id)
                count, after = step(conn, pipeline, sealed, after, batch_size)
            if not count:
                break
            done[table] += count
            if progress:
                progress(done["fragments"] + done["versions"], left)
            if pause:
                time.sleep(pause)
    with db.within(conn, tenant):
        remaining = sum(conn.execute(_REMAINING, {"p": pipeline.id, "key": target}).fetchone())
    return {"pipeline": pipeline.name, "key_id": target, "previous_key_id": current,
            "resumed": resumed, **done, "remaining": remaining}


def _new_key(ring: encryption.Keyring, pipeline: pipelines.Pipeline, current: str) -> str:
    if ring.writable:
        return ring.generate()
    first = ring.current()
    if first == current:
        raise InvalidRequest(f"pipeline {pipeline.name!r} is sealed under key {first}, the first "
                             "of PGBRAID_ENCRYPTION_KEY, and nothing is left under another: put "
                             "the new key first in PGBRAID_ENCRYPTION_KEY to rotate to it",
                             field="PGBRAID_ENCRYPTION_KEY")
    return first


def _fragments(conn: psycopg.Connection, pipeline: pipelines.Pipeline,
               sealed: encryption.Sealing, after: int, n: int) -> tuple[int, int]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_FRAGMENTS, {"p": pipeline.id, "key": sealed.key_id, "after": after,
                                        "n": n}).fetchall()
    updates = []
    for row in rows:
        plain = encryption.open_fragment(pipeline, row["id"], row["version"], {
            "title": row["title"], "section": row["section"], "body": row["body"],
            "metadata": row["metadata"]})
        new = encryption.seal_fragment(sealed, row["id"], row["version"], **plain)
        updates.append((new["title"], new["section"], new["body"], Jsonb(new["metadata"]),
                        sealed.key_id, row["id"]))
    with conn.cursor() as cur:
        cur.executemany("UPDATE pgbraid.fragments SET title = %s, section = %s, body = %s,"
                        " metadata = %s, key_id = %s WHERE id = %s", updates)
    return len(rows), (rows[-1]["id"] if rows else after)


def _versions(conn: psycopg.Connection, pipeline: pipelines.Pipeline,
              sealed: encryption.Sealing, after: int, n: int) -> tuple[int, int]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_VERSIONS, {"p": pipeline.id, "key": sealed.key_id, "after": after,
                                       "n": n}).fetchall()
    updates = []
    for row in rows:
        plain = encryption.open_version(pipeline, row["document_id"], row["version"], {
            "title": row["title"], "body": row["body"], "metadata": row["metadata"]})
        title, body, metadata, key_id = encryption.seal_version(
            sealed, row["document_id"], row["version"], plain["title"], plain["body"],
            plain["metadata"])
        updates.append((title, body, Jsonb(metadata), key_id, row["id"]))
    with conn.cursor() as cur:
        cur.executemany("UPDATE pgbraid.versions SET title = %s, body = %s, metadata = %s,"
                        " key_id = %s WHERE id = %s", updates)
    return len(rows), (rows[-1]["id"] if rows else after)
