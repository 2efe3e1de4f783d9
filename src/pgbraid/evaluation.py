"""Relevance evaluation with ir-measures (trec_eval underneath): nDCG@10, R@100, RR@10."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from .errors import InvalidRequest

MEASURES = ("nDCG@10", "R@100", "RR@10")


QUERY_FIELDS = frozenset({"id", "_id", "query", "text", "metadata"})
"""What a queries line may hold: read_queries reads the first four; BEIR's have metadata."""


QueryLine = tuple[int, str | None, str | None, dict[str, Any], InvalidRequest | None]


def query_lines(path: Path, *, id_field: str | None = None,
                text_field: str | None = None) -> Iterator[QueryLine]:
    """(line number, id, query, record, problem) of each JSONL line that is not blank; ids
    from 'id' or '_id', text from 'query' or 'text'. A line that is not a query has its
    problem (and its id when it has one) instead of ending the file: a batch goes on."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, *_query_line(f"{path}:{number}", raw, id_field, text_field)


def _query_line(where: str, raw: bytes, id_field: str | None, text_field: str | None
                ) -> tuple[str | None, str | None, dict[str, Any], InvalidRequest | None]:
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, None, {}, InvalidRequest(f"{where}: not a JSON line ({exc})")
    if not isinstance(record, dict):
        return None, None, {}, InvalidRequest(f"{where}: a line must be a JSON object")
    qid = record.get(id_field) if id_field else record.get("id", record.get("_id"))
    text = record.get(text_field) if text_field else record.get("query", record.get("text"))
    if qid is None or not isinstance(text, str):
        return (None if qid is None else str(qid)), None, record, InvalidRequest(
            f"{where}: needs an id and a query text")
    return str(qid), text, record, None


def read_queries(path: Path, *, id_field: str | None = None,
                 text_field: str | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(id, query, record) of each line (``query_lines``); the first bad line ends it."""
    for _, qid, text, record, problem in query_lines(path, id_field=id_field,
                                                     text_field=text_field):
        if problem is not None:
            raise problem
        yield qid, text, record  # type: ignore[misc]  (both set when there is no problem)


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

