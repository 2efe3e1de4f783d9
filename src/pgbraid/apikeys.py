"""API keys: 256-bit random tokens, stored as their SHA-256 digest only.

A token is ``pgb_`` + 43 URL-safe base64 characters (32 bytes from
``secrets``). The database keeps its digest, a short prefix to recognise it
by, and what it grants: one pipeline (or ``*``), permissions there, the
classifications it may hold (none given: any), and the tenant's admin. Keys are
not passwords: a token is as random as a digest is long, so a fast hash
loses nothing and a slow one would only slow every request.

A request's key is looked up by its digest through
``pgbraid.api_key_by_digest`` (migrations 013, 044), the only statement that runs
before the tenant is known: it reads the one row of that digest, and no policy
opens any other; the digests are then compared again in constant time. Everything else (create, list, revoke) runs in the tenant's session
under row-level security.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timezone
from typing import Any, Callable, ContextManager

import psycopg
from psycopg.rows import dict_row

from .errors import Forbidden, InvalidRequest, NotFound, Unauthorized
from .models import parse_as_of, parse_classifications, shown, validate_name
from .scope import ANY_PIPELINE, PERMISSIONS, Principal

TOKEN_PREFIX = "pgb_"
TOKEN_BYTES = 32
TOKEN_CHARS = len(TOKEN_PREFIX) + 43
SHOWN_CHARS = 12
"""How much of a token ``keys list`` shows: ``pgb_`` and 8 characters (48 random bits)."""

_COLUMNS = ("SELECT id, prefix, pipeline, permissions, classifications, tenant_admin AS admin,"
            " created_at, expires_at, expires_at IS NOT NULL AND expires_at <= now() AS expired,"
            " revoked_at FROM pgbraid.api_keys")


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def parse_permissions(value: Any) -> list[str]:
    """read, write, execute, admin: a list or a comma-separated string."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(p, str) for p in items):
        raise InvalidRequest("permissions must be a list or a comma-separated string of "
                             f"{', '.join(PERMISSIONS)}", field="permissions")
    chosen = list(dict.fromkeys(p.strip() for p in items if p.strip()))
    unknown = [p for p in chosen if p not in PERMISSIONS]
    if unknown or not chosen:
        raise InvalidRequest(f"unknown permission(s) {shown(unknown or [''])}; use "
                             f"{', '.join(PERMISSIONS)}", field="permissions")
    return chosen


def create(conn: psycopg.Connection, creator: Principal, *, pipeline: str, permissions: Any,
           classification: Any = None, expires: Any = None,
           admin: bool = False) -> dict[str, str]:
    """Store a new key of the session's tenant; returns its id and the token (shown once)."""
    creator.require_tenant_admin("creating an API key")
    if pipeline != ANY_PIPELINE:
        validate_name("pipeline", pipeline)
    chosen = parse_permissions(permissions)
    held = None if classification is None else list(parse_classifications(classification))
    expires_at = _expiry(expires)
    # Before the pipeline is looked up: a bounded creator learns nothing of other pipelines.
    _check_grants(conn, creator, "create", {"pipeline": pipeline, "permissions": chosen,
                                            "classifications": held, "tenant_admin": bool(admin),
                                            "expires_at": expires_at})
    if pipeline != ANY_PIPELINE and conn.execute(
            "SELECT 1 FROM pgbraid.pipelines WHERE name = %s", (pipeline,)).fetchone() is None:
        raise NotFound(f"pipeline {pipeline!r} does not exist", pipeline=pipeline)
    token, key_id = new_token(), secrets.token_hex(8)
    conn.execute(
        "INSERT INTO pgbraid.api_keys (id, digest, prefix, pipeline, permissions,"
        " classifications, tenant_admin, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (key_id, digest(token), token[:SHOWN_CHARS], pipeline, chosen, held, bool(admin),
         expires_at))
    return {"id": key_id, "key": token}


def _check_grants(conn: psycopg.Connection, caller: Principal, verb: str,
                  key: dict[str, Any]) -> None:
    """A key (its pipeline, permissions, classifications, admin flag and expiry) is within
    what ``caller`` holds, or ``caller`` may neither create nor revoke it (Forbidden)."""
    pipeline, wanted = key["pipeline"], key["permissions"]
    if pipeline == ANY_PIPELINE:
        own = caller.permissions.get(ANY_PIPELINE, frozenset())
        lacking = [p for p in wanted if p not in own and "admin" not in own]
    else:
        lacking = [p for p in wanted if not caller.allows(pipeline, p)]
    if lacking:
        raise Forbidden(f"this principal may not {verb} a key holding {', '.join(lacking)} on "
                        f"{'every pipeline' if pipeline == ANY_PIPELINE else repr(pipeline)}: "
                        "a key holds no more than its creator", missing=lacking,
                        action=f"{verb} an API key")
    if key["tenant_admin"] and not caller.tenant_admin:
        raise Forbidden(f"only the tenant's admin may {verb} an admin key",
                        action=f"{verb} an API key")
    _check_within(caller, key["classifications"])
    if caller.key_id is None:
        return
    own_expiry = conn.execute("SELECT expires_at FROM pgbraid.api_keys WHERE id = %s",
                              (caller.key_id,)).fetchone()
    if own_expiry and own_expiry[0] is not None and (
            key["expires_at"] is None or key["expires_at"] > own_expiry[0]):
        raise Forbidden(f"this principal's key expires at {own_expiry[0].isoformat()}: it may "
                        f"not {verb} a key that outlives it (give expires no later)",
                        field="expires", action=f"{verb} an API key")


