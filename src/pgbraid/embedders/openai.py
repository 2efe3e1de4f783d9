"""Any OpenAI-compatible ``POST /v1/embeddings`` endpoint (URL, model and key from settings).

Requests time out (``timeout`` seconds) and are retried with backoff on
connection errors, timeouts, 429 and 5xx; anything else, or running out of
retries, raises BackendUnavailable (HTTP 503) with the reason.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np

from ..errors import BackendUnavailable, NotEnabled

RETRY_STATUS = {429, 500, 502, 503, 504}


class OpenAICompatible:
    name = "openai"
    batch_size = 64

    def __init__(self, url: str, model: str, key: str = "", timeout: str = "30",
                 retries: str = "3", dimension: str = "0") -> None:
        if not url:
            # Not configured is not "down": no retry will help (501, not 503).
            raise NotEnabled("the openai embedder is not configured: set PGBRAID_OPENAI_URL",
                             setting="PGBRAID_OPENAI_URL")
        self.url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/embeddings") else "/embeddings")
        self.model = model
        self.key = key
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.dimension = int(dimension) or len(self.embed_query("dimension probe"))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        parts = [self._request(texts[i:i + self.batch_size])
                 for i in range(0, len(texts), self.batch_size)]
        return np.vstack(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._request([text])[0]

    def _request(self, texts: list[str]) -> np.ndarray:
        body = json.dumps({"input": texts, "model": self.model}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        reason = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2 ** attempt, 5.0))
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    payload = json.loads(response.read())
                return _vectors(payload, len(texts))
            except urllib.error.HTTPError as exc:
                reason = f"HTTP {exc.code}"
                if exc.code not in RETRY_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                reason = str(getattr(exc, "reason", exc))
            except (ValueError, KeyError) as exc:
                reason = f"malformed response ({exc})"
                break
        raise BackendUnavailable(f"embedding endpoint {self.url} failed: {reason}")


def _vectors(payload: dict, expected: int) -> np.ndarray:
    data = sorted(payload["data"], key=lambda item: item["index"])
    if len(data) != expected:
        raise ValueError(f"{len(data)} embeddings for {expected} inputs")
    vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
