"""Exact pruning on synthetic posting lists: MaxScore, block-max and scoring every
posting give the same fragments, order (ties by ordinal) and score bits as a brute
force, dead fragments never; a term's lists in several segments rank as one."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest


def _brute_force(lists, weights, size, dead, impacts):
    scores = np.zeros(size)
    for postings, weight in zip(lists, weights):
        scores[postings.ordinals] += weight * postings.impacts(*impacts)
    scores[dead] = 0
    ranked = sorted((-s, o) for o, s in enumerate(scores) if s > 0)
    return [o for _, o in ranked], scores


def _synthetic(seed: int, size: int, terms: int = 12):
    from pgbraid.strategies.bm25_postings import Postings

    rng = np.random.default_rng(seed)
    lists, weights = [], []
    for df in rng.zipf(1.3, terms).clip(1, size):
        ordinals = np.sort(rng.choice(size, df, replace=False)).astype("<i4")
        tfs = rng.integers(1, 3, df).astype("<u2")  # few distinct values: many ties
        lengths = rng.choice([10, 20], df).astype("<u2")
        lists.append(Postings(ordinals, tfs, lengths))
        weights.append(float(np.log(1 + size / df)))
    return lists, weights, rng.choice(size, 50, replace=False)


@pytest.mark.parametrize(("seed", "size"), [(s, 5000) for s in range(6)]
                         + [(s, 100_000) for s in range(6, 9)])
def test_pruning_on_synthetic_lists_with_ties_and_dead_fragments(seed, size):
    """MaxScore and block-max rank exactly as scoring every posting: same fragments,
    same order (ties by ordinal), bit-identical scores, dead fragments never."""
    from pgbraid.strategies import bm25_topk

    impacts = (0.9, 0.4, 20.0)
    lists, weights, dead = _synthetic(seed, size, terms=12 if size < 10_000 else 30)
    order, scores = _brute_force(lists, weights, size, dead, impacts)
    for width in (1, 10, 40):
        ranked, firsts = [], []
        for pruning in ("maxscore", "blockmax", "none"):
            terms = [bm25_topk.Term(f"t{i}", w, [p]) for i, (p, w) in enumerate(zip(lists, weights))]
            ranking = bm25_topk.Ranking(terms, size, dead.astype(np.int64), impacts,
                                        pruning=pruning)
            first = ranking.top(width)
            firsts.append((first.tolist(), ranking.scores[first].tolist()))
            if pruning == "maxscore":
                assert ranking.stats.candidates > 0  # phase 2 ran
            if pruning == "blockmax" and size > 10_000:
                assert ranking.stats.windows_scored < ranking.stats.windows  # it pruned
                assert ranking.stats.scored < ranking.stats.postings
            ranking = bm25_topk.Ranking(terms, size, dead.astype(np.int64), impacts,
                                        pruning=pruning)
            ranked.append([o for batch in ranking.batches(width) for o in batch.tolist()])
            assert np.allclose(ranking.scores[ranked[-1]], scores[ranked[-1]], rtol=1e-12)
        assert firsts[0] == firsts[1] == firsts[2]  # same fragments, same bits
        assert firsts[0][0] == order[:width]
        assert ranked[0] == ranked[1] == ranked[2]
        got = ranked[0]
        assert sorted(got) == sorted(order)  # every positive, live fragment, once
        assert all(np.diff(scores[got]) <= 1e-12)  # best first


@pytest.mark.parametrize("seed", range(3))
def test_dead_fragments_at_the_top_neither_rank_nor_raise_the_threshold(seed):
    """The best-scoring fragments are dead (expired, not merged away yet): every ranking
    still returns the exact live top k. Block-max once took its threshold from scores
    that counted them, dropped windows holding live contenders, and ranked others first."""
    from pgbraid.strategies import bm25_topk

    size, impacts = 100_000, (0.9, 0.4, 20.0)
    lists, weights, _ = _synthetic(seed, size, terms=30)
    everyone, _ = _brute_force(lists, weights, size, np.zeros(0, dtype=np.int64), impacts)
    dead = np.asarray(everyone[:60], dtype=np.int64)
    order, _ = _brute_force(lists, weights, size, dead, impacts)
    for width in (10, 40):
        for pruning in ("blockmax", "maxscore", "none"):
            terms = [bm25_topk.Term(f"t{i}", w, [p]) for i, (p, w) in enumerate(zip(lists, weights))]
            ranking = bm25_topk.Ranking(terms, size, dead, impacts, pruning=pruning)
            assert ranking.top(width).tolist() == order[:width], (pruning, width)


def test_contenders_come_from_the_essential_lists_only_when_exact():
    """Scoring every posting, the contenders above the sampled threshold are looked up
    among the postings of the terms no contender can lack (MaxScore's essential
    lists): on lists where the best fragments hold only common terms, the top k
    equals the brute force's whichever way they are found."""
    from pgbraid.strategies import bm25_topk
    from pgbraid.strategies.bm25_postings import Postings

    size, impacts = 200_000, (0.9, 0.4, 20.0)
    rng = np.random.default_rng(5)
    lists = []
    for df in (30, 4000, 50_000, 60_000, 70_000):  # one rare term, then ever commoner
        ordinals = np.sort(rng.choice(size, df, replace=False)).astype("<i4")
        lists.append(Postings(ordinals, rng.integers(1, 4, df).astype("<u2"),
                              rng.choice([10, 20, 40], df).astype("<u2")))
    weights = [3.0, 2.5, 2.0, 2.0, 2.0]  # the common terms together outscore the rare one
    dead = rng.choice(size, 50, replace=False).astype(np.int64)
    order, scores = _brute_force(lists, weights, size, dead, impacts)
    for gather in (1, bm25_topk.GATHER, 10**9):  # never, as shipped, always looked up
        for width in (1, 10, 40, 200):
            terms = [bm25_topk.Term(f"t{i}", w, [p]) for i, (p, w) in enumerate(zip(lists, weights))]
            ranking = bm25_topk.Ranking(terms, size, dead, impacts, pruning="none")
            theta = float(np.partition(scores, size - width)[size - width])
            assert ranking._holding(theta) > len(lists[0])  # the rare term's list alone would not do
            saved, bm25_topk.GATHER = bm25_topk.GATHER, gather
            try:
                assert ranking.top(width).tolist() == order[:width], (gather, width)
            finally:
                bm25_topk.GATHER = saved


