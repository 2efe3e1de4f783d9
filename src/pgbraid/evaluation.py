"""Relevance evaluation with ir-measures (trec_eval underneath): nDCG@10, R@100, RR@10."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from .errors import InvalidRequest

MEASURES = ("nDCG@10", "R@100", "RR@10")


QUERY_FIELDS = frozenset({"id", "_id", "query", "text", "metadata"})
"""What a queries line may hold: read_queries reads the first four; BEIR's have metadata."""


def read_queries(path: Path, *, id_field: str | None = None,
                 text_field: str | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(id, query, record) from JSONL; ids from 'id' or '_id', text from 'query' or 'text'."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidRequest(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(record, dict):
                raise InvalidRequest(f"{path}:{number}: a line must be a JSON object")
            qid = record.get(id_field) if id_field else record.get("id", record.get("_id"))
            text = record.get(text_field) if text_field else record.get("query", record.get("text"))
            if qid is None or not isinstance(text, str):
                raise InvalidRequest(f"{path}:{number}: needs an id and a query text")
            yield str(qid), text, record


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TREC qrels (qid 0 docid rel) or BEIR tsv with a header (query-id corpus-id score)."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read qrels {path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t") if "\t" in line else line.split()
        if not parts or (number == 1 and not parts[-1].lstrip("-").isdigit()):
            continue  # blank line or a header
        if len(parts) == 4:
            qid, _, docid, rel = parts
        elif len(parts) == 3:
            qid, docid, rel = parts
        else:
            raise InvalidRequest(f"{path}:{number}: expected 3 or 4 columns")
        try:
            qrels.setdefault(qid.strip(), {})[docid.strip()] = int(float(rel))
        except ValueError:
            raise InvalidRequest(f"{path}:{number}: relevance {rel!r} is not a number") from None
    if not qrels:
        raise InvalidRequest(f"{path} holds no judgments")
    return qrels


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    import ir_measures

    measures = [ir_measures.parse_measure(m) for m in MEASURES]
    # A query with no hits still counts (as zero) in the mean.
    judged_run = {qid: run.get(qid) or {"__none__": 0.0} for qid in qrels}
    result = ir_measures.calc_aggregate(measures, qrels, judged_run)
    return {str(m): float(result[m]) for m in measures}

