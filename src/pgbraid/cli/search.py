"""``pgbraid search`` (one query, or a batch with ``--queries``) and ``pgbraid eval``.

The options become the body HTTP takes, and ``client.search`` checks it as it checks
HTTP's: the CLI folds ``--k`` into ``params`` and decides nothing else about them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..client import Client, connect
from ..errors import (BackendTimeout, BackendUnavailable, InvalidRequest, PgbraidError, describe,
                      error_body)
from ..output import show_mapping, show_search
from .base import JsonOpt, app, emit, handled, parse_json_option


def _params(text: Optional[str], k: Optional[int], option: str) -> dict[str, Any]:
    """--params with the number of hits: params.k or the option, never two different ones.
    A params.k that is not an integer is left for the engine to refuse, as HTTP does."""
    params = parse_json_option(text, "params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest("--params must be a JSON object", field="params")
    if k is None:
        return params
    if "k" not in params:
        return {**params, "k": k}
    given = params["k"]
    if type(given) is int and given != k:
        raise InvalidRequest(f"{option} {k} and params.k {given} disagree: give the number of "
                             "hits once", field="k")
    return params


def _request(type_: str, k: Optional[int], classification: Optional[str],
             filter_: Optional[str], params: Optional[str], group_by: str,
             distance: str = "cosine", as_of: Optional[str] = None,
             cursor: Optional[str] = None, *, k_option: str = "--k") -> dict[str, Any]:
    """The search body of the options, without its query."""
    body: dict[str, Any] = {"type": type_, "group_by": group_by, "distance_strategy": distance,
                            "params": _params(params, k, k_option)}
    if filter_ is not None:
        body["filters"] = parse_json_option(filter_, "filter")
    optional = {"classification": classification, "as_of": as_of, "cursor": cursor}
    body.update({name: value for name, value in optional.items() if value is not None})
    return body


@app.command()
def search(pipeline: str, query: Optional[str] = typer.Argument(None),
           type_: str = typer.Option("auto", "--type", "-t", help="Search type (default auto: the planner picks the mix)."),
           k: Optional[int] = typer.Option(None, "--k", "-k", help="Number of hits (default 5; "
                                           "or params.k)."),
           classification: Optional[str] = typer.Option(None, help="Classifications held, comma-separated."),
           filter_: Optional[str] = typer.Option(None, "--filter", help="Metadata filter as JSON."),
           params: Optional[str] = typer.Option(None, help="Strategy params as JSON."),
           group_by: str = typer.Option("fragment", help="fragment | document"),
           distance: str = typer.Option("cosine", "--distance-strategy",
                                        help="cosine | euclidean-distance | dot-product"),
           queries: Optional[Path] = typer.Option(None, help="JSONL of {id, query}: prints NDJSON."),
           as_of: Optional[str] = typer.Option(None, help="Search the versions valid at this "
                                               "ISO-8601 time (no offset: UTC)."),
           cursor: Optional[str] = typer.Option(None, help="The previous page's next_cursor "
                                                "(page with --params '{\"offset\": 0}')."),
           as_json: bool = JsonOpt) -> None:
    """Search a pipeline (one query, or a batch with --queries).

    Types: fulltext, bm25 (search), fuzzy, similarity, mmr, graph, hybrid, auto, relational.
    """
    with handled(as_json or queries is not None):
        if queries is not None and query is not None:
            raise InvalidRequest("give a QUERY or --queries FILE, not both (each line of FILE "
                                 "holds its query)", field="queries")
        if queries is not None and cursor is not None:
            raise InvalidRequest("--cursor pages one query's hits: it does not go with "
                                 "--queries", field="cursor")
        request = _request(type_, k, classification, filter_, params, group_by, distance,
                           as_of, cursor)
        with connect() as client:
            if queries is not None:
                failed = _batch(client, pipeline, queries, request)
                if failed:
                    raise typer.Exit(failed)
                return
            if query is None:
                raise InvalidRequest("give a QUERY or --queries FILE", field="query")
            response = client.search(pipeline, query, **request)
        emit(response.model_dump(mode="json")) if as_json else show_search(response)


def _batch(client: Client, pipeline: str, path: Path, request: dict[str, Any]) -> int:
    """One NDJSON line per query line: its response with its id, or its error with its id
    and line number; a bad line does not end the batch. The exit code: 0, or the first
    failed line's (errors.ERRORS: 2 for bad input)."""
    from ..evaluation import QUERY_FIELDS, query_lines

    failed = 0
    for number, qid, text, record, problem in query_lines(path):
        try:
            if problem is not None:
                raise problem
            if unknown := sorted(set(record) - QUERY_FIELDS):
                raise InvalidRequest(
                    f"unknown field {unknown[0]!r}: a --queries line holds id and query (the "
                    f"type, k and params of every line come from the options)", field=unknown[0])
            response = client.search(pipeline, text, **request)
            emit({**response.model_dump(mode="json"), "id": qid})
        except (BackendUnavailable, BackendTimeout):
            raise
        except PgbraidError as exc:
            failed = failed or describe(exc).exit
            emit({"id": qid, "line": number, **error_body(exc, "cli")})
    return failed


@app.command("eval")
def evaluate(pipeline: str, queries: Path = typer.Option(...), qrels: Path = typer.Option(...),
             type_: str = typer.Option("auto", "--type", "-t",
                                       help="The search type (auto, as for search)."),
             depth: int = typer.Option(100, help="Documents retrieved per query."),
             params: Optional[str] = typer.Option(None, help="Strategy params as JSON."),
             as_json: bool = JsonOpt) -> None:
    """nDCG@10, R@100 and RR@10 of a search type against TREC/BEIR qrels (document level)."""
    from ..evaluation import evaluate as score, read_qrels, read_queries

    with handled(as_json):
        request = _request(type_, depth, None, None, params, "document", k_option="--depth")
        judgments = read_qrels(qrels)
        with connect() as client:
            run: dict[str, dict[str, float]] = {}
            for qid, text, _ in read_queries(queries):
                if qid in judgments:
                    hits = client.search(pipeline, text, **request).hits
                    run[qid] = {hit.document_id: float(depth - hit.rank + 1) for hit in hits}
        result = {"pipeline": pipeline, "type": type_, "queries": len(run), **score(judgments, run)}
        if as_json:
            emit(result)
        else:  # 0.928, not 0.9279999999999999
            show_mapping("evaluation", {key: round(value, 4) if isinstance(value, float) else value
                                        for key, value in result.items()})
