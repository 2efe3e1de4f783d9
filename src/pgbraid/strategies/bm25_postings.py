"""BM25 posting arrays, read through a per-process cache of immutable segments.

A segment's postings never change once committed: merges write a new segment
and delete the old ones, and segment numbers only grow (``next_segment`` is
committed with the segment). So the arrays of (pipeline, segment, term) can be
kept in memory and reused, while PostgreSQL still decides, in each query's own
snapshot, which segments exist: the cache only saves re-reading bytes that a
query has already been told are current. A pipeline's creation time is part of
the key, so a recreated database never serves another pipeline's arrays.

Each entry also keeps its per-posting impacts ``tf / (tf + k1 * (1 - b + b * dl / avgdl))``
for the last (k1, b, avgdl) it was scored with; avgdl changes with every
ingest, which recomputes them, so scores stay exact.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Hashable

import numpy as np
import psycopg

from . import bm25_blockmax

# pipeline id, pipeline created_at, segment (or the segments of a merged list), term
Key = tuple[int, datetime, int | tuple[int, ...], str]

_ARRAYS = """
SELECT p.segment, p.term, p.ordinals, p.tfs, p.lengths
FROM unnest(%(segments)s::int[], %(terms)s::text[]) AS want(segment, term)
JOIN pgbraid.bm25_postings p
  ON p.pipeline_id = %(pipeline)s::bigint AND p.term = want.term AND p.segment = want.segment
