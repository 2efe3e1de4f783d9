"""The HTTP API (FastAPI): ``create_app`` builds it, ``pgbraid serve`` runs it."""

from .app import create_app

__all__ = ["create_app"]