def test_a_terms_lists_in_several_segments_rank_as_one_merged_list():
    """by_term merges a term's lists of several segments into one sorted list (cached
    under those segments); ranking over it gives the same fragments and score bits."""
    from pgbraid.strategies import bm25_postings, bm25_topk
    from pgbraid.strategies.bm25_postings import Postings, PostingsCache

    lists, weights, dead = _synthetic(11, 30_000, terms=8)
    parts = {}
    for i, postings in enumerate(lists):  # each list split into three segments, interleaved
        for segment in range(3):
            held = postings.ordinals % 3 == segment
            parts[(segment, f"t{i}")] = Postings(postings.ordinals[held], postings.tfs[held],
                                                 postings.lengths[held])
    cache = PostingsCache(1 << 30)
    created = datetime.now(timezone.utc)
    names = [f"t{i}" for i in range(len(lists))]
    merged = bm25_postings.by_term(1, created, parts, names, cache)
    assert all(len(merged[n]) == 1 for n in names)
    for n, postings in zip(names, lists):
        np.testing.assert_array_equal(merged[n][0].ordinals, postings.ordinals)
        np.testing.assert_array_equal(merged[n][0].tfs, postings.tfs)
    again = bm25_postings.by_term(1, created, parts, names, cache)
    assert all(again[n][0] is merged[n][0] for n in names)  # from the cache
    impacts = (0.9, 0.4, 15.0)
    ranked = []
    for source in (merged, {n: [parts[(s, n)] for s in range(3)] for n in names}):
        for pruning in ("none", "maxscore", "blockmax"):
            terms = [bm25_topk.Term(n, w, source[n]) for n, w in zip(names, weights)]
            ranking = bm25_topk.Ranking(terms, 30_000, dead.astype(np.int64), impacts,
                                        pruning=pruning)
            top = ranking.top(10)
            ranked.append((top.tolist(), ranking.scores[top].tolist(),
                           ranking.matched(top.tolist())))
    assert all(r == ranked[0] for r in ranked)


