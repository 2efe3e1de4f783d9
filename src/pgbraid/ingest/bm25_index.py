"""Maintaining the BM25 index inside the ingest transaction.

Serialised per pipeline: every transaction that reads or changes a pipeline's
BM25 index takes ``lock()`` first (a transaction-scoped advisory lock), so any
number of concurrent ingesting processes leave exactly the statistics and
postings one sequential ingest would. Embedding happens before, outside it.

Partitioned by classification set: each distinct sorted set of classifications
a fragment carries is a *partition* (bm25_partitions) with its own statistics
per text-search configuration (fragments, total length: bm25_partition_stats),
segments and dead list. A query reads only the partitions its reader may see,
so content outside a reader's scope moves none of its statistics.

Each fragment gets a dense per-pipeline ordinal and its term frequencies (the forward index, used to expire it and to explain hits). The
postings of a batch's fragments are written as one segment per partition at
the end of the batch; a fragment whose version expires is added to its
partition's ``bm25_dead`` (with the segment holding its postings) and stops
counting at once: in the partition's statistics here, and in each term's
``df``, which a query works out as the term's postings minus the dead ones.
Merging, which drops dead postings, is in bm25_merge.

Quarantine (ingest/quarantine.py) goes further: ``evict`` retires a document's
current fragments and rewrites at once each segment holding their postings, so
not even the trace's posting counts hold them; ``restore`` writes them again
from the forward index under their own ordinals (ties, broken by ordinal, fall
as before), each ordinal first cut out of the ranges of the segments that held
it once, so one segment covers an ordinal, as ``_RETIRE`` needs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import psycopg

from . import bm25_merge
from .bm25_merge import INSERT_POSTINGS, MERGE_FACTOR, tier_of  # noqa: F401 (MERGE_FACTOR re-exported)

MAX_LENGTH = 65_535  # lengths and term frequencies are stored as uint16
Classifications = tuple[str, ...]

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('pgbraid.bm25', %s::bigint))"

# The partition of a classification set, created on first use (under the lock).
_PARTITION = """
WITH created AS (
    INSERT INTO pgbraid.bm25_partitions (pipeline_id, classifications)
    VALUES (%(pipeline)s, %(classifications)s::text[]) ON CONFLICT DO NOTHING RETURNING id)
SELECT id FROM created
UNION ALL
SELECT id FROM pgbraid.bm25_partitions
WHERE pipeline_id = %(pipeline)s AND classifications = %(classifications)s::text[]
"""

# Fragment count and total length per (partition, configuration), by deltas.
_STATS = """
INSERT INTO pgbraid.bm25_partition_stats (pipeline_id, partition_id, config, fragments, total_length)
SELECT anchor.pipeline_id, x.* FROM pgbraid.bm25_stats anchor
CROSS JOIN LATERAL unnest(%(partitions)s::bigint[], %(configs)s::text[], %(counts)s::bigint[],
                          %(lengths)s::bigint[]) AS x
WHERE anchor.pipeline_id = %(pipeline)s
ON CONFLICT (pipeline_id, partition_id, config) DO UPDATE SET
    fragments = bm25_partition_stats.fragments + EXCLUDED.fragments,
    total_length = bm25_partition_stats.total_length + EXCLUDED.total_length
"""

_SEGMENT = """
INSERT INTO pgbraid.bm25_segments (pipeline_id, partition_id, segment, fragments, tier, ordinals)
SELECT anchor.pipeline_id, %(partition)s, %(segment)s, %(fragments)s, %(tier)s,
       (SELECT range_agg(int4range(o, o, '[]')) FROM unnest(%(ordinals)s::int[]) AS o)
FROM pgbraid.bm25_stats anchor WHERE anchor.pipeline_id = %(pipeline)s
"""

# Fragments written and expired within this transaction: now in one of its new segments.
_PLACE_DEAD = """
UPDATE pgbraid.bm25_dead d SET segment = s.segment
FROM pgbraid.bm25_segments s
WHERE s.pipeline_id = %(pipeline)s AND s.segment = ANY(%(segments)s::int[])
  AND d.pipeline_id = s.pipeline_id AND d.partition_id = s.partition_id AND d.segment IS NULL AND s.ordinals @> d.ordinal
