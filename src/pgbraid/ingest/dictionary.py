"""fuzzy's word dictionary (migration 028): every distinct word of a pipeline's stored
fragments, added in the transaction that writes them.

Words are only ever added: an expired or quarantined fragment keeps its words, since
an ``as_of`` search or a release brings it back, and a word in the dictionary that no
fragment in a reader's scope holds finds nothing (strategies/fuzzy_words.py). Every
writer holds the pipeline's index lock (bm25_index.lock) when it gets here, so
concurrent writers add one after another; the words go in sorted, so row locks are
taken in one order even without it.
"""

from __future__ import annotations

from typing import Iterable

import psycopg

_ADD = """
INSERT INTO pgbraid.fuzzy_words (pipeline_id, word)
SELECT anchor.pipeline_id, w FROM pgbraid.bm25_stats anchor  -- bm25_index.ensure_stats (Citus)
CROSS JOIN LATERAL unnest(%(words)s::text[]) AS w WHERE anchor.pipeline_id = %(pipeline)s
ORDER BY w
ON CONFLICT DO NOTHING
"""


def add(conn: psycopg.Connection, pipeline_id: int, word_sets: Iterable[Iterable[str]]) -> None:
    """Add the words of fragments (each its ``fragments.word_set``)."""
    new = set().union(*word_sets)
    if new:
        conn.execute(_ADD, {"pipeline": pipeline_id, "words": sorted(new)})