def _check_within(creator: Principal, held: list[str] | None) -> None:
    """A key holds no classification its creator may not hold."""
    if creator.classifications is None:
        return
    if held is None:
        raise Forbidden("this creator may hold only " + ", ".join(creator.classifications)
                        + ": name the key's classifications", field="classification")
    beyond = sorted(set(held) - set(creator.classifications))
    if beyond:
        raise Forbidden("a key may not hold classifications its creator may not hold: "
                        + ", ".join(beyond), classification=beyond)


def _expiry(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        expires_at = parse_as_of(value)
    except InvalidRequest:
        raise InvalidRequest(f"expires must be an ISO-8601 date or time, got {shown(value)}",
                             field="expires") from None
    if expires_at <= datetime.now(timezone.utc):  # a key born expired is a mistake
        raise InvalidRequest(f"expires must be in the future, got {expires_at.isoformat()}",
                             field="expires")
    return expires_at


def listing(conn: psycopg.Connection, caller: Principal) -> list[dict[str, Any]]:
    """The session's tenant's keys (never a digest), newest first: for a bounded admin,
    only those it could revoke (each names a pipeline, which it may not learn of)."""
    caller.require_tenant_admin("listing API keys")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_COLUMNS + " ORDER BY created_at DESC, id").fetchall()
    if not caller.unrestricted:
        rows = [row for row in rows if _within(conn, caller, row)]
    for row in rows:
        for key in ("created_at", "expires_at", "revoked_at"):
            row[key] = row[key].isoformat() if row[key] else None
    return rows


def _within(conn: psycopg.Connection, caller: Principal, row: dict[str, Any]) -> bool:
    try:
        _check_grants(conn, caller, "revoke", {**row, "tenant_admin": row["admin"]})
    except Forbidden:
        return False
    return True


REVOKE_UNKNOWN = "API key {!r} does not exist, or holds more than this principal may grant"
"""The one answer (NotFound) to revoking a key the caller may not see: none by that id in its
tenant, or one beyond its grants. ``listing`` hides the latter from a bounded admin; a 403
for it against a 404 for an unused id would tell that admin which ids exist."""


def revoke(conn: psycopg.Connection, caller: Principal, key_id: str,
           refused: Callable[[Forbidden], None] | None = None) -> dict[str, str]:
    """Revoke a key within the caller's grants; ``refused`` is told of a key it holds beyond
    them (the audit's ``access.denied``), which the caller is answered as if it did not exist."""
    caller.require_tenant_admin("revoking an API key")
    if not isinstance(key_id, str) or not key_id.isalnum() or len(key_id) > 64:
        raise InvalidRequest(f"invalid key id {shown(key_id)}", field="id")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT pipeline, permissions, classifications, tenant_admin,"
                          " expires_at FROM pgbraid.api_keys WHERE id = %s FOR UPDATE",
                          (key_id,)).fetchone()
    unknown = NotFound(REVOKE_UNKNOWN.format(key_id), key=key_id)
    if row is None:
        raise unknown
    try:
        _check_grants(conn, caller, "revoke", row)
    except Forbidden:
        # Not the key's pipeline, permissions or bound, not even its existence: the audit
        # (the unrestricted admin's to read) records the refusal, the caller sees a 404.
        if refused is not None:
            refused(Forbidden(f"this principal may not revoke API key {key_id!r}: it holds "
                              "more than this principal may grant",
                              action="revoke an API key"))
        raise unknown from None
    conn.execute("UPDATE pgbraid.api_keys SET revoked_at = coalesce(revoked_at, now())"
                 " WHERE id = %s", (key_id,))
    return {"revoked": key_id}


def authenticate(session: Callable[[], ContextManager[psycopg.Connection]],
                 token: str | None,
                 refused: Callable[[dict[str, Any] | None, str], None] | None = None) -> Principal:
    """The principal a bearer token stands for; Unauthorized when there is none (after
    telling ``refused`` the key's row, when the key is known, and why)."""
    row, why = _lookup(session, token)
    if why is not None:
        if refused is not None:
            refused(row, why)
        raise Unauthorized(why)
    assert row is not None
    classifications = row["classifications"]
    return Principal(row["tenant_id"], {row["pipeline"]: frozenset(row["permissions"])},
                     tuple(classifications) if classifications is not None else None,
                     bool(row["tenant_admin"]), row["id"])


def _lookup(session: Callable[[], ContextManager[psycopg.Connection]],
            token: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The key's row and why it is refused (None: it is valid)."""
    if not token:
        return None, "an API key is required: Authorization: Bearer KEY"
    if (len(token) != TOKEN_CHARS or not token.startswith(TOKEN_PREFIX)
            or not token.isascii() or not token.isprintable()):
        return None, "invalid API key"
    wanted = digest(token)
    with session() as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM pgbraid.api_key_by_digest(%s)", (wanted,)).fetchone()
    if row is None or not hmac.compare_digest(bytes(row["digest"]), wanted):
        return None, "invalid API key"
    if row["revoked"]:
        return row, "this API key was revoked"
    if row["expired"]:
        return row, "this API key has expired"
    return row, None
