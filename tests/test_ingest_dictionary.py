"""fuzzy's dictionary as an ingest call writes it: one statement a batch, holding the
words of what the batch prepared, before it is written."""

from __future__ import annotations

import uuid

from pgbraid import pipelines
from pgbraid.ingest import batches, dictionary
from pgbraid.ingest.readers import SourceDocument


def test_a_batch_sends_its_words_once_and_a_failed_write_leaves_no_hit(client, monkeypatch):
    name = f"dict-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    sent: list[set[str]] = []
    add = dictionary.add
    monkeypatch.setattr(dictionary, "add", lambda conn, p, words: (sent.append(set(words)),
                                                                    add(conn, p, words)))
    docs = [
        # Fails when written (jsonb refuses \u0000): its words are in the dictionary
        # (added while the batch was prepared), where they find nothing.
        SourceDocument(id="a", text="Quokkas graze at dusk", metadata={"x": "\u0000"}),
        SourceDocument(id="b", text="Wombats dig at dusk"),
        SourceDocument(id="c", text="Quokkas and wombats, at dusk"),
    ]
    with client._session() as conn:
        target = pipelines.get(conn, name)
    report = batches.ingest(client._session, target, docs, batch_size=1)
    assert (report.added, len(report.failed)) == (2, 1)
    # Batches are prepared two at a time (batches.LEXICAL_PREPARERS): in either order.
    assert sorted(map(sorted, sent)) == sorted(map(sorted, [
        {"quokkas", "graze", "at", "dusk"}, {"wombats", "dig", "at", "dusk"},
        {"quokkas", "and", "wombats", "at", "dusk"}]))
    with client._session() as conn:
        held = {r[0] for r in conn.execute(
            "SELECT word FROM pgbraid.fuzzy_words WHERE pipeline_id = %s", (target.id,))}
        words = {w for (ws,) in conn.execute(
            "SELECT word_set FROM pgbraid.fragments WHERE pipeline_id = %s", (target.id,))
            for w in ws}
    assert words == {"wombats", "dig", "at", "dusk", "quokkas", "and"}
    assert held == words | {"graze"}
    # a's fragment was never written: its word finds nothing.
    assert client.search(name, "graze", type="fuzzy", params={"method": "words"}).hits == ()
