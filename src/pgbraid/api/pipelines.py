"""Pipelines: create (the tenant's admin), list, show, delete."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query

from ..client import Client
from ..live.config import LiveSource
from ..models import PipelineInfo
from .auth import caller
from .errors import documented
from .schemas import Deleted, PipelineCreate, PipelineDeleted

router = APIRouter(tags=["pipelines"])
CountedAs = Query(None, description=(
    "Classifications held, comma-separated (narrows the key's): the counts are of what "
    "they hold, as the document listing's (default: the key's and public)."))


@router.post("/pipelines", status_code=201, response_model=PipelineInfo,
             responses=documented(409, 413, 501, 503))
def create_pipeline(body: PipelineCreate, client: Client = Depends(caller)) -> PipelineInfo:
    """Create a pipeline (the tenant's admin)."""
    return client.create_pipeline(body.name, embedder=body.embedder, language=body.language,
                                  fulltext=body.fulltext, chunk_size=body.chunk_size,
                                  encrypt=body.encrypt, encrypt_metadata=body.encrypt_metadata,
                                  live=body.live)


@router.get("/pipelines", response_model=list[PipelineInfo], responses=documented())
def list_pipelines(classification: Optional[str] = CountedAs,
                   client: Client = Depends(caller)) -> list[PipelineInfo]:
    """The pipelines this key may read, with counts of what the request holds: the
    documents ``GET /pipelines/{p}/documents`` lists for it, less quarantined ones."""
    return client.pipelines(classification=classification)


@router.get("/pipelines/{pipeline}", response_model=PipelineInfo, responses=documented())
def show_pipeline(pipeline: str, classification: Optional[str] = CountedAs,
                  client: Client = Depends(caller)) -> PipelineInfo:
    """One pipeline, with counts as ``GET /pipelines`` gives them."""
    return client.pipeline(pipeline, classification=classification)


@router.delete("/pipelines/{pipeline}", response_model=PipelineDeleted, responses=documented())
def delete_pipeline(pipeline: str, client: Client = Depends(caller)) -> dict:
    """Delete a pipeline and everything in it (admin on the pipeline); ``warnings``: its
    indexes or graph mirror not dropped yet (the tenant's next delete drops them)."""
    return client.delete_pipeline(pipeline)


@router.get("/pipelines/{pipeline}/live", response_model=LiveSource, responses=documented())
def show_live(pipeline: str, client: Client = Depends(caller)) -> dict:
    """The pipeline's live source (admin on the pipeline: a URL template may hold a key)."""
    return client.live_source(pipeline)


@router.put("/pipelines/{pipeline}/live", response_model=LiveSource, responses=documented(413))
def set_live(pipeline: str, body: LiveSource, client: Client = Depends(caller)) -> dict:
    """Declare or replace the pipeline's live source (admin on the pipeline)."""
    return client.set_live_source(pipeline, body)


@router.delete("/pipelines/{pipeline}/live", response_model=Deleted, responses=documented())
def remove_live(pipeline: str, client: Client = Depends(caller)) -> dict:
    """Remove the pipeline's live source: searches no longer fetch (admin on the pipeline)."""
    client.set_live_source(pipeline, None)
    return {"deleted": f"{pipeline}/live"}
