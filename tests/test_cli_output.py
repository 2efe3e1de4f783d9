"""The CLI's human output prints stored data as it is: never as rich markup."""

from __future__ import annotations

from .test_cli import run

# A title that closes a tag nobody opened (rich: MarkupError), and text and metadata
# that would restyle the terminal (a hyperlink, hidden text) if read as markup.
TITLE = "[/bold] notice"
TEXT = "pump [link=http://evil.example]valve[/link] [black on black]hidden[/]"
META = "[red]owner[/red]"


def test_markup_in_stored_data_prints_as_text(env, pipeline, client):
    client.ingest(pipeline, [{"id": "m[1]", "title": TITLE, "text": TEXT,
                              "metadata": {"note": META}}])
    found = run(env, "search", pipeline, "pump valve", "--type", "bm25")
    assert found.exit_code == 0, found.stdout
    assert TITLE in found.stdout and "m[1]" in found.stdout
    assert "[link=http://evil.example]valve[/link]" in found.stdout

    shown = run(env, "document", pipeline, "m[1]")
    assert shown.exit_code == 0, shown.stdout
    assert TITLE in shown.stdout and TEXT in shown.stdout and META in shown.stdout


def test_markup_in_a_query_and_a_failed_record_prints_as_text(env, pipeline, tmp_path):
    missing = run(env, "search", pipeline, "[/red] nothing", "--type", "fulltext")
    assert missing.exit_code == 0, missing.stdout
    assert "'[/red] nothing'" in missing.stdout

    records = tmp_path / "bad.jsonl"
    records.write_text('{"id": "x", "text": "y", "classification": ["[/bold]"]}\n')
    report = run(env, "ingest", pipeline, str(records))
    assert report.exit_code == 1, report.stdout
    assert "['[/bold]']" in report.stdout


def test_mappings_print_values_as_a_reader_expects_them_not_as_python(env, pipeline, client):
    client.ingest(pipeline, [{"id": "d1", "text": "pump", "metadata": {"team": "ops"}}])
    shown = run(env, "pipeline", "show", pipeline)
    assert shown.exit_code == 0, shown.stdout
    assert "embedder: -" in shown.stdout and "encrypted_metadata: -" in shown.stdout
    assert "None" not in shown.stdout and "()" not in shown.stdout
    document = run(env, "document", pipeline, "d1")
    assert 'metadata: {"team": "ops"}' in document.stdout and "classifications: public" in document.stdout


def test_control_characters_in_stored_data_never_reach_the_terminal(env, pipeline, client):
    link, clear, title_bar = "\x1b]8;;http://evil.example/\x07", "\x1b[2J", "\x1b]0;pwned\x07"
    client.ingest(pipeline, [{"id": "c1", "title": f"pump {link}manual\x1b]8;;\x07",
                              "text": f"pump {clear}valve{title_bar}\rfake line",
                              "metadata": {"note": "\x1b[31mred\x1b[0m"}}])
    for args in (["search", pipeline, "pump valve", "--type", "bm25"],
                 ["document", pipeline, "c1"], ["document", "list", pipeline]):
        shown = run(env, *args)
        assert shown.exit_code == 0, shown.stdout
        assert "pump" in shown.stdout
        assert not any(c in shown.stdout for c in "\x1b\x07\r"), repr(shown.stdout)
