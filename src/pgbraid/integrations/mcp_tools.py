"""The MCP tools: their input models (the HTTP API's own), what each runs, one error shape.

Each tool's input schema is generated from the model the HTTP API validates
the same request with (api/schemas.py), so a tool takes exactly the fields the
endpoint takes and refuses any other by name; its output schema from the model
the endpoint answers. A tool error is a result with ``isError`` whose content is
the one error body (errors.error_body), the code from the one error table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..api.schemas import (NAME, Body, DocumentOut, GroundBody, GroundOut, Moment, SearchBody)
from ..client import Client
from ..errors import NotFound, error_body
from ..models import PipelineInfo, SearchResponse, invalid, shown


class SearchArguments(SearchBody):
    """``POST /pipelines/{pipeline}/search``'s body, and the pipeline."""

    pipeline: str = Field(pattern=NAME, description="The pipeline to search.")


class DocumentArguments(Body):
    """``GET /pipelines/{pipeline}/documents/{document_id}``'s path and query."""

    pipeline: str = Field(pattern=NAME)
    document_id: str = Field(min_length=1, max_length=1000, description="A hit's document_id.")
    version: int | None = Field(None, ge=1, description="Version N (default: the current one).")
    as_of: Moment | None = Field(None, description="The version valid at this ISO-8601 time.")
    classification: list[str] | str | None = Field(
        None, description="Classifications held (narrows the principal's).")


class NoArguments(Body):
    pass


class PipelineList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pipelines: list[PipelineInfo]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[BaseModel]
    output: type[BaseModel]
    run: Callable[[Client, Any], Any]

    def input_schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()

    def output_schema(self) -> dict[str, Any]:
        return self.output.model_json_schema(mode="serialization")


def _search(client: Client, args: SearchArguments) -> dict[str, Any]:
    body = args.model_dump(exclude_unset=True)
    return client.search(body.pop("pipeline"), **body).model_dump(mode="json")


def _ground(client: Client, args: GroundBody) -> dict[str, Any]:
    return client.ground(args.entity, args.value, scope=args.scope, strategies=args.strategies)


def _document(client: Client, args: DocumentArguments) -> dict[str, Any]:
    return client.document(args.pipeline, args.document_id, version=args.version,
                           as_of=args.as_of, classification=args.classification)


def _pipelines(client: Client, args: NoArguments) -> dict[str, Any]:
    return {"pipelines": [p.model_dump(mode="json") for p in client.pipelines()]}


TOOLS: dict[str, Tool] = {tool.name: tool for tool in (
    Tool("search", "Search a pipeline and get ranked, cited hits with a trace of what ran. "
         "type: auto (default in pgbraid's CLI; the planner picks strategies from the query's "
         "shape), hybrid, fulltext, bm25, fuzzy, similarity, mmr, graph, history, relational. "
         "Each hit's document_id resolves with get_document.",
         SearchArguments, SearchResponse, _search),
    Tool("ground", "Resolve a value (a name someone typed) to one entity of a registered "
         "entity source: status resolved, clarification_needed (with candidates and "
         "evidence.strategy) or not_found (with strategiesTried: what ran and found nothing).",
         GroundBody, GroundOut, _ground),
    Tool("get_document", "Read one stored document: the current version, version N, or the "
         "one valid at as_of; with its text, metadata, source and validity.",
         DocumentArguments, DocumentOut, _document),
    Tool("list_pipelines", "The pipelines this principal may read, with their settings and "
         "the counts of what it may see.", NoArguments, PipelineList, _pipelines),
)}


def call(client: Client, name: str, arguments: dict[str, Any] | None) -> tuple[Any, bool]:
    """Run a tool as ``client``'s principal: (the result, False) or (the error body, True)."""
    try:
        tool = TOOLS.get(name)
        if tool is None:
            raise NotFound(f"unknown tool {shown(name)}; the tools are {', '.join(TOOLS)}",
                           tool=name)
        return tool.run(client, parse(tool, arguments or {})), False
    except Exception as exc:  # noqa: BLE001  (every error leaves in the one shape)
        return error_body(exc), True


def parse(tool: Tool, arguments: dict[str, Any]) -> BaseModel:
    """The arguments as the tool's model; unknown or bad ones are InvalidRequest by name."""
    try:
        return tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        raise invalid(exc.errors()) from None


def as_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
