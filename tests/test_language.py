"""Language detection: the model is loaded once per process, even when many threads
(the HTTP server's first concurrent searches) ask at once."""

from __future__ import annotations

import threading

from pgbraid.ingest import language


def test_concurrent_first_detections_share_one_model(monkeypatch):
    monkeypatch.setattr(language, "_loaded", [])
    found, start = [], threading.Barrier(8)

    def first() -> None:
        start.wait()
        found.append(language._identifier())

    threads = [threading.Thread(target=first) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and len({id(model) for model in found}) == 1
    assert language.detect("Die Katze sitzt auf der Matte und schläft", default="english") == "german"


def _texts() -> list[str]:
    """Openings of real documents (SciFact, Godot, ESET reports) and short texts in
    other languages and scripts, shouting, the empty string and a lone surrogate."""
    import gzip
    import json

    from tests.conftest import shared

    texts = []
    with gzip.open(shared("beir_scifact", "corpus.jsonl.gz"), "rt", encoding="utf-8") as lines:
        for _, line in zip(range(400), lines):
            doc = json.loads(line)
            texts += [doc["text"][:400], doc["title"]]
    for folder in ("godot_docs", "eset_ioc"):
        for path in sorted(shared(folder).rglob("*"))[:60]:
            if path.is_file() and path.suffix in (".rst", ".md", ".txt"):
                text = path.read_text(encoding="utf-8", errors="replace")
                texts += [text[i:i + 400] for i in range(0, min(len(text), 4000), 997)]
    return texts + [
        "Die Katze sitzt auf der Matte und schläft", "LE CHAT EST NOIR ET IL DORT",
        "El gato duerme en la alfombra roja", "Привет мир, как дела у тебя сегодня",
        "東京は日本の首都です", "Ο γάτος κοιμάται στο χαλί", "", "ok", "\ud800 x y z"]


def test_batch_detection_matches_the_model_text_by_text():
    """detect_many walks the model's automaton for a whole batch in numpy: each text gets
    exactly the language and confidence py3langid's own classify gives it, whether
    classified in a batch or alone."""
    texts = _texts()
    model = language._identifier()
    expected = [model.classify(text) for text in texts]
    assert language.classify_many(texts) == expected
    assert [language.classify_many([t])[0] for t in texts[::7]] == expected[::7]
    assert language.detect_many(texts, default="simple", min_confidence=0.5) == [
        language.detect(t, default="simple", min_confidence=0.5) for t in texts]
    assert {c for c, _ in expected} >= {"en", "de", "fr", "es", "ru", "el"}


def test_the_model_loads_from_its_uncompressed_copy_the_same(monkeypatch, tmp_path):
    """The first load writes the model without its xz into the cache directory; the next
    process loads that copy, and classifies exactly as the packed model does. A damaged
    copy or a directory that cannot be written falls back to the packed model."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    packed = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    packed.set_languages(sorted(language.CONFIGS))
    expected = [packed.classify(text) for text in _texts()]
    monkeypatch.setenv("PGBRAID_CACHE_DIR", str(tmp_path / "cache"))
    for round_ in ("writes the copy", "reads it"):
        monkeypatch.setattr(language, "_loaded", [])
        assert language.classify_many(_texts()) == expected, round_
    copies = list((tmp_path / "cache").glob("langid-*.npz"))
    assert len(copies) == 1 and not list((tmp_path / "cache").glob("*.part"))
    copies[0].write_bytes(b"not a zip file")
    monkeypatch.setattr(language, "_loaded", [])
    assert language.classify_many(_texts()) == expected
    (tmp_path / "blocked").write_text("a file where the directory should be")
    monkeypatch.setenv("PGBRAID_CACHE_DIR", str(tmp_path / "blocked" / "cache"))
    monkeypatch.setattr(language, "_loaded", [])
    assert language.classify_many(_texts()) == expected
