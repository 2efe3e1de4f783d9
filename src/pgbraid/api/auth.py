"""Who a request acts as: the principal of its API key (``Authorization: Bearer KEY``).

One Client per process holds the pool and the engine; each request gets a
Client acting as its own principal (``Client.acting_as``), so every permission
and scope check is the Client's and the engine's, as for the CLI and Python.

With ``--no-auth`` every request acts as the local tenant's admin, and only
requests that arrive from a loopback address are taken (``serve`` refuses to
bind anything else with auth off; this check also covers a factory started by
hand), for Host 127.0.0.1, localhost or [::1], and from no web page of another
origin (``check_local_origin``: DNS rebinding, cross-site requests).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..client import Client
from ..errors import Forbidden, Unauthorized
from .middleware import PRINCIPAL, note

bearer = HTTPBearer(auto_error=False, description="An API key from `pgbraid keys create`.")


@dataclass(frozen=True)
class Api:
    """What the process holds: its Client (pool, engine) and whether auth is off."""

    client: Client
    no_auth: bool = False


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


LOCAL_HOST = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\])(?::\d{1,5})?", re.I)


def check_local_origin(host: str | None, origin: str | None) -> None:
    """With auth off, a loopback peer is not enough: a web page the browser loaded from
    a name the attacker resolves to 127.0.0.1 (DNS rebinding) sends its own Host, and a
    page of another site sends its Origin. Only Host 127.0.0.1, localhost or [::1] (with
    a port) is taken, and an Origin, when sent, must be that same host and port."""
    if host is None or not LOCAL_HOST.fullmatch(host):
        raise Forbidden("authentication is off on this server, which takes requests for "
                        "Host 127.0.0.1, localhost or [::1] only", action="no-auth host")
    if origin is None:
        return
    scheme, _, rest = origin.partition("://")
    if scheme.lower() not in ("http", "https") or rest.lower() != host.lower():
        raise Forbidden("authentication is off on this server, which takes no request "
                        "from a web page of another origin", action="no-auth origin")


def caller(request: Request,
           credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Client:
    """The request's Client, acting as the principal its key stands for."""
    api: Api = request.app.state.api
    if api.no_auth:
        peer = request.client.host if request.client else None
        if not is_loopback(peer):
            raise Unauthorized("authentication is off on this server, which takes requests "
                               "from loopback only")
        check_local_origin(request.headers.get("host"), request.headers.get("origin"))
        return api.client
    principal = request.scope.get(PRINCIPAL)  # checked before the body was read
    if principal is None:
        principal = api.client.authenticate(credentials.credentials if credentials else None)
    note(request.scope, key_id=principal.key_id, tenant=principal.tenant)
    client = api.client.acting_as(principal)
    route = request.scope.get("route")
    client.note_use(f"{request.method} {getattr(route, 'path', request.url.path)}")
    return client
