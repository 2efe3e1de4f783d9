"""Ingestion: formats, chunking, languages, versions, and failures that write nothing."""

from __future__ import annotations

import gzip
import json
import uuid

import pytest
from psycopg import sql

from pgbraid import FieldMap
from pgbraid.ingest.chunking import chunk
from pgbraid.ingest.language import detect

from .conftest import CITUS, shared


def _player_page() -> str:
    with gzip.open(shared("godot_docs", "godot_docs_rst.jsonl.gz"), "rt") as handle:
        for line in handle:
            record = json.loads(line)
            if record["path"].endswith("03.coding_the_player.rst"):
                return record["text"]
    raise AssertionError("page missing")


def test_rst_code_blocks_stay_whole():
    chunks = chunk(_player_page(), target=1000)
    texts = [c.text for c in chunks]
    # The whole _process body (GDScript and C# tabs) is one directive block: one fragment.
    holder = [t for t in texts if "func _process(delta):" in t]
    assert len(holder) == 1
    assert "velocity = velocity.normalized() * speed" in holder[0]
    assert "$AnimatedSprite2D.play()" in holder[0]
    # No fragment starts in the middle of an indented code block.
    assert all(not t.startswith((" ", "\t")) for t in texts)
    assert all(len(t) <= 2000 + 2 for t in texts)
    assert {c.section for c in chunks} >= {"Coding the player", "Choosing animations"}


def test_markdown_fences_are_not_split():
    code = "```python\n" + "\n".join(f"x{i} = {i}" for i in range(40)) + "\n\nprint(x1)\n```"
    text = "# Title\n\nIntro paragraph.\n\n" + code + "\n\nAfter the code.\n"
    chunks = chunk(text, target=200)
    assert any(code in c.text for c in chunks)


def test_language_detection_picks_the_configuration():
    assert detect("Eine Sicherung, die nie zurückgespielt wurde, ist nur eine Hoffnung.",
                  default="english") == "german"
    assert detect("日本語のテキストを検索します", default="english") == "simple"
    assert detect("AnimatedSprite2D", default="english") == "english"  # too short: default


def test_fragments_carry_their_detected_language(client, pipeline):
    report = client.ingest(pipeline, [
        {"id": "de", "text": "Erstellen Sie jede Nacht eine Basissicherung und archivieren Sie "
                             "die Transaktionsprotokolle fortlaufend."},
        {"id": "en", "text": "Take a base backup every night and archive the write-ahead log."}])
    assert report.added == 2
    hit = client.search(pipeline, "Wie erstelle ich jede Nacht eine Basissicherung?", params={"k": 1}).hits[0]
    assert hit.document_id == "de" and hit.language == "german"


def test_reingest_changed_text_makes_a_new_current_version(client, pipeline):
    client.ingest(pipeline, [{"id": "doc", "title": "Ops", "text": "The reactor uses graphite rods."}])
    first = client.search(pipeline, "graphite").hits
    assert [h.version for h in first] == [1]

    unchanged = client.ingest(pipeline, [{"id": "doc", "title": "Ops",
                                          "text": "The reactor uses graphite rods."}])
    assert (unchanged.unchanged, unchanged.updated, unchanged.fragments) == (1, 0, 0)

    changed = client.ingest(pipeline, [{"id": "doc", "title": "Ops",
                                        "text": "The reactor uses boron control rods."}])
    assert changed.updated == 1
    assert client.search(pipeline, "graphite").hits == ()
    (hit,) = client.search(pipeline, "boron").hits
    assert hit.version == 2
    old = client.document(pipeline, "doc", version=1)
    assert old["text"] == "The reactor uses graphite rods." and old["current"] is False
    assert old["valid_to"] is not None
    assert client.document(pipeline, "doc")["version"] == 2
    assert [v["version"] for v in client.versions(pipeline, "doc")] == [1, 2]


def test_a_document_failing_mid_write_leaves_nothing(client, pipeline):
    # jsonb rejects \u0000: the version insert fails after the document row was written.
    report = client.ingest(pipeline, [
        {"id": "good-1", "text": "alpha beta"},
        {"id": "bad", "text": "gamma delta", "metadata": {"note": "nul \u0000 here"}},
        {"id": "good-2", "text": "epsilon zeta"}])
    assert (report.added, len(report.failed)) == (2, 1)
    assert "bad" in report.failed[0].source
    with client.session() as conn:
        ids = {r[0] for r in conn.execute(
            "SELECT d.external_id FROM pgbraid.documents d JOIN pgbraid.pipelines p"
            " ON p.id = d.pipeline_id WHERE p.name = %s", (pipeline,))}
    assert ids == {"good-1", "good-2"}


