"""fuzzy's word dictionary (migration 028): every distinct word of a pipeline's stored
fragments, added in the transaction that writes them.

Words are only ever added: an expired or quarantined fragment keeps its words, since
an ``as_of`` search or a release brings it back, and a word in the dictionary that no
fragment in a reader's scope holds finds nothing (strategies/fuzzy_words.py). Every
writer holds the pipeline's index lock (bm25_index.lock) when it gets here, so
concurrent writers add one after another; the words go in sorted, so row locks are
taken in one order even without it. A batch adds the words of all its fragments in
one statement, less those an ingest call's earlier batches committed
(batches.Call.known_words): those are there for good.
"""

from __future__ import annotations

from typing import Collection

import psycopg

_ADD = """
INSERT INTO pgbraid.fuzzy_words (pipeline_id, word)
SELECT anchor.pipeline_id, w FROM pgbraid.bm25_stats anchor  -- bm25_index.ensure_stats (Citus)
CROSS JOIN LATERAL unnest(%(words)s::text[]) AS w WHERE anchor.pipeline_id = %(pipeline)s
ORDER BY w
ON CONFLICT DO NOTHING
"""


def add(conn: psycopg.Connection, pipeline_id: int, words: Collection[str]) -> None:
    """Add words (of fragments' ``fragments.word_set``) not in the dictionary yet."""
    if words:
        conn.execute(_ADD, {"pipeline": pipeline_id, "words": sorted(words)})
