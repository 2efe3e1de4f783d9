"""Merging a partition's BM25 segments (the caller holds bm25_index.lock).

A segment never changes once committed: a merge writes a new one (numbers only
grow) and deletes those it replaces, dropping the postings of dead fragments
and their rows in bm25_dead (each names the segment holding the fragment:
segments know the ordinals they cover). Merges stay
inside one partition and are decided by that partition's own segments only,
so a partition's layout depends on the writes to it and nothing else:

- within an ingest call, the partition's segments written since the call began
  merge by size tier (MERGE_FACTOR of a tier make one of the next), and at the
  end of the call into one, which absorbs the older segments of lower tiers;
- then the partition's segments of the same size tier merge once MERGE_FACTOR
  exist;
- a segment whose dead fragments reach DEAD_SHARE is rewritten alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import count
from typing import Iterable

import numpy as np
import psycopg

MERGE_FACTOR = 8
TIER_BASE = 64  # a segment of up to TIER_BASE fragments is tier 0; tiers grow by MERGE_FACTOR
# A segment is rewritten once this share of the fragments it holds are dead: every
# query ships and masks the dead ordinals of its partitions (measured at 100k
# fragments: 1,469 dead cost ~0.8 ms a query).
DEAD_SHARE = 0.1

# Large arrays go in binary (%b): psycopg's text array dumper quotes element by element.
# FROM the pipeline's row of bm25_stats (ANCHOR: see there).
INSERT_POSTINGS = """
INSERT INTO pgbraid.bm25_postings
    (pipeline_id, partition_id, segment, term, postings, ordinals, tfs, lengths)
SELECT anchor.pipeline_id, %(partition)s, %(segment)s, x.* FROM pgbraid.bm25_stats anchor
CROSS JOIN LATERAL unnest(%(terms)b::text[], %(counts)b::int[], %(ordinals)b::bytea[],
                          %(tfs)b::bytea[], %(lengths)b::bytea[]) AS x
WHERE anchor.pipeline_id = %(pipeline)s
"""

_SINCE = """
SELECT coalesce(array_agg(segment ORDER BY segment), '{}') FROM pgbraid.bm25_segments
WHERE pipeline_id = %(pipeline)s AND partition_id = %(partition)s AND segment >= %(first)s
"""

_FULL_TIER = """
SELECT array_agg(segment ORDER BY segment) FROM pgbraid.bm25_segments
WHERE pipeline_id = %(pipeline)s AND partition_id = %(partition)s AND segment >= %(since)s
GROUP BY tier HAVING count(*) >= %(factor)s
ORDER BY tier LIMIT 1
"""

_EVERY = """
SELECT array_agg(segment ORDER BY segment) FROM pgbraid.bm25_segments
WHERE pipeline_id = %(pipeline)s AND partition_id = %(partition)s HAVING count(*) > 1
"""


# The new segment covers its sources' fragments (less the dead ones dropped: the
# ordinal ranges keep covering them, which no lookup will ask for again).
_REPLACE = """
WITH sources AS (
    DELETE FROM pgbraid.bm25_segments
    WHERE pipeline_id = %(pipeline)s AND segment = ANY(%(sources)s::int[])
    RETURNING fragments, ordinals)
INSERT INTO pgbraid.bm25_segments (pipeline_id, partition_id, segment, fragments, tier, ordinals)
SELECT %(pipeline)s, %(partition)s, %(segment)s, held.n - %(dropped)s, 0, covered.r
FROM (SELECT sum(fragments) AS n FROM sources) held,
     (SELECT range_agg(r) AS r FROM sources, unnest(ordinals) AS r) covered
RETURNING fragments
"""

# The call's segment and the older ones of lower tiers (NULL when there are none).
_ABSORB = """
WITH last AS (
    SELECT pipeline_id, segment, tier FROM pgbraid.bm25_segments
    WHERE pipeline_id = %(pipeline)s AND partition_id = %(partition)s AND segment >= %(first)s
    ORDER BY segment DESC LIMIT 1)
