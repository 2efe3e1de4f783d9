"""Vectors: ``store`` keeps embeddings and their HNSW indexes (one per distance
strategy); ``search`` answers ``similarity`` and ``mmr`` over them."""

from .search import MMR, Similarity
from .store import DISTANCES, Distance, check_vector, distance

__all__ = ["DISTANCES", "Distance", "MMR", "Similarity", "check_vector", "distance"]
