"""Entity sources (your own tables) and grounding over them."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ..client import Client
from .auth import caller
from .errors import documented
from .schemas import (Deleted, GroundBody, GroundOut, SourceCandidates, SourceCreate, SourceOut,
                      SourceSearch)

router = APIRouter(tags=["entities"])


@router.post("/ground", response_model=GroundOut, responses=documented(413))
def ground(body: GroundBody, client: Client = Depends(caller)) -> dict:
    """Resolve a value to one entity: resolved, clarification_needed or not_found."""
    return client.ground(body.entity, body.value, scope=body.scope, strategies=body.strategies)


@router.post("/sources", status_code=201, response_model=SourceOut,
             responses=documented(409, 413))
def add_source(body: SourceCreate, client: Client = Depends(caller)) -> dict:
    """Register a table as an entity source (the tenant's admin)."""
    return client.add_source(body.name, table=body.table, key=body.key, text=body.text,
                             scope=body.scope, language=body.language,
                             create_indexes=body.create_indexes)


@router.get("/sources", response_model=list[SourceOut], responses=documented())
def list_sources(client: Client = Depends(caller)) -> list:
    return client.sources()


@router.get("/sources/{name}", response_model=SourceOut, responses=documented())
def show_source(name: str, client: Client = Depends(caller)) -> dict:
    """An entity source and the indexes it is missing."""
    return client.source(name)


@router.post("/sources/{name}/search", response_model=SourceCandidates,
             responses=documented(413))
def search_source(name: str, body: SourceSearch, client: Client = Depends(caller)) -> dict:
    """exact, fuzzy, fulltext or bm25 over an entity source within scope values."""
    rows = client.search_source(name, body.query, type=body.type, scope=body.scope, k=body.k)
    return {"entity": name, "query": body.query, "type": body.type,
            "candidates": [{**row, "key": str(row["key"])} for row in rows]}


@router.delete("/sources/{name}", response_model=Deleted, responses=documented())
def remove_source(name: str, client: Client = Depends(caller)) -> dict:
    """Unregister an entity source (the tenant's admin); the table is untouched."""
    client.remove_source(name)
    return {"deleted": name}
