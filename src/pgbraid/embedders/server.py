"""A small OpenAI-compatible embeddings server for a local embedder.

``POST /v1/embeddings`` with ``{"input": str | [str], "model": ...}`` answers
``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
"model": ..., "usage": {...}}``; ``GET /v1/models`` lists the one model. It lets
any OpenAI-compatible client (and pgbraid's ``openai`` embedder) use the
bundled model over HTTP, on loopback by default.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import Embedder

MAX_INPUTS = 2048


def make_server(embedder: Embedder, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
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

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": embedder.name, "object": "model"}]})
            else:
                self._error(404, "not found")

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/embeddings":
                return self._error(404, "not found")
            try:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
            except (ValueError, json.JSONDecodeError):
                return self._error(400, "body must be JSON")
            texts = request.get("input") if isinstance(request, dict) else None
            if isinstance(texts, str):
                texts = [texts]
            if (not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS
                    or not all(isinstance(t, str) for t in texts)):
                return self._error(400, f"input must be a string or a list of 1 to {MAX_INPUTS} strings")
            with lock:
                vectors = embedder.embed_documents(texts)
            self._send(200, {
                "object": "list", "model": request.get("model") or embedder.name,
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            })

    return ThreadingHTTPServer((host, port), Handler)