"""

# The partition key of fragment f in SQL (as partition_key: code point order).
PARTITION_OF = """ARRAY(SELECT c FROM unnest(f.classifications) AS c GROUP BY c
                        ORDER BY c COLLATE "C")"""

# Quarantined fragments already stopped counting (see the module docstring).
_RETIRE = """
WITH gone AS (
    SELECT p.id AS bm25_partition, f.bm25_ordinal, f.bm25_length, f.ts_config::text AS config
    FROM pgbraid.fragments f
    JOIN pgbraid.bm25_partitions p ON p.pipeline_id = f.pipeline_id AND p.classifications = """ \
    + PARTITION_OF + """
    WHERE f.pipeline_id = %(pipeline)s AND f.version_id = %(version)s
      AND f.bm25_ordinal IS NOT NULL AND NOT f.quarantined),
dead AS (  -- fragments with postings, in the segment holding them (NULL: not flushed yet)
    INSERT INTO pgbraid.bm25_dead (pipeline_id, partition_id, ordinal, segment)
    SELECT %(pipeline)s, g.bm25_partition, g.bm25_ordinal,
           (SELECT s.segment FROM pgbraid.bm25_segments s
             WHERE s.pipeline_id = %(pipeline)s AND s.partition_id = g.bm25_partition
               AND s.ordinals @> g.bm25_ordinal)
    FROM gone g WHERE g.bm25_length > 0 ON CONFLICT DO NOTHING)
INSERT INTO pgbraid.bm25_partition_stats (pipeline_id, partition_id, config, fragments, total_length)
SELECT %(pipeline)s, bm25_partition, config, -count(*), -sum(bm25_length) FROM gone GROUP BY 2, 3
ON CONFLICT (pipeline_id, partition_id, config) DO UPDATE SET
    fragments = bm25_partition_stats.fragments + EXCLUDED.fragments,
    total_length = bm25_partition_stats.total_length + EXCLUDED.total_length
"""


def lock(conn: psycopg.Connection, pipeline_id: int) -> None:
    """Serialise this transaction's BM25 index work with every other on the pipeline.

    Take it before the transaction reads or changes anything of the index (and
    before any row lock a concurrent holder might wait for)."""
    conn.execute(_LOCK, (pipeline_id,))


def partition_key(classifications: Classifications) -> Classifications:
    """A partition's classification set: distinct and sorted by code point (PARTITION_OF)."""
    return tuple(sorted(set(classifications)))


def partitions(conn: psycopg.Connection, pipeline_id: int,
               sets: set[Classifications]) -> dict[Classifications, int]:
    """The partition id of each classification set (as partition_key gives it)."""
    return {key: conn.execute(_PARTITION, {"pipeline": pipeline_id,
                                           "classifications": list(key)}).fetchone()[0]
            for key in sorted(sets)}


@dataclass
class Pending:
    """The postings of fragments written in this batch, flushed as one segment per partition."""

    ordinals: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    terms: list[list[str]] = field(default_factory=list)
    tfs: list[list[int]] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    """Text-search configuration of each fragment."""
    partitions: list[int] = field(default_factory=list)

    def add(self, ordinal: int, length: int, terms: list[str] | None, tfs: list[int] | None,
            config: str, partition: int) -> None:
        self.ordinals.append(ordinal)
        self.lengths.append(min(length, MAX_LENGTH))
        self.terms.append(terms or [])
        self.tfs.append(tfs or [])  # capped at MAX_LENGTH when packed
        self.configs.append(config)
        self.partitions.append(partition)

    def extend(self, other: "Pending") -> None:
        for name in ("ordinals", "lengths", "terms", "tfs", "configs", "partitions"):
            getattr(self, name).extend(getattr(other, name))

    def split(self) -> dict[int, "Pending"]:
        """The pending fragments of each partition."""
        parts: dict[int, Pending] = defaultdict(Pending)
        for row in zip(self.ordinals, self.lengths, self.terms, self.tfs, self.configs,
                       self.partitions):
            part = parts[row[-1]]
            for name, value in zip(("ordinals", "lengths", "terms", "tfs", "configs"), row):
                getattr(part, name).append(value)
            part.partitions.append(row[-1])
        return parts

    def __len__(self) -> int:
        return len(self.ordinals)


def ensure_stats(conn: psycopg.Connection, pipeline_id: int) -> None:
    """The pipeline's row of bm25_stats, which every ingest creates first. The batch
    inserts select FROM it (``anchor``, a primary-key lookup): on a Citus coordinator
    an INSERT ... SELECT over only unnest() of parameters goes through the coordinator
    and COPY, which row-level security refuses on the workers; one over a row of the
    pipeline in a co-located table is sent to the pipeline's shard as it is."""
    conn.execute("INSERT INTO pgbraid.bm25_stats (pipeline_id) VALUES (%s) ON CONFLICT DO NOTHING",
                 (pipeline_id,))


