"""Language detection -> PostgreSQL text-search configuration.

py3langid is restricted to the languages PostgreSQL has a Snowball (or hunspell-free
built-in) configuration for. Text in a script none of them uses (CJK, Thai, ...) gets
``simple``: lower-cased, no stemming. Short or unsure text falls back to a default.

``detect_many`` classifies a batch at once: py3langid walks its byte automaton in
Python, one byte at a time (0.4 ms for a document's 400 characters, 40% of lexical
ingestion's Python time); here the walk steps every text of the batch together in
numpy, and each text is then scored exactly as py3langid scores it (same features in
the same order, same arithmetic: tests/test_language.py compares the two).
"""

from __future__ import annotations

import lzma
import math
import os
import re
import shutil
import tempfile
import threading
import unicodedata
import zipfile
from pathlib import Path

import numpy as np

# ISO 639-1 -> PostgreSQL text search configuration (all built into PostgreSQL 18).
CONFIGS = {
    "ar": "arabic", "hy": "armenian", "eu": "basque", "ca": "catalan", "da": "danish",
    "nl": "dutch", "en": "english", "et": "estonian", "fi": "finnish", "fr": "french",
    "de": "german", "el": "greek", "hi": "hindi", "hu": "hungarian", "id": "indonesian",
    "ga": "irish", "it": "italian", "lt": "lithuanian", "ne": "nepali", "no": "norwegian",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian", "es": "spanish",
    "sv": "swedish", "ta": "tamil", "tr": "turkish",
}
CONFIG_NAMES = frozenset(CONFIGS.values()) | {"simple", "yiddish"}
_UNSUPPORTED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI", "LAO", "KHMER",
                        "MYANMAR", "ETHIOPIC", "GEORGIAN", "TIBETAN", "SINHALA", "BENGALI")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_lock = threading.Lock()
_loaded: list = []
_arrays: dict[int, tuple] = {}  # id of a loaded model -> its automaton as arrays (_tables)


def _identifier():
    """The model, loaded once per process. (An lru_cache let every thread that asked
    before the first load finished load it again, one after another under the lock:
    eight concurrent first searches waited 1.2 to 12 s.)"""
    if not _loaded:
        with _lock:
            if not _loaded:
                identifier = _load()
                identifier.set_languages(sorted(CONFIGS))
                _loaded.append(identifier)
    return _loaded[0]


def load_model() -> None:
    """Load the model now (a server's start-up), not in its first request."""
    _identifier()


