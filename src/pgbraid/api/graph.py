"""A pipeline's graph: load vertices and edges (all or nothing), summary, delete a vertex."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ..client import Client
from .auth import caller
from .errors import documented
from .schemas import Deleted, GraphLoadBody, GraphLoaded, GraphSummary, check_path_id

router = APIRouter(tags=["graph"])


@router.post("/pipelines/{pipeline}/graph", response_model=GraphLoaded,
             responses=documented(413))
def load_graph(pipeline: str, body: GraphLoadBody, client: Client = Depends(caller)) -> dict:
    """Upsert vertices and edges (write); a bad record refuses the whole load."""
    vertices = [(v.type, str(v.key), v.label, v.documents) for v in body.vertices]
    edges = [(e.src_type, str(e.src), e.type, e.dst_type, str(e.dst), e.weight, e.directed)
             for e in body.edges]
    return client.load_graph_records(pipeline, vertices, edges)


@router.get("/pipelines/{pipeline}/graph", response_model=GraphSummary, responses=documented())
def graph_summary(pipeline: str, client: Client = Depends(caller)) -> dict:
    """Vertex and edge counts by type (read)."""
    return client.graph_summary(pipeline)


@router.delete("/pipelines/{pipeline}/graph/vertices/{vertex_type}/{key:path}",
               response_model=Deleted, responses=documented())
def delete_vertex(pipeline: str, vertex_type: str, key: str,
                  client: Client = Depends(caller)) -> dict:
    """Delete a vertex and its edges (write)."""
    check_path_id(key, "key")
    client.delete_vertex(pipeline, vertex_type, key)
    return {"deleted": f"{vertex_type}:{key}"}
