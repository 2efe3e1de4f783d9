"""Live fetch (seed 004): a pipeline's live source, fetched within limits, stored, then cited.

``config`` declares a source, ``fetch`` fetches one URL and reads documents
from it, ``search`` decides when a search fetches and keeps what it fetched.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ..ingest.readers import ReadError, SourceDocument
from .config import PREFIX, LiveSource, parse

__all__ = ["LiveSource", "PREFIX", "parse", "reserved"]


def reserved(items: Iterable[SourceDocument | ReadError]) -> Iterator[SourceDocument | ReadError]:
    """Ingestion's items, refusing ids in the ``live:`` namespace (fetched documents' own)."""
    for item in items:
        if isinstance(item, SourceDocument) and item.id.startswith(PREFIX):
            yield ReadError(item.source or item.id, f"ids starting with {PREFIX!r} are kept "
                            "for documents a live source fetched")
        else:
            yield item