def cache_dir() -> Path:
    """Where pgbraid keeps what it derives once per machine: PGBRAID_CACHE_DIR, else
    $XDG_CACHE_HOME/pgbraid, else ~/.cache/pgbraid."""
    if explicit := os.environ.get("PGBRAID_CACHE_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pgbraid"


def _uncompressed(source: Path) -> Path | None:
    """py3langid's model without its xz: decompressing it is ~0.5 s of every process's
    first detection (a CLI search on a pipeline of several languages), loading the
    uncompressed copy ~0.15 s. Written once, atomically; None where it cannot be."""
    stat = source.stat()
    target = cache_dir() / f"langid-{stat.st_size}-{stat.st_mtime_ns}.npz"
    if target.exists():
        return target
    part = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as tmp:
            part = Path(tmp.name)
            with lzma.open(source) as packed:
                shutil.copyfileobj(packed, tmp, length=1 << 20)
        os.replace(part, target)
    except OSError:
        if part is not None:
            part.unlink(missing_ok=True)  # no 68 MB part file left behind
        return None
    return target


def _load():
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
    from py3langid.modelio import _to_array

    cached = _uncompressed(Path(MODEL_DIR) / MODEL_FILE)
    if cached is not None:
        try:
            with np.load(cached, allow_pickle=False) as data:
                return LanguageIdentifier(
                    np.asarray(data["ptc"]), np.asarray(data["pc"]), data["classes"].tolist(),
                    _to_array(data["nextmove"]), data["out_feat"].tolist(), norm_probs=True,
                    tk_row=_to_array(data["nextmove_row"]))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            pass  # a damaged copy: the packed model still loads
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def config_for(language: str | None) -> str | None:
    """Accept an ISO code ('de') or a configuration name ('german'); None if unknown."""
    if not language:
        return None
    value = language.strip().lower()
    if value in CONFIG_NAMES:
        return value
    return CONFIGS.get(value.split("-")[0].split("_")[0])


def _unsupported_script(text: str) -> bool:
    if text.isascii():
        return False
    head = text[:500]
    letters = [ch for ch in _NON_ASCII.findall(head) if ch.isalpha()]
    foreign = sum(1 for ch in letters if unicodedata.name(ch, "").startswith(_UNSUPPORTED_SCRIPTS))
    if not foreign:
        return False
    return foreign / max(1, sum(1 for ch in head if ch.isalpha())) > 0.3


def detect(text: str, *, default: str, min_confidence: float = 0.9, min_words: int = 3) -> str:
    """The text-search configuration for text, or default when detection is unsure."""
    return detect_many([text], default=default, min_confidence=min_confidence,
                       min_words=min_words)[0]


def detect_many(texts: list[str], *, default: str, min_confidence: float = 0.9,
                min_words: int = 3) -> list[str]:
    """``detect`` of each text, the model run over all of them at once."""
    found: list[str] = [default] * len(texts)
    todo = []
    for i, text in enumerate(texts):
        if _unsupported_script(text):
            found[i] = "simple"
        elif len(text.split()) >= min_words:
            todo.append(i)
    for i, (code, confidence) in zip(todo, classify_many([texts[i][:4000] for i in todo])):
        if confidence >= min_confidence:
            found[i] = CONFIGS.get(code, default)
    return found


def classify_many(texts: list[str]) -> list[tuple[str, float]]:
    """py3langid's ``classify`` (language, confidence) of each text. (A text alone is
    left to py3langid: stepping one automaton in numpy costs more than in Python.)"""
    if not texts:
        return []
    model = _identifier()
    if len(texts) == 1:
        return [model.classify(texts[0])]
    encoded = [_encode(text) for text in texts]
    scores = _scores(model, _features(model, encoded))
    scores *= (1.0 / np.sqrt(np.maximum([len(data) for data in encoded], 1)))[:, None].astype(
        np.float32)
    np.exp(scores - scores.max(axis=1, keepdims=True), out=scores)
    scores /= scores.sum(axis=1, keepdims=True)
    for i, j in model._alias_pairs:
        scores[:, i] += scores[:, j]
        scores[:, j] = 0.0
    best = scores.argmax(axis=1)
    return [(model.nb_classes[b], float(row[b])) for b, row in zip(best.tolist(), scores)]


def _encode(text: str) -> bytes:
    """The bytes py3langid walks (LanguageIdentifier._encode, for a str)."""
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf8", errors="surrogatepass")


def _tables(model) -> tuple[np.ndarray, ...]:
    """The model as arrays: its automaton (next state, row offset, feature of a state)
    and its feature weights as float32 (what numpy casts the float16 table to for
    py3langid's ``counts @ table[features]``, done once)."""
    tables = _arrays.get(id(model))
    if tables is None:
        tables = (np.frombuffer(model.tk_nextmove, dtype=np.uint32),  # 9.8M states: no copy
                  np.asarray(model._rowbase, dtype=np.int64),
                  np.asarray(model.tk_output, dtype=np.int64),
                  model.nb_ptc.astype(np.float32))
        _arrays[id(model)] = tables
    return tables


def _features(model, encoded: list[bytes]) -> list[np.ndarray]:
    """The features each text's walk emits, in the order it emits them: every text's
    automaton advanced one byte per step together (the padding past a text's end is
    walked but dropped)."""
    nextmove, rowbase, output, _ = _tables(model)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    width = int(lengths.max()) if len(encoded) else 0
    data = np.zeros((len(encoded), width), dtype=np.int64)
    for row, text in zip(data, encoded):
        row[:len(text)] = np.frombuffer(text, dtype=np.uint8)
    states = np.empty_like(data)
    state = np.zeros(len(encoded), dtype=np.int64)
    for step in range(width):
        state = nextmove[rowbase[state] + data[:, step]]
        states[:, step] = state
    emitted = output[states]
    keep = (emitted >= 0) & (np.arange(width) < lengths[:, None])
    return [row[mask] for row, mask in zip(emitted, keep)]


def _scores(model, features: list[np.ndarray]) -> np.ndarray:
    """Each text's raw scores, as py3langid's sparse score of a Counter of its features
    (keys in first-emitted order): the counting done for all texts at once, the
    product text by text (the same BLAS call on the same values, so the same sums)."""
    weights = _tables(model)[3]
    sizes = np.fromiter(map(len, features), dtype=np.int64, count=len(features))
    flat = np.concatenate(features) if len(features) else np.zeros(0, dtype=np.int64)
    keys = np.repeat(np.arange(len(features), dtype=np.int64), sizes) * len(weights) + flat
    scores = np.zeros((len(features), len(model.nb_classes)), dtype=np.float32)
    if not len(keys):
        return scores
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    firsts = np.zeros(len(keys), dtype=bool)  # each key's first emission, in emitted order
    firsts[order[starts]] = True
    tally = np.zeros(len(keys), dtype=np.int64)
    tally[order[starts]] = np.diff(np.append(starts, len(keys)))
    unique, counts = keys[firsts], tally[firsts]
    bounds = np.searchsorted(unique // len(weights), np.arange(len(features) + 1)).tolist()
    logs = np.log1p(counts.astype(np.float32))
    rows = weights[unique % len(weights)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if b > a:
            scores[i] = logs[a:b] @ rows[a:b] + model.nb_pc
    return scores
