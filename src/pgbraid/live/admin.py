"""The Client's methods for a pipeline's live source (its admin's): declare, change,
remove, show."""

from __future__ import annotations

from typing import Any

from .. import audit, pipelines
from ..errors import NotFound
from .config import parse


class LiveSources:
    """Mixed into Client: ``principal`` and ``_session`` are the Client's."""

    def set_live_source(self, pipeline: str, source: Any) -> dict[str, Any] | None:
        """Declare, change or (with None) remove a pipeline's live source (admin on it)."""
        self.principal.require(pipeline, "admin")
        parsed = parse(source) if source is not None else None
        value = parsed.model_dump(mode="json") if parsed is not None else None
        with self._session() as conn:
            pipelines.set_setting(conn, pipeline, "live", value)
            audit.record(conn, self.principal, "pipeline.live", pipeline,
                         {"allow_hosts": list(parsed.allow_hosts) if parsed else None})
        return value

    def live_source(self, pipeline: str) -> dict[str, Any]:
        """The pipeline's live source (admin on it: a URL template may hold a key)."""
        self.principal.require(pipeline, "admin")
        with self._session() as conn:
            stored = pipelines.get(conn, pipeline).settings.get("live")
        if not stored:
            raise NotFound(f"pipeline {pipeline!r} has no live source", pipeline=pipeline)
        return stored
