"""pgbraid: retrieval strategies on PostgreSQL, alone, cascaded or fused, with a trace."""

from .client import Client, connect
from .errors import (BackendTimeout, BackendUnavailable, Forbidden, InvalidRequest, NotEnabled,
                     NotFound, PgbraidError)
from .ingest.readers import FieldMap
from .models import Hit, SearchRequest, SearchResponse, Trace, TraceEntry
from .scope import Principal

__all__ = [
    "BackendTimeout", "BackendUnavailable", "Client", "FieldMap", "Forbidden", "Hit",
    "InvalidRequest", "NotEnabled", "NotFound", "PgbraidError", "Principal", "SearchRequest", "SearchResponse",
    "Trace", "TraceEntry", "connect",
]
