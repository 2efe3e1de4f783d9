"""A small OpenAI-compatible embeddings server for a local embedder.

``POST /v1/embeddings`` with ``{"input": str | [str], "model": ...}`` answers
``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
"model": ..., "usage": {...}}``; ``GET /v1/models`` lists the one model. It lets
any OpenAI-compatible client (and pgbraid's ``openai`` embedder) use the
bundled model over HTTP, on loopback by default.

With ``key`` every request must carry ``Authorization: Bearer <key>`` (401
otherwise; pgbraid's ``openai`` embedder sends ``PGBRAID_OPENAI_KEY``); without
one the server binds loopback only. A body over ``MAX_BODY_BYTES`` is 413 before
it is read.
"""

from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import Embedder

MAX_INPUTS = 2048
MAX_BODY_BYTES = 8 << 20
_ANSWERED = object()  # _body's "an error has been sent"


def make_server(embedder: Embedder, host: str = "127.0.0.1", port: int = 8000, *,
                key: str | None = None) -> ThreadingHTTPServer:
    """``key``: the bearer token every request must carry; without one, loopback only."""
    from ..api.auth import is_loopback  # the one loopback rule (serve --no-auth's too)

    if not key and not is_loopback(host):
        raise ValueError(f"the embeddings server binds {host} only with a key "
                         "(PGBRAID_EMBEDDINGS_KEY): without one, loopback only")
    handler = type("Handler", (_Handler,), {
        "embedder": embedder, "lock": threading.Lock(),
        "expected": f"Bearer {key}".encode() if key else None})
    return ThreadingHTTPServer((host, port), handler)


class _Handler(BaseHTTPRequestHandler):
    """One request; ``make_server`` gives a subclass its embedder, lock and expected key."""

    embedder: Embedder
    lock: threading.Lock
    expected: bytes | None

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def _allowed(self) -> bool:
        if self.expected is None:
            return True
        given = (self.headers.get("Authorization") or "").encode("utf-8", "replace")
        if hmac.compare_digest(given, self.expected):
            return True
        self.close_connection = True
        self._error(401, "a valid Authorization: Bearer key is needed")
        return False

    def do_GET(self) -> None:
        if not self._allowed():
            return
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list",
                             "data": [{"id": self.embedder.name, "object": "model"}]})
        else:
            self._error(404, "not found")

    def do_POST(self) -> None:
        if not self._allowed():
            return None
        if self.path.rstrip("/") != "/v1/embeddings":
            return self._error(404, "not found")
        request = self._body()
        if request is _ANSWERED:
            return None
        texts = request.get("input") if isinstance(request, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if (not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS
                or not all(isinstance(t, str) for t in texts)):
            return self._error(400, f"input must be a string or a list of 1 to {MAX_INPUTS} strings")
        with self.lock:
            vectors = self.embedder.embed_documents(texts)
        self._send(200, {
            "object": "list", "model": request.get("model") or self.embedder.name,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        })
        return None

    def _body(self) -> object:
        """The JSON body, or ``_ANSWERED`` once an error has been answered."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True  # the body is not read
                self._error(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
                return _ANSWERED
            return json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, json.JSONDecodeError):
            self._error(400, "body must be JSON")
            return _ANSWERED
