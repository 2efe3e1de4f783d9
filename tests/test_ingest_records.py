"""Records given as data (ingest/records.py): a dict given to ``client.ingest`` follows
the schema of an HTTP ingestion body, with the same error for the same record, and a
refused call writes nothing; a file's unmapped fields still join the metadata."""

from __future__ import annotations

import json

import pytest

import pgbraid
from pgbraid import FieldMap, InvalidRequest
from pgbraid.api.documents import parse_records

UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x"
GOOD = {"id": "fine", "text": "a pump that works"}
# Each refused whole, before anything is written, over HTTP and from Python alike.
REFUSED = [
    ([GOOD, {"id": "b", "text": "x", "bogus": 1}], "record 2: unknown field 'bogus'", "bogus"),
    ([{"id": "p1", "text": "hello", "colour": "red"}], "record 1: unknown field 'colour'",
     "colour"),
    ([GOOD, {"id": "b", "text": 5}], "record 2: text: Input should be a valid string", "text"),
    ([{"id": "b"}, GOOD], "record 1: text: Field required", "text"),
    ([{"text": "no id"}], "record 1: id: Field required", "id"),
    ([{"id": True, "text": "x"}], "record 1: id: must be a string or an integer", "id"),
    ([{"id": 1.0, "text": "x"}], "record 1: id: must be a string or an integer", "id"),
    ([{"id": "a", "text": "x", "metadata": ["team"]}], "record 1: metadata:", "metadata"),
    ([{"id": "a/../b", "text": "x"}], "record 1: id 'a/../b' has an empty", "id"),
]


@pytest.fixture()
def offline():
    with pgbraid.connect(dsn=UNREACHABLE, pool_timeout=1) as client:
        yield client
        assert client._db._pool is None  # refused before anything was sent


def _http_error(body: list) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_records(json.dumps(body).encode(), "application/json")
    return caught.value


@pytest.mark.parametrize("body, message, field", REFUSED)
def test_a_record_http_refuses_python_refuses_alike_unsent(offline, body, message, field):
    with pytest.raises(InvalidRequest) as caught:
        offline.ingest("docs", body)
    assert caught.value.message.startswith(message)
    assert caught.value.details["field"] == field
    assert caught.value.message == _http_error(body).message


def test_an_unknown_field_says_where_it_belongs(offline):
    with pytest.raises(InvalidRequest, match=r"^record 1: unknown field 'bogus' \(extra fields "
                                             r"belong in metadata\)$"):
        offline.ingest("docs", [{"id": "a", "text": "x", "bogus": 1}])


def test_a_list_is_refused_whole_and_a_generator_streams(client, pipeline):
    """A list is checked whole first: one bad record refuses the call and nothing is
    written. A generator is never held whole: a bad record fails alone, named, and the
    records around it are written."""
    good = [{"id": f"d{i}", "text": f"pump {i}"} for i in range(200)]  # 4 batches
    bad = {"id": "late", "text": "x", "tags": ["a"]}
    with pytest.raises(InvalidRequest, match="record 201: unknown field 'tags'"):
        client.ingest(pipeline, [*good, bad])
    assert client.pipeline(pipeline).documents == 0
    assert client.documents(pipeline)["documents"] == []

    def records():
        yield from good
        yield bad
        yield {"id": "after", "text": "valve"}

    report = client.ingest(pipeline, records())
    assert report.added == 201
    assert [(f.source, f.message) for f in report.failed] == [
        ("record 201", "unknown field 'tags' (extra fields belong in metadata)")]
    assert client.pipeline(pipeline).documents == 201


def test_what_the_schema_cannot_see_still_fails_alone(client, pipeline):
    report = client.ingest(pipeline, [{"id": "nul", "text": "x\x00"}, {"id": "empty", "text": ""},
                                      GOOD])
    assert report.added == 1 and [f.source for f in report.failed] == [
        "record 'nul'", "record 'empty'"]


def test_a_field_map_renames_the_schema_and_refuses_the_rest(offline, client, pipeline):
    fields = FieldMap(id="_id", text="body,notes", metadata="meta")
    with pytest.raises(InvalidRequest, match=r"record 1: unknown field 'id' \(extra fields "
                                             r"belong in meta\)"):
        offline.ingest("docs", [{"_id": "a", "body": "x", "id": "b"}], fields=fields)
    with pytest.raises(InvalidRequest, match="record 1: notes: Input should be a valid string"):
        offline.ingest("docs", [{"_id": "a", "body": "x", "notes": 3}], fields=fields)
    with pytest.raises(InvalidRequest, match="record 1: body, notes: Field required"):
        offline.ingest("docs", [{"_id": "a"}], fields=fields)
    report = client.ingest(pipeline, [{"_id": "a", "notes": "pump notes", "meta": {"k": 1}}],
                           fields=fields)
    assert report.added == 1 and client.document(pipeline, "a")["metadata"] == {"k": 1}


@pytest.mark.parametrize("source, fragment", [
    ("notes.jsonl", "not one str: wrap it in a list"),
    ({"id": "a", "text": "x"}, "not one dict: wrap it in a list"),
    ([GOOD, 7], "record 2: a document is a dict (or a path to a file or folder), not int"),
])
def test_a_source_that_is_no_list_of_records_or_paths_is_refused(offline, source, fragment):
    with pytest.raises(InvalidRequest) as caught:
        offline.ingest("docs", source)
    assert fragment in caught.value.message


def test_a_file_s_unmapped_fields_still_join_the_metadata(client, pipeline, tmp_path):
    """README "Ingestion": files are data as it ships."""
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"id": "p1", "text": "hello", "colour": "red",
                                "metadata": {"team": "ops"}}) + "\n")
    report = client.ingest(pipeline, [path])
    assert report.added == 1 and not report.failed
    assert client.document(pipeline, "p1")["metadata"] == {"team": "ops", "colour": "red"}
