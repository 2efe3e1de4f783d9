"""The exceptions pgbraid raises, and the one table that maps them to codes.

    PgbraidError
     ├── InvalidRequest          bad input                                  400, exit 2
     │    ├── Conflict           it already exists                          409, exit 2
     │    ├── PayloadTooLarge    over a size limit                          413, exit 2
     │    └── MethodNotAllowed   an HTTP path without this method           405, exit 2
     ├── Unauthorized            no valid credentials                       401, exit 77
     ├── Forbidden               the caller may not do this                 403, exit 77
     ├── NotFound                unknown pipeline / document / version      404, exit 2
     ├── NotEnabled              strategy or capability not enabled here    501, exit 69
     ├── BackendTimeout          PostgreSQL cancelled the statement         504, exit 3
     ├── BackendUnavailable      PostgreSQL or an embedder cannot be reached 503, exit 3
     ├── KeyUnavailable          no / wrong / unsafe encryption key         503, exit 78
     └── IntegrityFailure        a stored ciphertext fails its GCM check    500, exit 65

    anything else                a bug: "internal error"                    500, exit 70

``ERRORS`` is the table: status codes and exit codes are chosen there, never
where an error is raised. ``REMEDIES`` beside it holds the one thing that differs by
interface: how a message names the fix (a CLI command, or an HTTP route and a client
method). ``describe(exc)`` turns *any* exception into the
row, message and details an entry point shows; an exception that is not a
``PgbraidError`` shows only ``internal error`` (its text may hold SQL, paths
or data) and is logged with its traceback for operators. Exit codes 65, 69,
70, 77 and 78 are sysexits(3)'s EX_DATAERR, EX_UNAVAILABLE, EX_SOFTWARE, EX_NOPERM
and EX_CONFIG; 1 is left
to ``ingest`` ("finished, with failed documents").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("pgbraid")


class PgbraidError(Exception):
    def __init__(self, message: str, *, remedy: str | None = None, **details: Any) -> None:
        """``remedy``: a key of REMEDIES, the fix each interface names in its own words
        (the message ends with the API's: Python and HTTP callers read it as it is)."""
        self.brief, self.remedy = message, remedy
        self.message = said(message, remedy, "api")
        super().__init__(self.message)
        self.details = details

    @property
    def code(self) -> str:
        return row_of(type(self)).code

    @property
    def http_status(self) -> int:
        return row_of(type(self)).status


class InvalidRequest(PgbraidError):
    pass


class Conflict(InvalidRequest):
    pass


class PayloadTooLarge(InvalidRequest):
    pass


class MethodNotAllowed(InvalidRequest):
    pass


class Unauthorized(PgbraidError):
    pass


class Forbidden(PgbraidError):
    pass


class NotFound(PgbraidError):
    pass


class NotEnabled(PgbraidError):
    pass


class BackendTimeout(PgbraidError):
    pass


class BackendUnavailable(PgbraidError):
    pass


class KeyUnavailable(PgbraidError):
    """Encrypted values cannot be opened or written: no key configured, a value under a
    key id the keyring lacks (a wrong key), or a key file others may read."""


class IntegrityFailure(PgbraidError):
    """A stored ciphertext fails AES-GCM authentication with the right key: tampered,
    truncated, or copied from another row or field."""


@dataclass(frozen=True)
class Row:
    code: str
    status: int
    exit: int
    when: str


ERRORS: dict[type[PgbraidError], Row] = {
    InvalidRequest: Row("invalid_request", 400, 2, "bad input: a malformed request, parameter, "
                        "filter, name, id, version or time; NUL or lone surrogates in text"),
    Conflict: Row("conflict", 409, 2, "the pipeline or entity source already exists"),
    PayloadTooLarge: Row("payload_too_large", 413, 2, "a query, filter or filter value over "
                         "its size limit"),
    MethodNotAllowed: Row("method_not_allowed", 405, 2, "the HTTP path exists, but not with "
                          "this method"),
    Unauthorized: Row("unauthorized", 401, 77, "no valid API key (HTTP): none, unknown, "
                      "revoked or expired"),
    Forbidden: Row("forbidden", 403, 77, "the principal lacks the permission on the pipeline"),
    NotFound: Row("not_found", 404, 2, "unknown pipeline, document, version, entity source or "
                    "API key (a key beyond the caller answers so too)"),
    NotEnabled: Row("not_enabled", 501, 69, "the strategy or capability is not enabled or "
                    "installed here (pgvector, pg_search, AGE, an embedder)"),
    BackendTimeout: Row("backend_timeout", 504, 3, "PostgreSQL cancelled a statement "
                        "(statement timeout)"),
    BackendUnavailable: Row("backend_unavailable", 503, 3, "PostgreSQL or an embedder cannot "
                            "be reached, or no pooled connection came in time"),
    KeyUnavailable: Row("key_unavailable", 503, 78, "encryption at rest: no key configured, "
                        "a value under a key the keyring lacks (wrong key), or a key file "
                        "with loose permissions"),
    IntegrityFailure: Row("integrity_failure", 500, 65, "a stored ciphertext fails its AES-GCM "
                          "check: tampered, truncated or moved to another row"),
}
INTERFACES = ("api", "cli")
"""Who an error is told to: "api" the Python client, HTTP and MCP; "cli" the command line."""
REMEDIES: dict[str, dict[str, str]] = {
    "load_graph": {"api": "POST /pipelines/{p}/graph, client.load_graph",
                   "cli": "pgbraid edges load PIPELINE --vertices FILE --edges FILE"},
    "live_source": {"api": "PUT /pipelines/{p}/live, client.set_live_source",
                    "cli": "pgbraid pipeline live PIPELINE --source URL --allow-host HOST"},
}
"""The fix an error names, as each interface says it: the one place where messages
differ by interface (the code, status and exit code never do)."""


def said(message: str, remedy: str | None, interface: str) -> str:
    """``message``, ending with ``remedy`` in ``interface``'s words."""
    return f"{message} ({REMEDIES[remedy][interface]})" if remedy else message


INTERNAL = Row("internal", 500, 70, "anything else: a bug (logged with its traceback)")
INTERNAL_MESSAGE = "internal error"


def row_of(cls: type[BaseException]) -> Row:
    """The table row of an exception class: its own, or its nearest listed base's."""
    for base in cls.__mro__:
        if base in ERRORS:
            return ERRORS[base]  # type: ignore[index]
    return INTERNAL


@dataclass(frozen=True)
class Described:
    code: str
    status: int
    exit: int
    message: str
    details: dict[str, Any]

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


def describe(exc: BaseException, interface: str = "api") -> Described:
    """Any exception as (code, HTTP status, exit code, message, details), from the table;
    the message names the fix as ``interface`` (INTERFACES) says it."""
    if isinstance(exc, PgbraidError):
        row = row_of(type(exc))
        remedy = getattr(exc, "remedy", None)
        message = said(exc.brief, remedy, interface) if remedy else exc.message
        return Described(row.code, row.status, row.exit, message, exc.details)
    logger.error("internal error: %s", type(exc).__name__, exc_info=exc)
    return Described(INTERNAL.code, INTERNAL.status, INTERNAL.exit, INTERNAL_MESSAGE, {})


def error_body(exc: BaseException, interface: str = "api") -> dict[str, Any]:
    """The single error shape of the CLI's --json output and of the HTTP API."""
    return describe(exc, interface).body()


def from_body(body: Any) -> PgbraidError:
    """The error an error body (``error_body``'s shape, from the HTTP API) stands for: the
    table's class for its code, with its message and details (PgbraidError when the code
    is not in the table, as ``internal`` is not)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return PgbraidError("the server answered an error without the error shape")
    classes = {row.code: cls for cls, row in ERRORS.items()}
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    return classes.get(error.get("code"), PgbraidError)(str(error.get("message", "")), **details)