def reserve_ordinals(conn: psycopg.Connection, pipeline_id: int, count: int) -> int:
    """The first of ``count`` new ordinals."""
    row = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_ordinal = next_ordinal + %(n)s"
        " WHERE pipeline_id = %(p)s RETURNING next_ordinal - %(n)s",
        {"n": count, "p": pipeline_id}).fetchone()
    if row is None:
        ensure_stats(conn, pipeline_id)
        return reserve_ordinals(conn, pipeline_id, count)
    return row[0]


def retire(conn: psycopg.Connection, pipeline_id: int, version_id: int) -> None:
    """A version's fragments stop counting: dead list and their partitions' statistics."""
    conn.execute(_RETIRE, {"pipeline": pipeline_id, "version": version_id})


# The version's retired fragments with postings: the segment holding them, their terms.
_HOLDING = """
SELECT d.partition_id, d.segment, f.bm25_ordinal, f.bm25_terms
FROM pgbraid.fragments f
JOIN pgbraid.bm25_dead d ON d.pipeline_id = f.pipeline_id AND d.ordinal = f.bm25_ordinal
WHERE f.pipeline_id = %(pipeline)s AND f.version_id = %(version)s AND d.pipeline_id = %(pipeline)s
  AND d.segment IS NOT NULL
ORDER BY d.segment, f.bm25_ordinal
"""

_FORWARD = """
SELECT f.bm25_ordinal, f.bm25_length, f.bm25_terms, f.bm25_tfs, f.ts_config::text,
       f.classifications
FROM pgbraid.fragments f
WHERE f.pipeline_id = %(pipeline)s AND f.version_id = %(version)s AND f.bm25_ordinal IS NOT NULL
ORDER BY f.bm25_ordinal
"""

# Ordinals whose postings a merge dropped leave the ranges of the segments that held them.
_UNCOVER = """
UPDATE pgbraid.bm25_segments s SET ordinals = s.ordinals - g.gone
FROM (SELECT seg.segment, range_agg(int4range(o.o, o.o, '[]')) AS gone
      FROM pgbraid.bm25_segments seg
      JOIN unnest(%(partitions)s::bigint[], %(ordinals)s::int[]) AS o(p, o)
        ON seg.partition_id = o.p AND seg.ordinals @> o.o
      WHERE seg.pipeline_id = %(pipeline)s GROUP BY seg.segment) g
WHERE s.pipeline_id = %(pipeline)s AND s.segment = g.segment
"""


def evict(conn: psycopg.Connection, pipeline_id: int, version_id: int) -> None:
    """A version's fragments stop counting (``retire``) and their postings go at once:
    each segment holding one is replaced by one without them (``bm25_merge.excise``),
    so no list a query reads holds a posting of theirs (the trace's counts included)."""
    retire(conn, pipeline_id, version_id)
    held: dict[tuple[int, int], tuple[list[int], set[str]]] = defaultdict(lambda: ([], set()))
    for partition, segment, ordinal, terms in conn.execute(
            _HOLDING, {"pipeline": pipeline_id, "version": version_id}):
        held[(partition, segment)][0].append(ordinal)
        held[(partition, segment)][1].update(terms)
    for (partition, segment), (ordinals, terms) in sorted(held.items()):
        bm25_merge.excise(conn, pipeline_id, partition, segment, ordinals, sorted(terms))


def restore(conn: psycopg.Connection, pipeline_id: int, version_id: int) -> None:
    """An evicted version's fragments count again under their own ordinals: their
    postings written again from the forward index into a new segment per partition
    (each ordinal first cut out of the ranges of segments that held it once), their
    statistics added back."""
    rows = conn.execute(_FORWARD, {"pipeline": pipeline_id, "version": version_id}).fetchall()
    if not rows:
        return
    ids = partitions(conn, pipeline_id, {partition_key(tuple(r[5])) for r in rows})
    pending = Pending()
    for ordinal, length, terms, tfs, config, classifications in rows:
        pending.add(ordinal, length, terms, tfs, config, ids[partition_key(tuple(classifications))])
    conn.execute(_UNCOVER, {"pipeline": pipeline_id, "partitions": pending.partitions,
                            "ordinals": pending.ordinals})
    first = next_segment(conn, pipeline_id)
    for partition in sorted(flush(conn, pipeline_id, pending, first)):
        bm25_merge.merge_tiers(conn, pipeline_id, partition)


