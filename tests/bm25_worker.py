"""A separate ingesting process for the concurrency tests (run by tests/test_bm25_concurrency.py).

    python tests/bm25_worker.py slice DATA_DIR PIPELINE CORPUS SIZE INDEX COUNT PER_CALL GO_FILE
        ingest documents INDEX, INDEX + COUNT, ... of the SciFact corpus's first SIZE,
        PER_CALL per call
    python tests/bm25_worker.py rewrite DATA_DIR PIPELINE DOCUMENTS ROUNDS PER_CALL GO_FILE
        re-ingest documents d0..d{DOCUMENTS-1} ROUNDS times, each round a new version

Both wait for GO_FILE to exist, so that every process starts at once.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import pgbraid


def scifact(corpus: str) -> list[dict]:
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        return [{"id": d["_id"], "title": d["title"], "text": d["text"]}
                for d in map(json.loads, handle)]


def version(i: int, n: int) -> dict:
    """Every version of every document holds 'alpha'; each version its own words."""
    return {"id": f"d{i}", "text": f"alpha record {i} revision{n} " + "filler " * (i % 7 + n % 3)}


def wait(go: str) -> None:
    while not Path(go).exists():
        time.sleep(0.01)


def main(mode: str, data_dir: str, pipeline: str, *args: str) -> None:
    with pgbraid.connect(data_dir=data_dir) as client:
        client.pipelines()  # connected before the start
        if mode == "slice":
            corpus, size, index, count, per_call, go = args
            docs = scifact(corpus)[:int(size)][int(index)::int(count)]
            wait(go)
            for at in range(0, len(docs), int(per_call)):
                report = client.ingest(pipeline, docs[at:at + int(per_call)])
                assert not report.failed, report.failed
        else:
            documents, rounds, per_call, go = (int(a) if a.isdigit() else a for a in args)
            wait(go)
            for n in range(1, rounds + 1):
                docs = [version(i, n) for i in range(documents)]
                for at in range(0, documents, per_call):
                    report = client.ingest(pipeline, docs[at:at + per_call])
                    assert not report.failed, report.failed


if __name__ == "__main__":
    main(*sys.argv[1:])