SELECT array_agg(s.segment ORDER BY s.segment) || min(last.segment)
FROM pgbraid.bm25_segments s JOIN last ON last.pipeline_id = s.pipeline_id
WHERE s.pipeline_id = %(pipeline)s AND s.partition_id = %(partition)s
  AND s.segment < last.segment AND s.tier < last.tier
HAVING count(*) > 0
"""

# Segments in which dead fragments reach a share of those held.
_DEAD_HEAVY = """
SELECT s.partition_id, s.segment FROM pgbraid.bm25_segments s
JOIN (SELECT segment, count(*) AS dead FROM pgbraid.bm25_dead
      WHERE pipeline_id = %(pipeline)s AND segment IS NOT NULL GROUP BY segment) d
  ON d.segment = s.segment AND s.pipeline_id = %(pipeline)s
WHERE s.pipeline_id = %(pipeline)s AND d.dead >= %(share)s * s.fragments
ORDER BY s.segment
"""


def tier_of(fragments: int) -> int:
    return max(0, int(math.log(max(fragments, 1) / TIER_BASE, MERGE_FACTOR)) + 1) if fragments > TIER_BASE else 0


def merge_call(conn: psycopg.Connection, pipeline_id: int, partition: int,
               first_segment: int) -> bool:
    """Merge the partition's segments numbered from ``first_segment`` on into one."""
    segments = conn.execute(_SINCE, {"pipeline": pipeline_id, "partition": partition,
                                     "first": first_segment}).fetchone()[0]
    if len(segments) < 2:
        return False
    _merge(conn, pipeline_id, partition, segments)
    return True


def absorb(conn: psycopg.Connection, pipeline_id: int, partition: int, first_segment: int) -> bool:
    """Merge the segment an ingest call left (the newest from ``first_segment`` on) with
    the partition's older segments of lower tiers, so tiers never grow from old to new
    and small old segments do not linger under big new ones."""
    row = conn.execute(_ABSORB, {"pipeline": pipeline_id, "partition": partition,
                                 "first": first_segment}).fetchone()
    if row is None or row[0] is None:
        return False
    _merge(conn, pipeline_id, partition, row[0])
    return True


def merge_tiers(conn: psycopg.Connection, pipeline_id: int, partition: int, *, since: int = 0,
                everything: bool = False) -> int:
    """Merge any tier of the partition's segments numbered from ``since`` on that holds
    MERGE_FACTOR segments (or all its segments into one); returns the merges done."""
    merges = 0
    while True:
        statement = _EVERY if everything else _FULL_TIER
        row = conn.execute(statement, {"pipeline": pipeline_id, "partition": partition,
                                       "factor": MERGE_FACTOR,
                                       "since": since}).fetchone()
        if row is None:
            return merges
        _merge(conn, pipeline_id, partition, row[0])
        merges += 1
        everything = False


def compact(conn: psycopg.Connection, pipeline_id: int) -> int:
    """Rewrite each segment of the pipeline in which dead fragments reach DEAD_SHARE
    (decided per segment, so per partition); returns the segments rewritten."""
    rows = conn.execute(_DEAD_HEAVY, {"pipeline": pipeline_id, "share": DEAD_SHARE}).fetchall()
    for partition, segment in rows:
        _merge(conn, pipeline_id, partition, [segment])
    return len(rows)