def test_on_error_stop_keeps_what_came_before(client, pipeline):
    report = client.ingest(pipeline, [{"id": "a", "text": "one"}, {"id": "b", "text": "NUL \x00"},
                                      {"id": "c", "text": "three"}], on_error="stop")
    assert report.stopped and report.added == 1 and len(report.failed) == 1
    assert client.pipeline(pipeline).documents == 1


def test_batches_prepared_ahead_are_written_in_order(client):
    """Batches are prepared two at a time while one is written (batches.LEXICAL_PREPARERS):
    they are still written in the input's order, an id seen in an earlier batch becomes
    its next version, and with ``stop`` nothing after the failure is written, though the
    batches after it were prepared."""
    from pgbraid import pipelines
    from pgbraid.ingest import batches
    from pgbraid.ingest.readers import ReadError, SourceDocument

    name = f"ahead-{uuid.uuid4().hex[:8]}"
    client.create_pipeline(name, embedder="none")
    with client._session() as conn:
        target = pipelines.get(conn, name)
    docs = [SourceDocument(id=f"d{i % 7}", text=f"pump manual number {i}") for i in range(21)]
    report = batches.ingest(client._session, target, docs, batch_size=2)
    assert (report.added, report.updated) == (7, 14)
    for i in range(7):  # the last of d0 ... d6 is 14 ... 20, their third version
        doc = client.document(name, f"d{i}")
        assert (doc["version"], doc["text"]) == (3, f"pump manual number {14 + i}")
    stopped = [SourceDocument(id=f"s{i}", text=f"valve manual {i}") for i in range(9)]
    stopped[5] = ReadError("s5", "broken")
    report = batches.ingest(client._session, target, stopped, batch_size=2, on_error="stop")
    assert report.stopped and (report.added, len(report.failed)) == (5, 1)
    hits = client.search(name, "valve", type="bm25", params={"k": 20}).hits
    assert sorted(h.document_id for h in hits) == [f"s{i}" for i in range(5)]


def test_batch_sizes_ramp_up_and_the_last_is_split_between_the_preparers():
    """Batches double from an eighth of the size; what is left at the end comes in two
    halves (both preparers work on the call's tail) unless a half would be small."""
    from pgbraid.ingest.batches import _chunks

    sizes = [len(b) for b in _chunks(range(5183), 256, 2048, 2)]
    assert sizes == [256, 512, 1024, 2048, 672, 671]
    assert [len(b) for b in _chunks(range(1279), 256, 2048, 2)] == [256, 512, 511]
    assert [len(b) for b in _chunks(range(300), 256, 2048, 2)] == [256, 44]
    assert [len(b) for b in _chunks(range(5), 2, 2, 1)] == [2, 2, 1]
    assert list(_chunks(range(0), 256, 2048, 2)) == []


def test_jsonl_field_mapping_and_bad_lines(client, pipeline, tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "1", "title": "T", "text": "first text", "source": "x"}\n'
                     b'{"title": "no id", "text": "lost"}\n'
                     b'not json\n'
                     b'{"_id": "4", "text": "\xff\xfe broken"}\n'
                     b'{"_id": "5", "text": "fifth text", "language": "klingon"}\n')
    report = client.ingest(pipeline, [path], fields=FieldMap(id="_id"))
    assert report.added == 1
    messages = {f.source.rsplit(":", 1)[1]: f.message for f in report.failed}
    assert set(messages) == {"2", "3", "4", "5"}
    assert "id" in messages["2"] and "JSON" in messages["3"] and "UTF-8" in messages["4"]
    assert "language" in messages["5"]
    (hit,) = client.search(pipeline, "first").hits
    assert hit.metadata == {"source": "x"}


