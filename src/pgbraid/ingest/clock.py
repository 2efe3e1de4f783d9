"""The time a writing transaction gives the versions it creates and expires.

One time per transaction and pipeline, taken from ``pgbraid.version_clocks``
(migration 014) the first time the transaction writes a version: the row lock
makes it wait for the previous writer of the pipeline to commit, and the time is
``clock_timestamp()`` then, but always at least a microsecond after the
previous one. So a pipeline's version times follow commit order, a new version's
``valid_from`` equals its predecessor's ``valid_to`` (never both valid, never
neither), and a time no later than the last committed one is a cut no writer
still in flight can cross (paging.py relies on it).

The time is remembered in a transaction-local setting: a savepoint rolled back
takes both the setting and the row lock with it, and the next write takes them
again.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

# "<pipeline id> <time>", when this transaction already took its time for the pipeline.
_HELD = """
SELECT CASE WHEN split_part(s, ' ', 1) = %(pipeline)s::text
            THEN substr(s, strpos(s, ' ') + 1)::timestamptz END
FROM coalesce(current_setting('pgbraid.version_time', true), '') AS s
"""

# ON CONFLICT DO UPDATE waits for the row's lock, then computes SET on the latest row.
_STAMP = """
WITH c AS (
    INSERT INTO pgbraid.version_clocks AS c (pipeline_id, stamped)
    VALUES (%(pipeline)s, clock_timestamp())
    ON CONFLICT (pipeline_id) DO UPDATE
        SET stamped = greatest(clock_timestamp(), c.stamped + interval '1 microsecond')
    RETURNING stamped)
SELECT stamped, set_config('pgbraid.version_time', %(pipeline)s::text || ' ' || stamped::text, true)
FROM c
"""


def stamp(conn: psycopg.Connection, pipeline_id: int) -> datetime:
    """This transaction's version time for the pipeline (taken on first use)."""
    held = conn.execute(_HELD, {"pipeline": pipeline_id}).fetchone()[0]
    if held is not None:
        return held
    return conn.execute(_STAMP, {"pipeline": pipeline_id}).fetchone()[0]
