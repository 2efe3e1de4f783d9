"""Liveness and readiness, without a key."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .errors import documented
from .schemas import Status

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Status)
def healthz() -> dict:
    """The process is up (nothing is asked of PostgreSQL)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Status, responses=documented(503, common=(500,)))
def readyz(request: Request) -> dict:
    """PostgreSQL answers and every migration is applied (503 otherwise)."""
    return request.app.state.api.client.ready()