def test_text_files_and_folders(client, pipeline, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Alpha page\n\nAbout turbines.\n")
    (tmp_path / "docs" / "b.rst").write_text("Beta page\n=========\n\nAbout compressors.\n")
    (tmp_path / "docs" / "bad.txt").write_bytes(b"\xc3\x28 invalid")
    (tmp_path / "docs" / "skip.png").write_bytes(b"\x89PNG")
    report = client.ingest(pipeline, [tmp_path / "docs", tmp_path / "missing.txt"])
    assert report.added == 2
    assert {f.message for f in report.failed} == {"invalid UTF-8 at byte 0", "no such file or folder"}
    (hit,) = client.search(pipeline, "turbines").hits
    assert (hit.document_id, hit.title) == ("a.md", "Alpha page")


def test_a_batch_mixing_new_changed_repeated_and_failing_documents(client, pipeline):
    """New documents are written together, the others one by one, in the batch's order:
    an id twice in a batch is a new version, a failing one fails alone, and the BM25
    index matches the forward index."""
    from .test_bm25_concurrency import index_state

    client.ingest(pipeline, [{"id": "u", "text": "the old pump text"}])
    report = client.ingest(pipeline, [
        {"id": "n1", "text": "first pump manual", "classification": ["mixedbatch"]},
        {"id": "u", "text": "the new valve text"},
        {"id": "n1", "text": "second pump manual, revised"},
        {"id": "bad", "text": "never stored", "metadata": {"note": "nul \u0000 here"}},
        {"id": "n2", "text": "boiler pump notes"}])
    assert (report.added, report.updated, len(report.failed)) == (2, 2, 1)
    assert "bad" in report.failed[0].source
    n1 = client.document(pipeline, "n1")  # version 1 lived no time: same transaction
    assert (n1["version"], n1["text"]) == (2, "second pump manual, revised")
    hits = client.search(pipeline, "pump", type="bm25").hits
    assert sorted((h.document_id, h.version) for h in hits) == [("n1", 2), ("n2", 1)]
    assert client.search(pipeline, "pump", type="bm25", classification="mixedbatch").hits == ()
    assert client.search(pipeline, "old", type="bm25").hits == ()
    index_state(client, pipeline)


@pytest.mark.skipif(CITUS, reason="the workers plan full-text under RLS without the GIN index "
                    "(docs/scale.md, 3), as tests/test_scope.py's LEAKPROOF test says")
def test_a_small_ingest_leaves_fulltext_its_gin_index(client, pipeline, superuser):
    """A small ingest (under writes.ANALYZE_AFTER) merges fragments_tsv's GIN pending list
    too: the planner prices a pending list in, and a few hundred pending fragments made the
    statement fulltext sends scan the table instead of the index."""
    from pgbraid import pipelines
    from pgbraid.scope import Scope
    from pgbraid.strategies import fulltext

    report = client.ingest(pipeline, [{"id": str(i), "text": f"filler text number {i}"}
                                      for i in range(300)] + [{"id": "rare", "text": "a zygote"}])
    assert report.fragments == 301
    superuser.execute("ANALYZE pgbraid.fragments, pgbraid.versions, pgbraid.documents")
    with client.session() as conn:
        scope = Scope(pipelines.get(conn, pipeline).id, ("public",))
        search, params = fulltext.statement(scope)
        plan = "\n".join(r[0] for r in conn.execute(
            sql.SQL("EXPLAIN {}").format(search),
            {**params, "config": "english", "query": "zygote", "threshold": 0.0, "k": 10}))
    assert "fragments_tsv" in plan, plan
    assert [h.document_id for h in client.search(pipeline, "zygote", type="fulltext").hits] \
        == ["rare"]
    assert superuser.execute(
        "SELECT gin_clean_pending_list('pgbraid.fragments_tsv'::regclass)").fetchone()[0] == 0


def test_a_bulk_ingest_leaves_no_pending_gin_entries(client, pipeline, monkeypatch):
    """Searches right after a bulk load do not read GIN pending lists (writes.MERGE_PENDING);
    the dictionary's list is short (migration 046)."""
    from pgbraid import writes

    monkeypatch.setattr(writes, "ANALYZE_AFTER", 10)
    client.ingest(pipeline, [{"id": f"bulk-{i}", "text": f"pending list word{i} entry{i * 7}"}
                             for i in range(40)])
    with client._db.admin() as conn:
        left = conn.execute(
            "SELECT c.relname, gin_clean_pending_list(i.indexrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
            " WHERE a.amname = 'gin' AND i.indrelid IN ('pgbraid.fragments'::regclass,"
            " 'pgbraid.fuzzy_words'::regclass)").fetchall()
        options = conn.execute("SELECT reloptions FROM pg_class"
                               " WHERE oid = 'pgbraid.fuzzy_words_trgm'::regclass").fetchone()[0]
    assert len(left) >= 4 and all(pages == 0 for _, pages in left), left
    assert sorted(options) == ["fastupdate=on", "gin_pending_list_limit=256"]
