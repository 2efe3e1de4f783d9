"""fuzzy's word dictionary (migration 028): every distinct word of a pipeline's stored
fragments, and maybe more.

Words are only ever added: an expired or quarantined fragment keeps its words, since
an ``as_of`` search or a release brings it back, and a word in the dictionary that no
fragment in a reader's scope holds finds nothing (strategies/fuzzy_words.py). So a
batch's words are added while it is prepared (preparing.prepare_batch), in a transaction of
their own, outside the pipeline's index lock and beside the previous batch's write: a
word of a document that then fails to be written stays, and finds nothing. Concurrent
writers add the same words side by side: they go in sorted, so row locks are taken in
one order. A batch sends all its words in one statement. (Leaving out those that
earlier batches of the call had sent halved the words sent on SciFact and saved no
server CPU: new words' index entries are the cost, not finding the known ones.)
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
    """Add words (of fragments' ``fragments.word_set``); those already there are skipped."""
    if words:
        conn.execute(_ADD, {"pipeline": pipeline_id, "words": sorted(words)})
