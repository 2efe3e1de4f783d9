"""Language detection -> PostgreSQL text-search configuration.

py3langid is restricted to the languages PostgreSQL has a Snowball (or hunspell-free
built-in) configuration for. Text in a script none of them uses (CJK, Thai, ...) gets
``simple``: lower-cased, no stemming. Short or unsure text falls back to a default.
"""

from __future__ import annotations

import threading
import unicodedata
from functools import lru_cache

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
_lock = threading.Lock()
_loaded: list = []


def _identifier():
    """The model, loaded once per process. (An lru_cache let every thread that asked
    before the first load finished load it again, one after another under the lock:
    eight concurrent first searches waited 1.2 to 12 s.)"""
    if not _loaded:
        with _lock:
            if not _loaded:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
                identifier.set_languages(sorted(CONFIGS))
                _loaded.append(identifier)
    return _loaded[0]


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
    letters = [ch for ch in text[:500] if ch.isalpha() and not ch.isascii()]
    if not letters:
        return False
    foreign = sum(1 for ch in letters if unicodedata.name(ch, "").startswith(_UNSUPPORTED_SCRIPTS))
    return foreign / max(1, sum(1 for ch in text[:500] if ch.isalpha())) > 0.3


def detect(text: str, *, default: str, min_confidence: float = 0.9, min_words: int = 3) -> str:
    """The text-search configuration for text, or default when detection is unsure."""
    if _unsupported_script(text):
        return "simple"
    if len(text.split()) < min_words:
        return default
    code, confidence = _identifier().classify(text[:4000])
    if confidence < min_confidence:
        return default
    return CONFIGS.get(code, default)
