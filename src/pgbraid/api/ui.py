"""The playground at ``/ui``: a few static files shipped in the package, no build step.

The page is plain HTML, CSS and JavaScript (``api/static/``). It calls the same
HTTP API as any client, with the key the user typed, kept in the tab's session
storage and sent only as ``Authorization: Bearer`` (never in a URL). It renders
every value from a response as text (``textContent``; highlights are split on
their ``<mark>`` tags and unescaped into text nodes), so a document holding
markup shows that markup, inert.

Each answer carries a Content-Security-Policy that allows the page's own
scripts, styles and API calls and nothing else: no inline script or style, no
eval, no frames, no form posts, no other origin. The files hold no data, so
they need no key.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from ..errors import NotFound
from ..models import shown

router = APIRouter(include_in_schema=False)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-cache"}
FILES = {"index.html": "text/html; charset=utf-8",
         "app.js": "text/javascript; charset=utf-8",
         "render.js": "text/javascript; charset=utf-8",
         "style.css": "text/css; charset=utf-8",
         "favicon.svg": "image/svg+xml"}


@cache
def _read(name: str) -> bytes:
    return (resources.files("pgbraid.api") / "static" / name).read_bytes()


def _file(name: str) -> Response:
    if name not in FILES:  # a fixed list: no path from the request reaches the file system
        raise NotFound(f"no file {shown(name)} in the playground", resource="ui")
    return Response(_read(name), media_type=FILES[name], headers=HEADERS)


@router.get("/ui")
@router.get("/ui/")
def page() -> Response:
    """The playground page."""
    return _file("index.html")


@router.get("/ui/{name}")
def asset(name: str) -> Response:
    return _file(name)
