"""A LangChain retriever over pgbraid (``pip install 'pgbraid[langchain]'``).

    retriever = PgbraidRetriever(client=pgbraid.connect(), pipeline="docs")       # in-process
    retriever = PgbraidRetriever(url="http://127.0.0.1:8400", key=KEY, pipeline="docs")
    documents = retriever.invoke("how do I rotate a leaked key?")

Each hit is a ``Document``: its text as ``page_content``, every other hit field
(document_id, fragment_id, version, title, score, rank, metadata, found_by, ...)
and the search's trace in ``metadata``; ``id`` is ``document_id#fragment_id``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr, SecretStr, model_validator

from .remote import Searcher, hit_metadata, request, searcher


class PgbraidRetriever(BaseRetriever):
    """Search one pipeline: ``type`` (auto by default) and the request's other fields."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: str
    client: Any = None
    """A pgbraid.Client: search in this process (as its principal)."""
    url: str | None = None
    """Or ``pgbraid serve``'s URL, with ``key``."""
    key: SecretStr | None = None
    type: str = "auto"
    k: int = 5
    params: dict[str, Any] | None = None
    filters: dict[str, Any] | None = None
    classification: list[str] | str | None = None
    distance_strategy: str | None = None
    _searcher: Searcher = PrivateAttr()

    @model_validator(mode="after")
    def _connect(self) -> "PgbraidRetriever":
        key = self.key.get_secret_value() if self.key is not None else None
        self._searcher = searcher(self.client, self.url, key)
        return self

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        response = self._searcher.search(self.pipeline, query, **request(
            self.type, self.k, self.params, self.filters, self.classification,
            self.distance_strategy))
        return [Document(page_content=hit.page_content, metadata=hit_metadata(hit, response),
                         id=f"{hit.document_id}#{hit.fragment_id}") for hit in response.hits]
