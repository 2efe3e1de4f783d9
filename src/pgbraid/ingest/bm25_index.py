"""Maintaining the BM25 index inside the ingest transaction.

Each fragment gets a dense per-pipeline ordinal and its term frequencies (the
forward index, used to expire it and to explain hits). The postings of a
batch's fragments are written as one segment at the end of the batch; a
fragment whose version expires is added to ``bm25_dead`` and stops counting
at once: in the pipeline's length statistics here, and in each term's ``df``,
which a query works out as the term's postings minus the dead ones. An ingest call
merges the segments its batches wrote into one, and segments of the same size
tier merge once ``MERGE_FACTOR`` of them exist, so a query reads few rows per
term; merging drops dead postings, and a merge of every segment empties
``bm25_dead``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import psycopg

MERGE_FACTOR = 8
TIER_BASE = 64  # a segment of up to TIER_BASE fragments is tier 0; tiers grow by MERGE_FACTOR
MAX_LENGTH = 65_535  # lengths and term frequencies are stored as uint16

_EXPIRE = """
WITH gone AS (
    SELECT f.bm25_ordinal, f.bm25_length FROM pgbraid.fragments f
    WHERE f.version_id = %(version)s AND f.bm25_ordinal IS NOT NULL),
dead AS (
    INSERT INTO pgbraid.bm25_dead (pipeline_id, ordinal)
    SELECT %(pipeline)s, bm25_ordinal FROM gone ON CONFLICT DO NOTHING)
UPDATE pgbraid.bm25_stats SET
    fragments = fragments - (SELECT count(*) FROM gone),
    total_length = total_length - (SELECT coalesce(sum(bm25_length), 0) FROM gone)
WHERE pipeline_id = %(pipeline)s
"""

# Large arrays go in binary (%b): psycopg's text array dumper quotes element by element.
_INSERT_POSTINGS = """
INSERT INTO pgbraid.bm25_postings (pipeline_id, segment, term, postings, ordinals, tfs, lengths)
SELECT %(pipeline)s, %(segment)s, * FROM unnest(%(terms)b::text[], %(counts)b::int[],
    %(ordinals)b::bytea[], %(tfs)b::bytea[], %(lengths)b::bytea[])
"""


@dataclass
class Pending:
    """The postings of fragments written in this batch, flushed as one segment."""

    ordinals: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    terms: list[list[str]] = field(default_factory=list)
    tfs: list[list[int]] = field(default_factory=list)
    configs: set[str] = field(default_factory=set)
    """Text-search configurations of the fragments written."""

    def add(self, ordinal: int, length: int, terms: list[str] | None, tfs: list[int] | None,
            config: str) -> None:
        self.configs.add(config)
        self.ordinals.append(ordinal)
        self.lengths.append(min(length, MAX_LENGTH))
        self.terms.append(terms or [])
        self.tfs.append([min(t, MAX_LENGTH) for t in tfs or []])

    def extend(self, other: "Pending") -> None:
        self.ordinals += other.ordinals
        self.lengths += other.lengths
        self.terms += other.terms
        self.tfs += other.tfs
        self.configs |= other.configs

    def __len__(self) -> int:
        return len(self.ordinals)


def ensure_stats(conn: psycopg.Connection, pipeline_id: int) -> None:
    conn.execute("INSERT INTO pgbraid.bm25_stats (pipeline_id) VALUES (%s) ON CONFLICT DO NOTHING",
                 (pipeline_id,))


def reserve_ordinals(conn: psycopg.Connection, pipeline_id: int, count: int) -> int:
    """The first of ``count`` new ordinals; the row lock orders concurrent writers."""
    row = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_ordinal = next_ordinal + %(n)s"
        " WHERE pipeline_id = %(p)s RETURNING next_ordinal - %(n)s",
        {"n": count, "p": pipeline_id}).fetchone()
    if row is None:
        ensure_stats(conn, pipeline_id)
        return reserve_ordinals(conn, pipeline_id, count)
    return row[0]


def expire_version(conn: psycopg.Connection, pipeline_id: int, version_id: int) -> None:
    conn.execute(_EXPIRE, {"pipeline": pipeline_id, "version": version_id})


def _pack(pending: Pending) -> dict[str, list]:
    by_term: dict[str, tuple[list[int], list[int], list[int]]] = defaultdict(lambda: ([], [], []))
    rows = sorted(zip(pending.ordinals, pending.lengths, pending.terms, pending.tfs),
                  key=lambda row: row[0])  # each list sorted by ordinal (bm25_topk searches them)
    for ordinal, length, terms, tfs in rows:
        for term, tf in zip(terms, tfs):
            entry = by_term[term]
            entry[0].append(ordinal)
            entry[1].append(tf)
            entry[2].append(length)
    terms = sorted(by_term)
    return {
        "terms": terms,
        "counts": [len(by_term[t][0]) for t in terms],
        "ordinals": [np.asarray(by_term[t][0], dtype="<i4").tobytes() for t in terms],
        "tfs": [np.asarray(by_term[t][1], dtype="<u2").tobytes() for t in terms],
        "lengths": [np.asarray(by_term[t][2], dtype="<u2").tobytes() for t in terms],
    }


def flush(conn: psycopg.Connection, pipeline_id: int, pending: Pending) -> None:
    """Write the batch's postings as one segment and count them in the statistics."""
    if not pending:
        return
    segment = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_segment = next_segment + 1,"
        " fragments = fragments + %(n)s, total_length = total_length + %(length)s,"
        " configs = CASE WHEN configs @> %(configs)s::text[] THEN configs"
        "  ELSE ARRAY(SELECT DISTINCT unnest(configs || %(configs)s::text[]) ORDER BY 1) END"
        " WHERE pipeline_id = %(p)s RETURNING next_segment - 1",
        {"n": len(pending), "length": sum(pending.lengths), "p": pipeline_id,
         "configs": sorted(pending.configs)}).fetchone()[0]
    conn.execute("INSERT INTO pgbraid.bm25_segments (pipeline_id, segment, fragments, tier)"
                 " VALUES (%s, %s, %s, %s)", (pipeline_id, segment, len(pending),
                                              tier_of(len(pending))))
    packed = _pack(pending)
    if packed["terms"]:
        conn.execute(_INSERT_POSTINGS, {"pipeline": pipeline_id, "segment": segment, **packed})
    merge_tiers(conn, pipeline_id)


