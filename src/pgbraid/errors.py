"""The exceptions pgbraid raises, and the one table that maps them to codes.

    PgbraidError
     ├── InvalidRequest      bad input: 400, CLI exit 2
     ├── NotFound            unknown pipeline / document / version: 404
     ├── Forbidden           the caller may not do this: 403
     ├── NotEnabled          strategy or capability not enabled here: 501
     ├── BackendTimeout      PostgreSQL cancelled the statement (57014): 504
     └── BackendUnavailable  PostgreSQL or an embedder cannot be reached: 503

Every entry point (Python, CLI, HTTP) shows an error as ``error_body(exc)``.
"""

from __future__ import annotations

from typing import Any


class PgbraidError(Exception):
    code = "error"
    http_status = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRequest(PgbraidError):
    code = "invalid_request"
    http_status = 400


class NotFound(PgbraidError):
    code = "not_found"
    http_status = 404


class Forbidden(PgbraidError):
    code = "forbidden"
    http_status = 403


class NotEnabled(PgbraidError):
    code = "not_enabled"
    http_status = 501


class BackendTimeout(PgbraidError):
    code = "backend_timeout"
    http_status = 504


class BackendUnavailable(PgbraidError):
    code = "backend_unavailable"
    http_status = 503


def error_body(exc: PgbraidError) -> dict[str, Any]:
    """The single error shape of the CLI's --json output and of the HTTP API."""
    return {"error": {"code": exc.code, "message": exc.message, "details": exc.details}}
