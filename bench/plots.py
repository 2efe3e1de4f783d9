"""Pictures beside the benchmark tables: result files in, PNG plots out.

A bench keeps what its tables show in ``bench/results/<suite>.json`` (``save``: one
entry per key, each with the date it was measured, so a ``--quick`` run replaces
only what it measured) and draws its plots from that file with the helpers below,
into ``docs/plots/<name>.png`` (linked from docs/benchmarks.md). ``python -m bench
plots`` redraws every plot from the files, without running a bench: each bench
module that defines ``plot(results) -> list[Path]`` is called with its suite's
results (a new module, such as bench/ingest.py, needs nothing more than that).

    plots.save("ingest", "throughput", {"pgbraid": 95.0, "copy": 410.0}, unit="docs/s")
    plots.bars("ingest-throughput", "Ingestion", "documents/s", {"pgbraid": 95.0, ...})

Figures are drawn with matplotlib's Agg backend (no display), at a size that
reads on a laptop screen; colours follow the system's name, so one system has
one colour in every plot.
"""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("PGBRAID_BENCH_RESULTS") or ROOT / "bench" / "results")
PLOTS = Path(os.environ.get("PGBRAID_BENCH_PLOTS") or ROOT / "docs" / "plots")
NOTE = "2-core machine shared with other work: read ratios, not absolute ms"
PALETTE = ["#2457c5", "#d1495b", "#2f8f5b", "#edae49", "#7b4fa0", "#00798c", "#8d6a4f",
           "#e07a5f", "#5c677d", "#a3b18a"]
_colours: dict[str, str] = {}


# -- result files ------------------------------------------------------------------

def save(suite: str, key: str, data: Any, **meta: Any) -> Path:
    """Store one result (a table's rows as data) under ``key`` of the suite's file."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{suite}.json"
    results = load(suite) or {}
    results[key] = {"measured": meta.pop("measured", date.today().isoformat()), **meta,
                    "data": data}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load(suite: str) -> dict[str, Any] | None:
    path = RESULTS / f"{suite}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def data(results: Mapping[str, Any] | None, key: str) -> Any:
    """The data stored under ``key``, or None."""
    entry = (results or {}).get(key)
    return entry["data"] if entry else None


# -- drawing -------------------------------------------------------------------------

def colour(name: str) -> str:
    if name not in _colours:
        _colours[name] = PALETTE[len(_colours) % len(PALETTE)]
    return _colours[name]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _finish(fig, name: str) -> Path:
    PLOTS.mkdir(parents=True, exist_ok=True)
    path = PLOTS / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def lines(name: str, title: str, panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
          xlabel: str, ylabel: str, *, log_x: bool = True, log_y: bool = True,
          note: str | None = NOTE) -> Path:
    """One panel per key of ``panels``, one line per series: (x, y) points."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False,
                             sharey=True)
    for ax, (panel, series) in zip(axes[0], panels.items()):
        for label, points in series.items():
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=label, color=colour(label))
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.set_xscale("log" if log_x else "linear")
        ax.set_yscale("log" if log_y else "linear")
    axes[0][0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=3,
               frameon=False, fontsize=9, title=note, title_fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return _finish(fig, name)


def grouped(name: str, title: str, groups: Sequence[str],
            series: Mapping[str, Sequence[float | None]], ylabel: str, *,
            note: str | None = None, digits: int = 3) -> Path:
    """Bars per group (x), one bar per series in each; None leaves a gap."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 0.45 * len(groups) * len(series)), 4.4))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        shown = [(x, v) for x, v in zip(xs, values) if v is not None]
        bars_ = ax.bar([x for x, _ in shown], [v for _, v in shown], width * 0.92, label=label,
                       color=colour(label))
        ax.bar_label(bars_, labels=[f"{v:.{digits}f}" for _, v in shown], fontsize=7,
                     rotation=90, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.15)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9,
              title=note, title_fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return _finish(fig, name)


def bars(name: str, title: str, xlabel: str, values: Mapping[str, float], *,
         note: str | None = None, digits: int = 1, log: bool = False) -> Path:
    """Horizontal bars, one per entry, labelled with its value (throughput, accuracy)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(values) + 1.4))
    labels = list(values)[::-1]
    drawn = ax.barh(labels, [values[k] for k in labels], color=[colour(k) for k in labels])
    ax.bar_label(drawn, labels=[f"{values[k]:,.{digits}f}" for k in labels], fontsize=8,
                 padding=3)
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    ax.margins(x=0.15)
    ax.set_title(title if not note else f"{title}\n{note}")
    fig.tight_layout()
    return _finish(fig, name)