"""


@dataclass(eq=False)
class Postings:
    """One term's postings in one segment: ordinals (int32), tf and fragment length (uint16)."""

    ordinals: np.ndarray
    tfs: np.ndarray
    lengths: np.ndarray
    _impacts: tuple[Hashable, np.ndarray, float] | None = field(default=None, repr=False)
    _windows: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    _peaks: tuple[Hashable, np.ndarray] | None = field(default=None, repr=False)
    _leaders: tuple[Hashable, np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def from_bytes(cls, ordinals: bytes, tfs: bytes, lengths: bytes) -> "Postings":
        """The stored arrays, sorted by ordinal (earlier merges wrote some unsorted)."""
        o, t, n = np.frombuffer(ordinals, "<i4"), np.frombuffer(tfs, "<u2"), np.frombuffer(lengths, "<u2")
        if len(o) > 1 and not (o[1:] > o[:-1]).all():
            order = np.argsort(o, kind="stable")
            o, t, n = o[order], t[order], n[order]
        return cls(o, t, n)

    @classmethod
    def merged(cls, parts: list["Postings"]) -> "Postings":
        """One list of the parts' postings (one term's lists in several segments), sorted
        by ordinal (equal ordinals in the parts' order)."""
        o = np.concatenate([p.ordinals for p in parts])
        t = np.concatenate([p.tfs for p in parts])
        n = np.concatenate([p.lengths for p in parts])
        if len(o) > 1 and not (o[1:] > o[:-1]).all():
            order = np.argsort(o, kind="stable")
            o, t, n = o[order], t[order], n[order]
        return cls(o, t, n)

    def __len__(self) -> int:
        return len(self.ordinals)

    @property
    def nbytes(self) -> int:
        # arrays and impacts, windows (at most one each per posting), overhead
        return 24 * len(self.ordinals) + 200

    def impacts(self, k1: float, b: float, avgdl: float) -> np.ndarray:
        """tf / (tf + k1 * (1 - b + b * dl / avgdl)) per posting, float32, memoised."""
        return self._memo(k1, b, avgdl)[1]

    def max_impact(self, k1: float, b: float, avgdl: float) -> float:
        """The largest impact (the list's share of a score bound)."""
        return self._memo(k1, b, avgdl)[2]

    def blocks(self, k1: float, b: float, avgdl: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ordinal windows the list has postings in (bm25_blockmax.WINDOW ordinals
        each, ascending), where each starts in the list (and where the last ends),
        and the largest impact in each; memoised."""
        if self._windows is None:
            windows = self.ordinals >> bm25_blockmax.SHIFT
            starts = np.flatnonzero(np.diff(windows, prepend=-1)) if len(windows) else \
                np.zeros(0, dtype=np.intp)
            self._windows = (windows[starts].astype(np.int32),
                             np.append(starts, len(windows)).astype(np.int32))
        present, starts = self._windows
        key = (k1, b, avgdl)
        peaks = self._peaks
        if peaks is None or peaks[0] != key:
            impacts = self.impacts(k1, b, avgdl)
            peaks = (key, np.maximum.reduceat(impacts, starts[:-1]) if len(impacts)
                     else np.zeros(0, dtype=np.float32))
            self._peaks = peaks
        return present, starts, peaks[1]

    def leaders(self, k1: float, b: float, avgdl: float, count: int) -> np.ndarray:
        """Where the list's ``count`` highest impacts are (in no order); memoised."""
        key = (k1, b, avgdl, count)
        leaders = self._leaders
        if leaders is None or leaders[0] != key:
            impacts = self.impacts(k1, b, avgdl)
            at = (np.arange(len(impacts)) if len(impacts) <= count
                  else np.argpartition(impacts, len(impacts) - count)[-count:])
            leaders = (key, at)
            self._leaders = leaders
        return leaders[1]

    def _memo(self, k1: float, b: float, avgdl: float) -> tuple[Hashable, np.ndarray, float]:
        key = (k1, b, avgdl)
        memo = self._impacts  # one read: another thread may replace it meanwhile
        if memo is not None and memo[0] == key:
            return memo
        tf = self.tfs.astype(np.float32)
        norm = np.float32(k1) * (np.float32(1.0 - b)
                                 + np.float32(b / avgdl) * self.lengths.astype(np.float32))
        impacts = tf / (tf + norm)
        memo = (key, impacts, float(impacts.max()) if len(impacts) else 0.0)
        self._impacts = memo
        return memo


class PostingsCache:
    """LRU of Postings by key, bounded by bytes; thread-safe (hybrid legs run in threads)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, Postings] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Key) -> Postings | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: Key, postings: Postings) -> None:
        if postings.nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = postings
            self._bytes += postings.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes

    @property
    def size_bytes(self) -> int:
        return self._bytes


def load(conn: psycopg.Connection, pipeline_id: int, created_at: datetime,
         wanted: list[tuple[tuple[int, str], list[bytes | None]]],
         cache: PostingsCache | None) -> tuple[dict[tuple[int, str], Postings], int]:
    """The Postings of each (segment, term).

    ``wanted`` pairs each (segment, term) with its arrays when the query already
    returned them (short lists), else with Nones. Every list comes from the cache
    when it is there (a cached short list keeps its sorted arrays and memoised
    impacts); else from the arrays returned, or from PostgreSQL in one statement;
    then it goes into the cache. Returns the postings and how many postings
    PostgreSQL sent.
    """
    found: dict[tuple[int, str], Postings] = {}
    missing: list[tuple[int, str]] = []
    fetched = 0
    for (segment, term), arrays in wanted:
        key = (pipeline_id, created_at, segment, term)
        entry = cache.get(key) if cache is not None else None
        if arrays[0] is not None:
            fetched += len(arrays[0]) // 4
            if entry is None:
                entry = Postings.from_bytes(*arrays)
                if cache is not None:
                    cache.put(key, entry)
        if entry is None:
            missing.append((segment, term))
        else:
            found[(segment, term)] = entry
    if missing:
        with conn.cursor(binary=True) as cur:
            cur.execute(_ARRAYS, {"pipeline": pipeline_id, "segments": [s for s, _ in missing],
                                  "terms": [t for _, t in missing]})
            for segment, term, ordinals, tfs, lengths in cur:
                postings = Postings.from_bytes(ordinals, tfs, lengths)
                found[(segment, term)] = postings
                fetched += len(postings)
                if cache is not None:
                    cache.put((pipeline_id, created_at, segment, term), postings)
    return found, fetched


def by_term(pipeline_id: int, created_at: datetime, lists: dict[tuple[int, str], Postings],
            terms: list[str], cache: PostingsCache | None) -> dict[str, list[Postings]]:
    """Each term's postings as one list: its lists in several segments merged (cached
    under those segments: a segment never changes, so neither does the merge), which
    every ranking then handles in one numpy call instead of one per segment."""
    segments: dict[str, list[int]] = {t: [] for t in terms}
    for segment, term in sorted(lists):
        segments[term].append(segment)
    out: dict[str, list[Postings]] = {}
    for term, held in segments.items():
        parts = [lists[(s, term)] for s in held]
        if len(parts) < 2:
            out[term] = parts
            continue
        key = (pipeline_id, created_at, tuple(held), term)
        merged = cache.get(key) if cache is not None else None
        if merged is None:
            merged = Postings.merged(parts)
            if cache is not None:
                cache.put(key, merged)
        out[term] = [merged]
    return out
