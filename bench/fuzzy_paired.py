"""fuzzy's word method at 100k fragments, this checkout's against another commit's,
interleaved in one process on one server; then the company-names table (bench/fuzzy.py,
with a raw pg_trgm peer) on the bench server. One command for a quiet re-measurement::

    PGBRAID_MILLION_DIR=/tmp/fuzzy-1m PGBRAID_BENCH_DIR=/tmp/fuzzy2-bench \
        python -m bench.fuzzy_paired [--peer REF] [--queries N] [--no-names]

(the names go on their own server: beside 100k long fragments in one table, the
text method's trigram scans read the long texts' posting lists too, 1.1 s for one name.)

The peer is REF's ``strategies/fuzzy_words.py`` (``git show``; with its ``fuzzy_subsets.py``
where REF has one), loaded beside this
checkout's and put in the fuzzy strategy's place for its turns (this checkout's
strategy, scope and trace around it; only the word search differs). Each query runs
under four systems in a rotating order: words and auto (which takes words on this
corpus), each by this checkout and by the peer. Hits are compared (fragment ids and
scores to 5 decimals): the word method is exact, so both must agree.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

from . import fuzzy, fuzzy_corpus, million
from .common import ROOT, console, percentiles, table, timed

PEER = "8ae59d0"  # main before issue 16.4
_PATH = "src/pgbraid/strategies/fuzzy_words.py"
_SUBSETS = "src/pgbraid/strategies/fuzzy_subsets.py"


def load_peer(ref: str):
    """REF's fuzzy_words module, imported as pgbraid.strategies._peer_fuzzy_words, with
    REF's subset search where REF keeps it apart (fuzzy_subsets.py)."""
    from pgbraid.strategies import fuzzy_words

    subsets = _show(ref, _SUBSETS)
    if subsets is not None:
        _load("pgbraid.strategies._peer_fuzzy_subsets", subsets, f"{ref}:{_SUBSETS}")
    text = _show(ref, _PATH).replace("from .fuzzy_subsets import",
                                     "from ._peer_fuzzy_subsets import")
    module = _load("pgbraid.strategies._peer_fuzzy_words", text, f"{ref}:{_PATH}")
    # Before 052 the strategy set pg_trgm's thresholds ahead of the word search, in a round
    # trip of its own; the search now sets them in its first one. A peer gets them set
    # the old way (a peer newer than that pays the round trip twice).
    def search(conn, query, scope, k, threshold):
        fuzzy_words.set_thresholds(conn, threshold)
        return module.search(conn, query, scope, k, threshold)

    return SimpleNamespace(search=search, set_thresholds=fuzzy_words.set_thresholds)


def _show(ref: str, path: str) -> str | None:
    shown = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True,
                           text=True)
    return None if shown.returncode else shown.stdout


def _load(name: str, text: str, origin: str):
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pgbraid.strategies"
    sys.modules[name] = module
    exec(compile(text, origin, "exec"), module.__dict__)
    return module


def corpus(peer_ref: str, count: int) -> None:
    from pgbraid.strategies import fuzzy as strategy, fuzzy_words

    peer = load_peer(peer_ref)
    systems = [("words", "words", fuzzy_words), ("words", "words @" + peer_ref, peer),
               ("auto", "auto", fuzzy_words), ("auto", "auto @" + peer_ref, peer)]
    api = {label: [] for _, label, _ in systems}
    trace = {label: [] for _, label, _ in systems}
    found = {label: [] for _, label, _ in systems}
    differ = []
    with million.connect() as client:
        if million.PIPELINE not in {p.name for p in client.pipelines()}:
            console.print(f"[yellow]no {million.PIPELINE} corpus in {million.DIR}[/]")
            return
        for i, (query, doc) in enumerate(fuzzy_corpus.queries(count)):
            hits = {}
            for method, label, module in systems[i % 4:] + systems[:i % 4]:
                strategy.fuzzy_words = module
                holder = {}
                try:
                    api[label].append(timed(lambda: holder.setdefault("r", client.search(
                        million.PIPELINE, query, type="fuzzy", classification=["c1"],
                        params={"k": 10, "method": method}))))
                finally:
                    strategy.fuzzy_words = fuzzy_words
                response = holder["r"]
                trace[label].append(response.trace.ms)
                found[label].append(any(h.document_id.split("~")[0] == f"scifact/{doc}"
                                        for h in response.hits))
                hits[label] = [(h.fragment_id, round(h.score, 5)) for h in response.hits]
            if len({tuple(h) for h in hits.values()}) > 1:
                differ.append(query)
    rows = []
    for _, label, _ in systems:
        (p50, p95), (t50, t95) = percentiles(api[label]), percentiles(trace[label])
        rows.append([label, len(api[label]), f"{p50:.1f}", f"{p95:.1f}", f"{t50:.1f}",
                     f"{t95:.1f}", f"{sum(found[label]) / len(found[label]):.2f}"])
    table(f"fuzzy over the 100k corpus (class c1), {count} 3-word queries with a typo, "
          f"this checkout and {peer_ref} interleaved",
          ["system", "queries", "API p50 ms", "API p95 ms", "trace p50 ms", "trace p95 ms",
           "source document in the top 10"], rows)
    console.print(f"queries whose hits differ between the four: {len(differ)}"
                  + (f" ({', '.join(differ[:5])})" if differ else ""))


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.fuzzy_paired")
    parser.add_argument("--peer", default=PEER, help="the commit to compare with")
    parser.add_argument("--queries", type=int, default=fuzzy_corpus.QUERIES)
    parser.add_argument("--no-names", action="store_true", help="skip the company names")
    args = parser.parse_args()
    corpus(args.peer, args.queries)
    if not args.no_names:
        fuzzy.names()  # on the bench server: beside 100k long fragments its GIN scans are not a name table's


if __name__ == "__main__":
    main()