# Excising fragments from a segment: a new segment (segments never change) gets a
# copy of the old one's posting rows, copied in SQL, but for the terms the fragments
# hold, which are written again without them; the old segment's other dead rows move
# to it. (Moving the rows by UPDATE took as long, 1.0-1.1x; a merge through Python
# 3.8-6.4x: bench/quarantine.py.)
_COPY_SEGMENT = """
INSERT INTO pgbraid.bm25_segments (pipeline_id, partition_id, segment, fragments, tier, ordinals)
SELECT pipeline_id, partition_id, %(new)s, fragments - %(removed)s, tier, ordinals
FROM pgbraid.bm25_segments WHERE pipeline_id = %(pipeline)s AND segment = %(old)s
"""
_COPY_POSTINGS = """
INSERT INTO pgbraid.bm25_postings
    (pipeline_id, partition_id, segment, term, postings, ordinals, tfs, lengths)
SELECT pipeline_id, partition_id, %(new)s, term, postings, ordinals, tfs, lengths
FROM pgbraid.bm25_postings
WHERE pipeline_id = %(pipeline)s AND segment = %(old)s AND term <> ALL(%(terms)s::text[])
"""
_TOUCHED = """
SELECT term, ordinals, tfs, lengths FROM pgbraid.bm25_postings
WHERE pipeline_id = %(pipeline)s AND segment = %(old)s AND term = ANY(%(terms)s::text[])
ORDER BY term
"""
_MOVE_DEAD = """
UPDATE pgbraid.bm25_dead SET segment = %(new)s
WHERE pipeline_id = %(pipeline)s AND segment = %(old)s AND ordinal <> ALL(%(ordinals)s::int[])
"""


def excise(conn: psycopg.Connection, pipeline_id: int, partition: int, segment: int,
           ordinals: list[int], terms: list[str]) -> None:
    """Replace ``segment`` by one without the postings of ``ordinals`` (which hold only
    ``terms``): the cost of copying its rows in SQL plus rewriting those terms' lists,
    not of a merge, which reads every list into Python. A segment left with no
    fragment is dropped."""
    held = conn.execute("SELECT fragments FROM pgbraid.bm25_segments WHERE pipeline_id = %s"
                        " AND segment = %s", (pipeline_id, segment)).fetchone()[0]
    if held <= len(ordinals):
        conn.execute("DELETE FROM pgbraid.bm25_segments WHERE pipeline_id = %s AND segment = %s",
                     (pipeline_id, segment))
        return
    new = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_segment = next_segment + 1 WHERE pipeline_id = %s"
        " RETURNING next_segment - 1", (pipeline_id,)).fetchone()[0]
    params = {"pipeline": pipeline_id, "old": segment, "new": new, "terms": terms,
              "ordinals": ordinals, "removed": len(ordinals)}
    conn.execute(_COPY_SEGMENT, params)
    conn.execute(_COPY_POSTINGS, params)
    gone = np.asarray(ordinals, dtype="<i4")
    packed: dict[str, list] = {"terms": [], "counts": [], "ordinals": [], "tfs": [], "lengths": []}
    with conn.cursor(binary=True) as cur:
        for term, raw, tfs, lengths in cur.execute(_TOUCHED, params).fetchall():
            held = np.frombuffer(raw, "<i4")
            keep = ~np.isin(held, gone)
            if keep.any():
                packed["terms"].append(term)
                packed["counts"].append(int(keep.sum()))
                for name, values, dtype in (("ordinals", held, "<i4"), ("tfs", tfs, "<u2"),
                                            ("lengths", lengths, "<u2")):
                    array = values if name == "ordinals" else np.frombuffer(values, dtype)
                    packed[name].append(array[keep].tobytes())
    if packed["terms"]:
        conn.execute(INSERT_POSTINGS, {"pipeline": pipeline_id, "partition": partition,
                                       "segment": new, **packed})
    conn.execute(_MOVE_DEAD, params)
    conn.execute("DELETE FROM pgbraid.bm25_segments WHERE pipeline_id = %s AND segment = %s",
                 (pipeline_id, segment))


def numbered(terms: Iterable[str]) -> dict[str, int]:
    """Each distinct term and its number, in order of first appearance (C-speed: a
    Python loop over every posting's term was most of packing a batch)."""
    return dict(zip(dict.fromkeys(terms), count()))


