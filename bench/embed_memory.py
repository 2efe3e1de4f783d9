"""Peak memory of embedding long texts: `python -m bench.embed_memory [--texts 96]`.

Embeds the N CISA KEV records with the most word pieces (as `pgbraid ingest` reads
them: id, name, description and notes) with minilm, in a fresh process each run,
with the attention budget (batches of long texts cut to 8) and without it (every
batch 32 texts, as before), interleaved A B B A. Prints each run's peak resident
set (ru_maxrss, model load included) and embedding time, and the medians' ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import subprocess
import sys
import time
from functools import partial

from .common import DATA, table

KEV = DATA / "cisa_kev" / "known_exploited_vulnerabilities.json.gz"


def _texts(count: int, tokenizer) -> list[str]:
    with gzip.open(KEV, "rt", encoding="utf-8") as handle:
        records = json.load(handle)["vulnerabilities"]
    texts = [f"{r['cveID']}: {r['vulnerabilityName']}\n\n{r['shortDescription']}\n{r['notes']}"
             for r in records]
    pieces = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    return [t for _, t in sorted(zip(pieces, texts), key=lambda p: p[0])[-count:]]


def child(mode: str, count: int) -> None:
    from pgbraid.embedders import minilm

    if mode == "unbudgeted":
        minilm.batches = partial(minilm.batches, budget=1 << 62)
    model = minilm.MiniLM()
    texts = _texts(count, model._tokenizer)
    started = time.perf_counter()
    model.embed_documents(texts)
    seconds = time.perf_counter() - started
    print(json.dumps({"mode": mode, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                      // 1024, "s": round(seconds, 2)}))


def run(count: int = 96) -> None:
    runs = []
    for mode in ("budget", "unbudgeted", "unbudgeted", "budget"):
        out = subprocess.run([sys.executable, "-m", "bench.embed_memory", "--child", mode,
                              "--texts", str(count)], check=True, capture_output=True, text=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = [[r["mode"], r["peak_mb"], r["s"]] for r in runs]
    table(f"minilm, the {count} longest KEV records", ["mode", "peak RSS MB", "embed s"], rows)
    med = {m: (statistics.median(r["peak_mb"] for r in runs if r["mode"] == m),
               statistics.median(r["s"] for r in runs if r["mode"] == m))
           for m in ("budget", "unbudgeted")}
    print(f"peak RSS budget/unbudgeted: {med['budget'][0] / med['unbudgeted'][0]:.2f}; "
          f"time budget/unbudgeted: {med['budget'][1] / med['unbudgeted'][1]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="bench.embed_memory")
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--child", choices=["budget", "unbudgeted"])
    args = parser.parse_args()
    child(args.child, args.texts) if args.child else run(args.texts)
