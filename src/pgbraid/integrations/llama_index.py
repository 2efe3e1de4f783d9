"""A LlamaIndex retriever over pgbraid (``pip install 'pgbraid[llama-index]'``).

    retriever = PgbraidRetriever("docs", client=pgbraid.connect())                  # in-process
    retriever = PgbraidRetriever("docs", url="http://127.0.0.1:8400", key=KEY)
    nodes = retriever.retrieve("how do I rotate a leaked key?")

Each hit is a ``NodeWithScore``: a ``TextNode`` (id ``document_id#fragment_id``,
the hit's text, every other hit field and the trace in ``metadata``) with the
hit's score. Only ``document_id`` and ``title`` of the metadata reach the LLM's
or the embedder's view of a node.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .remote import Searcher, hit_metadata, request, searcher

SHOWN = ("document_id", "title")


class PgbraidRetriever(BaseRetriever):
    def __init__(self, pipeline: str, *, client: Any = None, url: str | None = None,
                 key: str | None = None, type: str = "auto", k: int = 5,
                 params: dict[str, Any] | None = None, filters: dict[str, Any] | None = None,
                 classification: list[str] | str | None = None,
                 distance_strategy: str | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        self.pipeline = pipeline
        self._searcher: Searcher = searcher(client, url, key)
        self._request = request(type, k, params, filters, classification, distance_strategy)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        response = self._searcher.search(self.pipeline, query_bundle.query_str, **self._request)
        nodes = []
        for hit in response.hits:
            metadata = hit_metadata(hit, response)
            hidden = [name for name in metadata if name not in SHOWN]
            node = TextNode(id_=f"{hit.document_id}#{hit.fragment_id}", text=hit.page_content,
                            metadata=metadata, excluded_llm_metadata_keys=hidden,
                            excluded_embed_metadata_keys=hidden)
            nodes.append(NodeWithScore(node=node, score=hit.score))
        return nodes