def pack(terms: list[str], term_of: np.ndarray, ordinals: np.ndarray, tfs: np.ndarray,
         lengths: np.ndarray) -> dict[str, list]:
    """Postings rows (INSERT_POSTINGS) of postings given as flat arrays: posting i is of
    ``terms[term_of[i]]`` (``terms`` distinct), fragment ``ordinals[i]`` ("<i4"), with
    ``tfs[i]`` and ``lengths[i]`` ("<u2"). Terms in code point order, each list sorted
    by ordinal (bm25_topk searches them); a fragment is in a term's list once. All in
    numpy for the whole batch or merge: per term in Python it was most of a merge."""
    rank = np.empty(len(terms), dtype=np.int64)
    rank[sorted(range(len(terms)), key=terms.__getitem__)] = np.arange(len(terms))
    ranked = rank[term_of]
    order = np.lexsort((ordinals, ranked))
    counts = np.bincount(ranked, minlength=len(terms))
    bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
    ordinals, tfs, lengths = ordinals[order], tfs[order], lengths[order]
    by_rank = sorted(terms)
    spans = [(by_rank[r], bounds[r], bounds[r + 1]) for r in range(len(terms))
             if bounds[r + 1] > bounds[r]]
    return {
        "terms": [term for term, _, _ in spans],
        "counts": [b - a for _, a, b in spans],
        "ordinals": [ordinals[a:b].tobytes() for _, a, b in spans],
        "tfs": [tfs[a:b].tobytes() for _, a, b in spans],
        "lengths": [lengths[a:b].tobytes() for _, a, b in spans],
    }


def _merged(conn: psycopg.Connection, pipeline_id: int, segments: list[int]) -> tuple[dict, int]:
    """The segments' postings per term, without dead fragments, sorted by ordinal;
    and how many dead fragments they held."""
    dead = conn.execute("SELECT coalesce(array_agg(ordinal), '{}') FROM pgbraid.bm25_dead"
                        " WHERE pipeline_id = %s AND segment = ANY(%s)",
                        (pipeline_id, segments)).fetchone()[0]
    with conn.cursor(binary=True) as cur:
        rows = cur.execute("SELECT term, ordinals, tfs, lengths FROM pgbraid.bm25_postings"
                           " WHERE pipeline_id = %s AND segment = ANY(%s)",
                           (pipeline_id, segments)).fetchall()
    ids = numbered(r[0] for r in rows)
    row_terms = np.fromiter((ids[r[0]] for r in rows), dtype=np.int64, count=len(rows))
    sizes = np.fromiter((len(r[1]) // 4 for r in rows), dtype=np.int64, count=len(rows))
    term_of = np.repeat(row_terms, sizes)
    ordinals = np.frombuffer(b"".join(r[1] for r in rows), dtype="<i4")
    tfs = np.frombuffer(b"".join(r[2] for r in rows), dtype="<u2")
    lengths = np.frombuffer(b"".join(r[3] for r in rows), dtype="<u2")
    if dead:
        keep = ~np.isin(ordinals, np.asarray(dead, dtype="<i4"))
        term_of, ordinals, tfs, lengths = term_of[keep], ordinals[keep], tfs[keep], lengths[keep]
    return pack(list(ids), term_of, ordinals, tfs, lengths), len(dead)


def _merge(conn: psycopg.Connection, pipeline_id: int, partition: int, segments: list[int]) -> None:
    """One new segment for ``segments``, without their dead fragments; deleting them
    deletes their dead rows (cascade)."""
    packed, dropped = _merged(conn, pipeline_id, segments)
    segment = conn.execute(
        "UPDATE pgbraid.bm25_stats SET next_segment = next_segment + 1 WHERE pipeline_id = %s"
        " RETURNING next_segment - 1", (pipeline_id,)).fetchone()[0]
    fragments = conn.execute(_REPLACE, {"pipeline": pipeline_id, "partition": partition,
                                        "segment": segment, "sources": segments,
                                        "dropped": dropped}).fetchone()[0]
    conn.execute("UPDATE pgbraid.bm25_segments SET tier = %s WHERE pipeline_id = %s"
                 " AND segment = %s", (tier_of(fragments), pipeline_id, segment))
    if packed["terms"]:
        conn.execute(INSERT_POSTINGS, {"pipeline": pipeline_id, "partition": partition,
                                       "segment": segment, **packed})
