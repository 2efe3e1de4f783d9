"""The LangChain and LlamaIndex retrievers, with the real packages, against the real
engine: in-process (a pgbraid Client) and over HTTP (a real ``pgbraid serve``)."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import MetadataMode, NodeWithScore

from pgbraid.errors import Forbidden, NotFound, Unauthorized
from pgbraid.integrations import langchain, llama_index

from .serving import served  # noqa: F401  (fixture)
from .test_fulltext import PLAYER_PAGE, godot  # noqa: F401  (module fixture)

QUERY = "AnimatedSprite2D play animation"


@pytest.fixture()
def key(client, godot):  # noqa: F811
    created = client.create_key(pipeline=godot, permissions="read,execute")
    yield created["key"]
    client.revoke_key(created["id"])


@pytest.fixture(params=["in-process", "http"])
def where(request, client, served, key):  # noqa: F811
    """How a retriever reaches pgbraid: a Client, or the URL of a real serve and a key."""
    if request.param == "in-process":
        return {"client": client}
    return {"url": served.url, "key": key}


def test_langchain_returns_documents_with_hit_fields_and_trace(where, godot, client):  # noqa: F811
    retriever = langchain.PgbraidRetriever(pipeline=godot, type="fulltext", k=5, **where)
    documents = retriever.invoke(QUERY)
    assert all(isinstance(d, Document) for d in documents) and len(documents) == 5
    assert PLAYER_PAGE in [d.metadata["document_id"] for d in documents[:3]]
    first = documents[0].metadata
    for field in ("document_id", "fragment_id", "version", "title", "score", "rank", "metadata"):
        assert field in first
    assert "page_content" not in first
    assert first["trace"]["retrievers"][0]["retriever"] == "fulltext"
    assert documents[0].id == f"{first['document_id']}#{first['fragment_id']}"
    direct = client.search(godot, QUERY, type="fulltext", params={"k": 5})
    assert [(d.metadata["fragment_id"], d.metadata["score"]) for d in documents] == \
        [(h.fragment_id, h.score) for h in direct.hits]
    assert documents[0].page_content == direct.hits[0].page_content


def test_llama_index_returns_nodes_with_scores(where, godot):  # noqa: F811
    retriever = llama_index.PgbraidRetriever(godot, type="auto", k=4, **where)
    nodes = retriever.retrieve(QUERY)
    assert all(isinstance(n, NodeWithScore) for n in nodes) and len(nodes) == 4
    assert PLAYER_PAGE in [n.node.metadata["document_id"] for n in nodes[:3]]
    assert [n.score for n in nodes] == sorted((n.score for n in nodes), reverse=True)
    trace = nodes[0].node.metadata["trace"]
    assert {e["retriever"]: e["status"] for e in trace["retrievers"]}["bm25"] == "ran"
    assert trace["fusion"]["method"] == "rrf"
    shown = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "document_id:" in shown and "trace" not in shown


def test_errors_are_pgbraid_errors_both_ways(where, godot):  # noqa: F811
    retriever = langchain.PgbraidRetriever(pipeline="no-such-pipeline", **where)
    with pytest.raises((NotFound, Forbidden)):  # a key for one pipeline may not ask of others
        retriever.invoke(QUERY)
    bad = llama_index.PgbraidRetriever(godot, type="warp", **where)
    with pytest.raises(Exception, match="unknown search type"):
        bad.retrieve(QUERY)


def test_a_bad_key_and_a_missing_backend(served, godot):  # noqa: F811
    with pytest.raises(Unauthorized, match="invalid API key"):
        langchain.PgbraidRetriever(pipeline=godot, url=served.url,
                                   key="pgb_" + "A" * 43).invoke(QUERY)
    with pytest.raises(ValueError, match="either client"):
        llama_index.PgbraidRetriever(godot)
