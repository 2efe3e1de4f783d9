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

# ON CONFLICT DO UPDATE waits for the row's lock (and takes it), returning the time
# before ('-infinity' for a new row). The new time is taken after, in a statement of
# its own: Citus refuses a volatile clock_timestamp() inside DO UPDATE SET or UPDATE
# on a distributed table, so it is computed apart and written as a value.
_LOCK = """
INSERT INTO pgbraid.version_clocks AS c (pipeline_id, stamped) VALUES (%(pipeline)s, '-infinity')
ON CONFLICT (pipeline_id) DO UPDATE SET stamped = c.stamped
RETURNING nullif(stamped, '-infinity')  -- NULL: a new row (greatest skips it)
"""
_NEXT = """
SELECT t, set_config('pgbraid.version_time', %(pipeline)s::text || ' ' || t::text, true)
FROM (SELECT greatest(clock_timestamp(), %(before)s::timestamptz + interval '1 microsecond') AS t) x
"""
_SET = "UPDATE pgbraid.version_clocks SET stamped = %(t)s WHERE pipeline_id = %(pipeline)s"


def stamp(conn: psycopg.Connection, pipeline_id: int) -> datetime:
    """This transaction's version time for the pipeline (taken on first use)."""
    held = conn.execute(_HELD, {"pipeline": pipeline_id}).fetchone()[0]
    if held is not None:
        return held
    before = conn.execute(_LOCK, {"pipeline": pipeline_id}).fetchone()[0]
    now = conn.execute(_NEXT, {"pipeline": pipeline_id, "before": before}).fetchone()[0]
    conn.execute(_SET, {"pipeline": pipeline_id, "t": now})
    return now