def test_the_dense_scores_are_reused_zeroed_from_one_ranking_to_the_next():
    """A ranking gives its dense array back (bm25_scratch) and the next ranking of the
    same size scores into that memory: with few postings (zeroed where written), with
    many (zeroed in full), after dead fragments (-inf) and after a sparse ranking made
    dense; each ranks and scores exactly as the brute force, nothing of the query
    before it left in the array."""
    from pgbraid.strategies import bm25_scratch, bm25_topk

    size, impacts = 40_000, (0.9, 0.4, 20.0)
    queries = [_synthetic(seed, size, terms=terms) for seed, terms in
               ((21, 3), (22, 40), (23, 12), (24, 6))]
    held = []
    saved, bm25_topk.SCRATCH_FROM = bm25_topk.SCRATCH_FROM, 10**9  # however few postings
    kept = list(bm25_scratch._free)
    bm25_scratch._free[:] = [np.zeros(size + 7), np.zeros(size // 2)]  # other sizes kept too
    try:
        _rank_in_turn(queries, size, impacts, held)
    finally:
        bm25_topk.SCRATCH_FROM = saved
        bm25_scratch._free[:] = kept


@pytest.mark.parametrize("shift", [6, 10, 13])
def test_scores_added_block_by_block_have_the_bits_of_one_bincount(shift, monkeypatch):
    """bm25_topk._blocked (many postings, into the kept array) sums each fragment's
    weights in the same order as one np.bincount over every posting: the same bits,
    with blocks of ordinals no posting falls in left alone (and said so)."""
    from pgbraid.strategies import bm25_topk

    monkeypatch.setattr(bm25_topk, "BLOCK_SHIFT", shift)
    size, impacts = 30_000, (0.9, 0.4, 20.0)
    lists, weights, _ = _synthetic(31 + shift, size, terms=9)
    Postings = type(lists[0])
    gap = [(p.ordinals < 1024) | (p.ordinals >= 4096) for p in lists]  # no posting there
    lists = [Postings(p.ordinals[g], p.tfs[g], p.lengths[g]) for p, g in zip(lists, gap)]
    lists.append(Postings(np.array([5, 29_999], dtype="<i4"),  # both ends
                                np.ones(2, dtype="<u2"), np.full(2, 10, dtype="<u2")))
    weights.append(1.5)
    flat = np.concatenate([(np.float32(w) * p.impacts(*impacts)).astype(np.float64)
                           for p, w in zip(lists, weights)])
    everything = np.concatenate([p.ordinals for p in lists]).astype(np.intp)
    expected = np.bincount(everything, weights=flat, minlength=size)
    scores = np.zeros(size)
    written = bm25_topk._blocked(scores, [p.ordinals for p in lists], flat)
    assert scores.tobytes() == expected.tobytes()
    covered = np.zeros(size, dtype=bool)
    for block in written:
        covered[block] = True
    assert covered[everything].all()
    if shift <= 10:
        assert not covered[2048:3072].any()  # blocks without a posting are left alone


def test_the_dense_scores_are_reused_zeroed_block_by_block(monkeypatch):
    """As above, with the kept array written in blocks of 2 ** 9 ordinals."""
    from pgbraid.strategies import bm25_scratch, bm25_topk

    size, impacts = 40_000, (0.9, 0.4, 20.0)
    queries = [_synthetic(seed, size, terms=terms) for seed, terms in ((41, 3), (42, 30))]
    monkeypatch.setattr(bm25_topk, "SCRATCH_FROM", 10**9)
    monkeypatch.setattr(bm25_topk, "BLOCK_SHIFT", 9)
    monkeypatch.setattr(bm25_scratch, "_free", [])
    _rank_in_turn(queries, size, impacts, [])


def _rank_in_turn(queries, size, impacts, held):
    from pgbraid.strategies import bm25_topk

    for i, (lists, weights, dead) in enumerate(queries * 2):
        dead = dead.astype(np.int64) if i % 2 else np.zeros(0, dtype=np.int64)
        order, scores = _brute_force(lists, weights, size, dead, impacts)
        scores[dead] = -np.inf
        pruning = "maxscore" if i == 5 else "none"
        terms = [bm25_topk.Term(f"t{j}", w, [p]) for j, (p, w) in enumerate(zip(lists, weights))]
        ranking = bm25_topk.Ranking(terms, size, dead, impacts, pruning=pruning)
        assert ranking.top(10).tolist() == order[:10]
        dense = ranking.scores if pruning == "maxscore" else ranking.exhaustive()
        live = scores > -np.inf
        assert (dense[~live] == -np.inf).all()
        if pruning == "maxscore":  # its candidates only: the rest stays 0.0
            live &= dense != 0
            assert live.sum() >= 10
        np.testing.assert_allclose(dense[live], scores[live], rtol=1e-12, atol=0)
        if held:
            assert np.shares_memory(dense, held[-1])  # the array given back before
        held.append(dense)
        ranking.release()
        assert (held[-1] == 0).all()  # given back zeroed


def test_the_kept_arrays_stay_within_their_count_and_bytes():
    """bm25_scratch keeps at most KEEP arrays and KEEP_BYTES, the oldest dropped first,
    and gives an array only to a size it fits (not too large either)."""
    from pgbraid.strategies import bm25_scratch

    kept = list(bm25_scratch._free)
    saved = bm25_scratch.KEEP_BYTES
    bm25_scratch._free[:], bm25_scratch.KEEP_BYTES = [], 20_000  # 2,500 floats
    try:
        arrays = [bm25_scratch.take(1000) for _ in range(3)] + [bm25_scratch.take(2000)]
        for array in arrays:
            array[5] = 1.0
            bm25_scratch.give_back(array)
        assert [len(a) for a in bm25_scratch._free] == [2000]  # 1000 + 2000 floats: too many
        assert len(bm25_scratch.take(1000)) == 1000 and len(bm25_scratch._free) == 1  # too large
        again = bm25_scratch.take(1900)
        assert np.shares_memory(again, arrays[3]) and not again.any() and not bm25_scratch._free
    finally:
        bm25_scratch._free[:], bm25_scratch.KEEP_BYTES = kept, saved
