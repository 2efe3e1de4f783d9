"""Ingestion formats users have: CSV, TSV, JSON arrays and objects holding one, several
text fields, a title field, a searchable id; bad files write nothing and say where."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from pgbraid import FieldMap
from pgbraid.cli import app

from .conftest import shared

KEV = shared("cisa_kev", "known_exploited_vulnerabilities.json.gz")
KEV_FIELDS = FieldMap(id="cveID", title="vulnerabilityName", text="shortDescription,notes",
                      records="vulnerabilities", index_id=True)
runner = CliRunner()


def documents(client, pipeline) -> set[str]:
    return {d["document_id"] for d in client.documents(pipeline, limit=1000)["documents"]}


def test_kev_json_as_it_ships_finds_the_cve_first_with_auto(client, pipeline):
    report = client.ingest(pipeline, [KEV], fields=KEV_FIELDS)
    assert report.failed == [] and report.added == 1404
    hits = client.search(pipeline, "CVE-2021-44228", type="auto").hits
    assert hits[0].document_id == "CVE-2021-44228"
    assert hits[0].title == "CVE-2021-44228: Apache Log4j2 Remote Code Execution Vulnerability"
    assert "JNDI" in hits[0].page_content and "nvd.nist.gov" in hits[0].page_content
    assert hits[0].metadata["vendorProject"] == "Apache"  # unmapped fields: metadata


def test_kev_through_the_cli(env, pipeline):
    ingest = runner.invoke(app, ["ingest", pipeline, str(KEV), "--id-field", "cveID",
                                 "--title-field", "vulnerabilityName", "--text-field",
                                 "shortDescription,notes", "--records", "vulnerabilities",
                                 "--index-id", "--json"], env=env)
    assert ingest.exit_code == 0, ingest.stdout
    assert json.loads(ingest.stdout)["added"] == 1404
    search = runner.invoke(app, ["search", pipeline, "CVE-2021-44228", "--type", "auto",
                                 "--json"], env=env)
    assert search.exit_code == 0, search.stdout
    assert json.loads(search.stdout)["hits"][0]["document_id"] == "CVE-2021-44228"


def test_kev_without_records_is_one_failure_naming_the_fix(env, pipeline):
    """One file that is no array of records is reported once, with the option that reads
    it (it was two failures: the error, then "nothing of this file was ingested")."""
    for args in ([], ["--id-field", "cveID", "--text-field", "shortDescription"]):
        result = runner.invoke(app, ["ingest", pipeline, str(KEV), *args, "--json"], env=env)
        assert result.exit_code == 1, result.stdout
        body = json.loads(result.stdout.strip().splitlines()[-1])
        assert body["added"] == 0 and len(body["failed"]) == 1, body["failed"]
        (failure,) = body["failed"]
        assert failure["source"] == str(KEV)
        assert "an array under 'vulnerabilities': pass --records vulnerabilities" in \
            failure["message"] and "nothing of this file was ingested" in failure["message"]
    text = runner.invoke(app, ["ingest", pipeline, str(KEV)], env=env)
    assert "failed 1," in text.stdout and text.stdout.count("--records vulnerabilities") == 1


@pytest.mark.parametrize("data, hint", [
    ({"meta": {"n": 2}, "items": [{"id": "1", "text": "x"}]}, "pass --records items"),
    ({"a": [{"id": "1"}], "b": [{"id": "2"}], "c": [1]}, "pass --records with one of: a, b"),
    ({"data": {"items": [{"id": "1", "text": "x"}]}}, "pass --records data.items"),
    ({"count": 3}, "no array of records in it"),
])
def test_an_object_without_records_names_the_arrays_it_holds(client, pipeline, tmp_path, data,
                                                             hint):
    path = tmp_path / "object.json"
    path.write_text(json.dumps(data))
    report = client.ingest(pipeline, [path])
    assert len(report.failed) == 1 and hint in report.failed[0].message, report.failed


def test_without_index_id_the_id_is_only_an_id(client, pipeline, tmp_path):
    path = tmp_path / "kev.json"
    path.write_text(json.dumps([{"cveID": "CVE-2099-0001", "shortDescription": "a heap overflow"}]))
    client.ingest(pipeline, [path], fields=FieldMap(id="cveID", text="shortDescription"))
    assert client.search(pipeline, "CVE-2099-0001", type="bm25").hits == ()
    assert client.document(pipeline, "CVE-2099-0001")["title"] is None


def test_csv_and_tsv_with_a_header(client, pipeline, tmp_path):
    (tmp_path / "a.csv").write_text('name,body,team\nr1,"pumps, valves\nand seals",ops\n'
                                    'r2,boiler water treatment,plant\n', encoding="utf-8")
    with gzip.open(tmp_path / "b.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("name\tbody\tteam\nr3\tcooling tower drift\tplant\n")
    report = client.ingest(pipeline, [tmp_path], fields=FieldMap(id="name", text="body"))
    assert report.failed == [] and report.added == 3
    doc = client.document(pipeline, "r1")
    assert doc["text"] == "pumps, valves\nand seals" and doc["metadata"]["team"] == "ops"
    assert client.search(pipeline, "cooling drift", type="bm25").hits[0].document_id == "r3"


@pytest.mark.parametrize("name, content, fields, where, fragment", [
    ("bad.csv", 'id,text\n1,fine\n2,"never closed\n', FieldMap(), "bad.csv:3", "malformed CSV"),
    ("short.csv", "id,text\n1,fine\n2\n", FieldMap(), "short.csv:3", "1 fields, the header has 2"),
    ("noid.csv", "key,text\n1,fine\n", FieldMap(), "noid.csv:1", "no column 'id'"),
    ("empty.csv", "id,text,notes\n1,fine,\n2,,\n", FieldMap(text="text,notes"), "empty.csv:3",
     "missing or empty text fields 'text', 'notes'"),
    ("bad.json", '[{"id": "1", "text": "fine"},\n {"id": "2", "text": }]', FieldMap(),
     "bad.json:2", "malformed JSON"),
    ("obj.json", '{"items": [{"id": "1", "text": "fine"}]}', FieldMap(), "obj.json",
     "pass --records items"),
    ("noid.json", '[{"id": "1", "text": "fine"}, {"text": "no id"}]', FieldMap(),
     "noid.json: array record 2", "missing or empty id field 'id'"),
])
def test_a_bad_file_says_where_and_writes_nothing(client, pipeline, tmp_path, name, content,
                                                  fields, where, fragment):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    report = client.ingest(pipeline, [path], fields=fields)
    assert report.added == 0 and documents(client, pipeline) == set()
    messages = [(f.source, f.message) for f in report.failed]
    assert any(source.endswith(where) and fragment in message for source, message in messages), messages
    assert len(messages) == 1  # one problem, one failure: no separate "nothing written" line
    assert messages[0][1].endswith("(nothing of this file was ingested)")


def test_failed_counts_every_bad_record_of_a_file(client, pipeline, tmp_path):
    """A CSV with 30 rows without text: 30 failures, one a row (the CLI's text names the
    first 20), not 20 and a summary line."""
    path = tmp_path / "many.csv"
    path.write_text("id,text\n" + "".join(f"{i},\n" for i in range(30)), encoding="utf-8")
    report = client.ingest(pipeline, [path])
    assert report.added == 0 and len(report.failed) == 30
    assert [f.source for f in report.failed] == [f"{path}:{i + 2}" for i in range(30)]


def test_a_folder_reports_what_it_skipped(env, client, pipeline, tmp_path):
    (tmp_path / "a.md").write_text("# Pumps\n\nCentrifugal pump maintenance.\n")
    (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.md").write_text("secret notes")
    report = client.ingest(pipeline, [tmp_path])
    assert report.added == 1 and report.failed == []
    assert {(s.source.split("/")[-1], s.reason.split(" (")[0]) for s in report.skipped} == {
        ("scan.pdf", "not a format we read"), ("b.md", "hidden file")}
    result = runner.invoke(app, ["ingest", pipeline, str(tmp_path)], env=env)
    assert result.exit_code == 0 and "skipped" in result.stdout and "scan.pdf" in result.stdout


def test_field_maps_are_checked():
    with pytest.raises(Exception, match="text field"):
        FieldMap(text=" , ")
    with pytest.raises(Exception, match="records"):
        FieldMap(records="a..b")
