"""bench/plots.py: result files kept per key, plots drawn from them as PNG files."""

from __future__ import annotations

import json

import pytest

from bench import plots

pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def folders(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(plots, "PLOTS", tmp_path / "plots")
    return tmp_path


def test_a_result_replaces_only_its_own_key(folders):
    plots.save("suite", "latency/5183", {"a": 1}, fragments=5183, measured="2026-12-01")
    plots.save("suite", "latency/99433", {"a": 2}, fragments=99433)
    plots.save("suite", "latency/5183", {"a": 3}, fragments=5183, measured="2026-12-02")
    results = plots.load("suite")
    assert set(results) == {"latency/5183", "latency/99433"}
    assert results["latency/5183"] == {"measured": "2026-12-02", "fragments": 5183,
                                       "data": {"a": 3}}
    assert plots.data(results, "latency/99433") == {"a": 2}
    assert plots.data(results, "missing") is None
    assert json.loads((folders / "results" / "suite.json").read_text())  # plain JSON
    assert plots.load("other") is None


def test_each_kind_of_plot_is_a_png(folders):
    drawn = [
        plots.lines("l", "latency", {"queries": {"x": [(5183, 6.1), (99433, 6.7)],
                                                 "y": [(5183, 0.2), (99433, 0.8)]}},
                    "fragments", "ms"),
        plots.grouped("g", "nDCG", ["SciFact", "CISI"], {"bm25": [0.686, 0.367],
                                                        "auto": [0.712, None]}, "nDCG@10"),
        plots.bars("b", "throughput", "fragments/s", {"bare": 9.5, "ingest": 8.0}),
    ]
    for path in drawn:
        assert path.parent == folders / "plots"
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


def test_the_committed_results_draw_the_documented_plots(folders, monkeypatch):
    """The plots docs/benchmarks.md links to come from bench/results (no bench run)."""
    from bench import hybrid, lexical, vector

    monkeypatch.setattr(plots, "RESULTS", plots.ROOT / "bench" / "results")  # draw into tmp
    names = {path.name for module in (lexical, hybrid, vector)
             for path in module.plot(plots.load(module.__name__.rsplit(".", 1)[-1]))}
    assert names == {"lexical-latency.png", "lexical-ndcg.png", "ndcg-per-strategy.png",
                     "ingest-throughput.png"}
    text = (plots.ROOT / "docs" / "benchmarks.md").read_text()
    assert all(f"plots/{name}" in text for name in names)
