"""A pipeline whose statements reach the server in one write.

psycopg's pipeline mode sends each statement as soon as it is queued (its
``execute`` flushes the connection: one ``sendto`` each, then one for the
sync), and every write wakes the server's backend to parse and run that one
statement: a search's first round trip (BEGIN, the tenant's settings, the
resolving statement, the strategy's first) took five writes, its last (the
verify statement and COMMIT) three. On a loaded two-core machine each wake-up
waits to be scheduled. Here each statement is handed to libpq as it is queued
(libpq buffers it: in pipeline mode it writes only from 64 kB, or when asked),
and libpq writes the lot with the sync on leaving the pipeline (then psycopg
asks for the results, a flush request, and reads them as ever): the same
statements, in the same order, with the same results and errors, in one write
(measured: docs/benchmarks.md, "BM25 at a million fragments", 2026-12-04 evening).

This reaches into psycopg's ``Pipeline`` (its ``command_queue`` and
``_communicate_gen``), which is why psycopg is pinned in pyproject.toml;
tests/test_pipelining.py checks the behaviour against the pinned version. A
pipeline already open on the connection (a nested one) is psycopg's own.

Inside the block, no sync of its own: no nested ``conn.pipeline()``, ``commit()`` or
``transaction()``. psycopg's sync waits for results without writing what libpq still
holds, and libpq holds what it could not write once more than its 64 kB buffer is
queued: a review (2026-12-04) saw such a nested sync hang after a 300 kB parameter
(psycopg's own pipeline hangs the same way from ~3 MB). A search's two round trips
queue a few kilobytes and sync only on leaving, where psycopg writes everything out.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import psycopg
from psycopg import pq


@contextmanager
def batched(conn: psycopg.Connection) -> Iterator[None]:
    """``conn.pipeline()``, its statements written at the sync, in one write."""
    if conn.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        with conn.pipeline():
            yield
        return
    with conn.pipeline() as pipeline:
        queue = pipeline.command_queue

        def buffered():  # psycopg's generator protocol: queued commands given to libpq
            while queue:
                queue.popleft()()  # the last, on leaving: PQpipelineSync, which writes
            return
            yield  # a generator that never waits

        # Until the pipeline ends (psycopg drops this Pipeline then): on leaving, psycopg
        # queues the sync through it and then fetches every result (_fetch_gen), as it
        # does for statements whose results a cursor asks for inside the block.
        pipeline._communicate_gen = buffered  # type: ignore[method-assign]
        yield
