"""pgbraid over HTTP for the framework retrievers: ``pgbraid serve``'s URL and an API key.

The one HTTP client the LangChain and LlamaIndex retrievers share. ``search``
takes what ``Client.search`` takes and answers the same SearchResponse; an
error answer is raised as the pgbraid error its code stands for
(errors.from_body), a server out of reach as BackendUnavailable.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

import httpx
from pydantic_core import to_jsonable_python

from ..errors import BackendTimeout, BackendUnavailable, from_body
from ..models import SearchResponse


class Searcher(Protocol):
    def search(self, pipeline: str, query: str | None = None, **request: Any) -> SearchResponse:
        ...


class RemoteClient:
    def __init__(self, url: str, key: str | None = None, *, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def search(self, pipeline: str, query: str | None = None, **request: Any) -> SearchResponse:
        body = dict(request)
        if query is not None:
            body["query"] = query
        return SearchResponse.model_validate(
            self._post(f"/pipelines/{quote(pipeline, safe='')}/search", body))

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            answer = self._http.post(path, json=to_jsonable_python(body))
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"pgbraid at {self._http.base_url} did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"cannot reach pgbraid at {self._http.base_url}: "
                                     f"{type(exc).__name__}") from exc
        try:
            data = answer.json()
        except ValueError:
            raise BackendUnavailable(f"pgbraid at {self._http.base_url} answered HTTP "
                                     f"{answer.status_code} without JSON") from None
        if answer.status_code >= 400:
            raise from_body(data)
        return data

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RemoteClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def searcher(client: Searcher | None, url: str | None, key: str | None) -> Searcher:
    """In-process (a pgbraid Client) or over HTTP (a URL and a key): exactly one of them."""
    if (client is None) == (url is None):
        raise ValueError("give either client (a pgbraid.Client, in-process) or url (pgbraid "
                         "serve, with key), not both or neither")
    return client if client is not None else RemoteClient(url, key)


def request(type: str, k: int, params: dict[str, Any] | None, filters: dict[str, Any] | None,
            classification: Any, distance_strategy: str | None) -> dict[str, Any]:
    """A search request's fields from a retriever's settings (k joins params)."""
    body: dict[str, Any] = {"type": type, "params": {**(params or {}), "k": k}}
    if filters is not None:
        body["filters"] = filters
    if classification is not None:
        body["classification"] = classification
    if distance_strategy is not None:
        body["distance_strategy"] = distance_strategy
    return body


def hit_metadata(hit: Any, response: SearchResponse) -> dict[str, Any]:
    """A hit's fields but its text, the search's pipeline, query and type, and its trace."""
    return {**hit.model_dump(mode="json", exclude={"page_content"}),
            "pipeline": response.pipeline, "query": response.query, "type": response.type,
            "trace": response.trace.model_dump(mode="json")}