def tier_of(fragments: int) -> int:
    return max(0, int(math.log(max(fragments, 1) / TIER_BASE, MERGE_FACTOR)) + 1) if fragments > TIER_BASE else 0


def next_segment(conn: psycopg.Connection, pipeline_id: int) -> int:
    row = conn.execute("SELECT next_segment FROM pgbraid.bm25_stats WHERE pipeline_id = %s",
                       (pipeline_id,)).fetchone()
    return row[0] if row else 0


def merge_since(conn: psycopg.Connection, pipeline_id: int, first_segment: int) -> None:
    """Merge the segments written since ``first_segment`` (one ingest call) into one."""
    segments = [r[0] for r in conn.execute(
        "SELECT segment FROM pgbraid.bm25_segments WHERE pipeline_id = %s AND segment >= %s",
        (pipeline_id, first_segment))]
    if len(segments) > 1:
        _merge(conn, pipeline_id, segments)
    merge_tiers(conn, pipeline_id)


def merge_tiers(conn: psycopg.Connection, pipeline_id: int, *, everything: bool = False) -> int:
    """Merge any tier holding MERGE_FACTOR segments (or all segments); returns merges done."""
    merges = 0
    while True:
        if everything:
            row = conn.execute(
                "SELECT array_agg(segment) FROM pgbraid.bm25_segments"
                " WHERE pipeline_id = %s HAVING count(*) > 1", (pipeline_id,)).fetchone()
        else:
            row = conn.execute(
                "SELECT array_agg(segment) FROM pgbraid.bm25_segments WHERE pipeline_id = %s"
                " GROUP BY tier HAVING count(*) >= %s ORDER BY tier LIMIT 1",
                (pipeline_id, MERGE_FACTOR)).fetchone()
        if row is None:
            return merges
        _merge(conn, pipeline_id, row[0])
        merges += 1
        everything = False


def _merge(conn: psycopg.Connection, pipeline_id: int, segments: list[int]) -> None:
    dead = conn.execute("SELECT coalesce(array_agg(ordinal), '{}') FROM pgbraid.bm25_dead"
                        " WHERE pipeline_id = %s", (pipeline_id,)).fetchone()[0]
    dead_set = np.asarray(dead, dtype="<i4")
    parts: dict[str, list[tuple[bytes, bytes, bytes]]] = defaultdict(list)
    with conn.cursor(binary=True) as cur:
        cur.execute("SELECT term, ordinals, tfs, lengths FROM pgbraid.bm25_postings"
                    " WHERE pipeline_id = %s AND segment = ANY(%s)", (pipeline_id, segments))
        for term, ordinals, tfs, lengths in cur:
            parts[term].append((ordinals, tfs, lengths))
    terms, counts, packed_o, packed_t, packed_l = [], [], [], [], []
    for term in sorted(parts):
        ordinals = np.concatenate([np.frombuffer(p[0], "<i4") for p in parts[term]])
        tfs = np.concatenate([np.frombuffer(p[1], "<u2") for p in parts[term]])
        lengths = np.concatenate([np.frombuffer(p[2], "<u2") for p in parts[term]])
        keep = ~np.isin(ordinals, dead_set) if len(dead_set) else np.ones(len(ordinals), bool)
        keep = np.flatnonzero(keep)[np.argsort(ordinals[keep], kind="stable")]  # sorted by ordinal
        ordinals, tfs, lengths = ordinals[keep], tfs[keep], lengths[keep]
        if len(ordinals):
            terms.append(term)
            counts.append(len(ordinals))
            packed_o.append(ordinals.tobytes())
            packed_t.append(tfs.tobytes())
            packed_l.append(lengths.tobytes())
    fragments = conn.execute("SELECT sum(fragments) FROM pgbraid.bm25_segments"
                             " WHERE pipeline_id = %s AND segment = ANY(%s)",
                             (pipeline_id, segments)).fetchone()[0]
    segment = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_segment = next_segment + 1 WHERE pipeline_id = %s"
        " RETURNING next_segment - 1", (pipeline_id,)).fetchone()[0]
    conn.execute("DELETE FROM pgbraid.bm25_segments WHERE pipeline_id = %s AND segment = ANY(%s)",
                 (pipeline_id, segments))
    conn.execute("INSERT INTO pgbraid.bm25_segments (pipeline_id, segment, fragments, tier)"
                 " VALUES (%s, %s, %s, %s)", (pipeline_id, segment, fragments, tier_of(fragments)))
    if terms:
        conn.execute(_INSERT_POSTINGS, {"pipeline": pipeline_id, "segment": segment, "terms": terms,
                                        "counts": counts, "ordinals": packed_o, "tfs": packed_t,
                                        "lengths": packed_l})
    remaining = conn.execute("SELECT count(*) FROM pgbraid.bm25_segments WHERE pipeline_id = %s",
                             (pipeline_id,)).fetchone()[0]
    if remaining == 1:  # every posting was rewritten without the dead ones
        conn.execute("DELETE FROM pgbraid.bm25_dead WHERE pipeline_id = %s", (pipeline_id,))