def _pack(pending: Pending) -> dict[str, list]:
    """The postings of the pending fragments per term (bm25_merge.pack)."""
    sizes = np.fromiter(map(len, pending.terms), dtype=np.int64, count=len(pending.terms))
    total = int(sizes.sum())
    if not total:
        return {"terms": []}
    ids = bm25_merge.numbered(chain.from_iterable(pending.terms))
    term_of = np.fromiter(map(ids.__getitem__, chain.from_iterable(pending.terms)),
                          dtype=np.int64, count=total)
    tfs = np.minimum(np.fromiter(chain.from_iterable(pending.tfs), dtype=np.int64, count=total),
                     MAX_LENGTH).astype("<u2")
    ordinals = np.repeat(np.asarray(pending.ordinals, dtype="<i4"), sizes)
    lengths = np.repeat(np.asarray(pending.lengths, dtype="<u2"), sizes)
    return bm25_merge.pack(list(ids), term_of, ordinals, tfs, lengths)


def _count(conn: psycopg.Connection, pipeline_id: int, pending: Pending) -> None:
    deltas: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for partition, config, length in zip(pending.partitions, pending.configs, pending.lengths):
        delta = deltas[(partition, config)]
        delta[0] += 1
        delta[1] += length
    keys = sorted(deltas)
    conn.execute(_STATS, {"pipeline": pipeline_id, "partitions": [p for p, _ in keys], "configs": [c for _, c in keys],
                          "counts": [deltas[k][0] for k in keys],
                          "lengths": [deltas[k][1] for k in keys]})


def flush(conn: psycopg.Connection, pipeline_id: int, pending: Pending,
          first_segment: int) -> set[int]:
    """Write the batch's postings as one segment per partition and count them in the
    statistics; merge by tiers each partition's segments written since
    ``first_segment`` (this ingest call). Returns the partitions written."""
    if not pending:
        return set()
    parts = pending.split()
    base = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_segment = next_segment + %(n)s"
        " WHERE pipeline_id = %(p)s RETURNING next_segment - %(n)s",
        {"n": len(parts), "p": pipeline_id}).fetchone()[0]
    for segment, (partition, part) in enumerate(sorted(parts.items()), start=base):
        conn.execute(_SEGMENT, {"pipeline": pipeline_id, "partition": partition,
                                "segment": segment, "fragments": len(part),
                                "tier": tier_of(len(part)), "ordinals": part.ordinals})
        packed = _pack(part)
        if packed["terms"]:
            conn.execute(INSERT_POSTINGS, {"pipeline": pipeline_id, "partition": partition,
                                           "segment": segment, **packed})
    _count(conn, pipeline_id, pending)
    conn.execute(_PLACE_DEAD, {"pipeline": pipeline_id, "segments": list(range(base, base + len(parts)))})
    for partition in sorted(parts):
        bm25_merge.merge_tiers(conn, pipeline_id, partition, since=first_segment)
    return set(parts)


def next_segment(conn: psycopg.Connection, pipeline_id: int) -> int:
    row = conn.execute("SELECT next_segment FROM pgbraid.bm25_stats WHERE pipeline_id = %s",
                       (pipeline_id,)).fetchone()
    return row[0] if row else 0


def merge_since(conn: psycopg.Connection, pipeline_id: int, first_segment: int,
                partitions: set[int]) -> None:
    """At the end of an ingest call: merge each partition it wrote to's segments since
    ``first_segment`` into one (absorbing older segments of lower tiers), then that
    partition's full tiers; then rewrite dead-heavy segments."""
    lock(conn, pipeline_id)
    for partition in sorted(partitions):
        bm25_merge.merge_call(conn, pipeline_id, partition, first_segment)
        bm25_merge.absorb(conn, pipeline_id, partition, first_segment)
        bm25_merge.merge_tiers(conn, pipeline_id, partition)
    bm25_merge.compact(conn, pipeline_id)


def compact(conn: psycopg.Connection, pipeline_id: int) -> int:
    """Rewrite the segments of the pipeline heavy with dead fragments (bm25_merge.DEAD_SHARE)."""
    lock(conn, pipeline_id)
    return bm25_merge.compact(conn, pipeline_id)


def merge_tiers(conn: psycopg.Connection, pipeline_id: int, *, everything: bool = False) -> int:
    """Merge every partition's full tiers (or all of each partition's segments into one)."""
    lock(conn, pipeline_id)
    ids = [r[0] for r in conn.execute("SELECT id FROM pgbraid.bm25_partitions"
                                      " WHERE pipeline_id = %s ORDER BY id", (pipeline_id,))]
    return sum(bm25_merge.merge_tiers(conn, pipeline_id, p, everything=everything) for p in ids)
