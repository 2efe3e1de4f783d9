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
