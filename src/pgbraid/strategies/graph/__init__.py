"""The graph: ``store`` loads and deletes a pipeline's vertices and edges;
``search`` answers the ``graph`` strategy (similar entities, k-hop neighbours)."""

from .search import Graph
from .store import GraphLoad

__all__ = ["Graph", "GraphLoad"]
