"""The CLI: exit codes, the one error shape, batch NDJSON, eval, and the demo."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pgbraid.cli import app
from pgbraid.evaluation import evaluate

runner = CliRunner()


def run(env, *args):
    return runner.invoke(app, list(args), env=env)


@pytest.fixture()
def cli_pipeline(env, pipeline, client):
    client.ingest(pipeline, [
        {"id": "d1", "title": "Pumps", "text": "centrifugal pump maintenance guide"},
        {"id": "d2", "title": "Valves", "text": "valve maintenance and inspection"},
        {"id": "d3", "title": "Boilers", "text": "boiler water treatment"}])
    return pipeline


@pytest.mark.parametrize("args, fragment", [
    (["search", "nope-missing", "x"], "does not exist"),
    (["search", "{p}", ""], "must not be empty"),
    (["search", "{p}", "x" * 10_001], "limit is 10000"),
    (["search", "{p}", "x", "--k", "-1"], "params.k"),
    (["search", "{p}", "x", "--k", "100000"], "params.k"),
    (["search", "{p}", "x", "--filter", "{not json"], "not valid JSON"),
    (["search", "{p}", "x", "--classification", "Bad Name"], "classification"),
    (["search", "{p}", "x", "--type", "warp"], "unknown search type"),
    (["search", "{p}", "x\x00y"], "NUL"),
])
def test_bad_input_is_one_error_shape_and_exit_2(env, cli_pipeline, args, fragment):
    args = [a.replace("{p}", cli_pipeline) for a in args]
    result = run(env, *args, "--json")
    assert result.exit_code == 2, result.stdout
    body = json.loads(result.stdout)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert fragment in body["error"]["message"]
    human = run(env, *args)
    assert human.exit_code == 2 and "error:" in human.stdout and len(human.stdout.splitlines()) <= 3


def test_search_human_output_is_a_table_with_trace(env, cli_pipeline):
    result = run(env, "search", cli_pipeline, "maintenance")  # the default type is auto
    assert result.exit_code == 0
    assert "d1" in result.stdout and "trace" in result.stdout and "bm25: ran, 2 hits" in result.stdout
    assert "similarity: skipped" in result.stdout  # no embedder: the plan says so and answers
    result = run(env, "search", cli_pipeline, "maintenance", "--type", "fulltext")
    assert "fulltext: ran, 2 hits" in result.stdout


def test_a_graph_search_shows_its_entities_when_they_have_no_documents(env, pipeline, client):
    """Hits are the documents attached to entities: a graph of bare entities answers no
    hits, and the text output must still show what was found (seed, entities, evidence)."""
    client.load_graph_records(pipeline, [("group", "G1", "Alpha", []), ("group", "G2", "Beta", []),
                                         ("technique", "T1", "One", []),
                                         ("technique", "T2", "Two", [])],
                              [("group", "G1", "uses", "technique", "T1", 1.0, True),
                               ("group", "G1", "uses", "technique", "T2", 1.0, True),
                               ("group", "G2", "uses", "technique", "T1", 1.0, True)])
    result = run(env, "search", pipeline, "Alpha", "--type", "graph",
                 "--params", '{"mode": "similar", "edge_type": "uses"}')
    assert result.exit_code == 0, result.stdout
    assert "no hits" in result.stdout and "seed group:G1 'Alpha'" in result.stdout
    assert "1. group:G2 'Beta'  score 0.5000  (1 shared)" in result.stdout
    result = run(env, "search", pipeline, "Beta", "--type", "graph",
                 "--params", '{"mode": "neighbours", "edge_types": ["uses"], "hops": 2}')
    assert "technique:T1 'One'" in result.stdout and "group:G2 -> technique:T1" in result.stdout


def test_batch_mode_prints_one_json_line_per_query(env, cli_pipeline, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "pump"}\n{"id": 2, "query": "boiler water"}\n'
                       '{"id": "q3", "query": ""}\n{"id": "q4", "query": "pump", "type": "bm25"}\n')
    result = run(env, "search", cli_pipeline, "--queries", str(queries), "--k", "2")
    assert result.exit_code == 2, result.stdout  # the batch ran whole; two lines failed
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["id"] for line in lines] == ["q1", "2", "q3", "q4"]
    assert lines[0]["hits"][0]["document_id"] == "d1"
    assert lines[1]["hits"][0]["document_id"] == "d3"
    assert lines[2]["error"]["code"] == "invalid_request"
    assert lines[3]["error"]["code"] == "invalid_request"  # a per-line type is not honoured:
    assert lines[3]["error"]["details"]["field"] == "type"  # refused by name, not ignored


def test_eval_prints_the_measures(env, cli_pipeline, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "pump maintenance"}\n{"_id": "2", "text": "boiler"}\n'
                       '{"_id": "3", "text": "unjudged"}\n')
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t1\n")
    result = run(env, "eval", cli_pipeline, "--queries", str(queries), "--qrels", str(qrels),
                 "--type", "fulltext", "--json")
    assert result.exit_code == 0, result.stdout
    body = json.loads(result.stdout)
    # q1 finds d1 at rank 1; q2 ("boiler") finds only d3, never the judged d2.
    assert body["queries"] == 2
    assert body["RR@10"] == pytest.approx(0.5) and body["nDCG@10"] == pytest.approx(0.5)


def test_eval_defaults_to_auto_like_search_and_prints_short_numbers(env, cli_pipeline, tmp_path):
    """eval defaulted to fulltext, which ANDs every word: SciFact scored nDCG@10 0.070 with
    the default, 0.684 with auto (trial2). Its default is search's now."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "pump maintenance schedule"}\n')  # no doc has all 3
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t1\n1\td3\t1\n")
    args = ["eval", cli_pipeline, "--queries", str(queries), "--qrels", str(qrels)]
    body = json.loads(run(env, *args, "--json").stdout)
    assert body["type"] == "auto" and body["RR@10"] == pytest.approx(1.0)
    assert json.loads(run(env, *args, "--type", "fulltext", "--json").stdout)["RR@10"] == 0
    text = run(env, *args).stdout
    assert "type: auto" in text
    ndcg = next(line for line in text.splitlines() if "nDCG@10" in line).split(": ")[1]
    assert ndcg == str(round(body["nDCG@10"], 4)), text


def test_evaluate_matches_hand_computed_values():
    qrels = {"q": {"a": 1, "b": 1}}
    perfect = evaluate(qrels, {"q": {"a": 2.0, "b": 1.0, "c": 0.5}})
    assert perfect["nDCG@10"] == pytest.approx(1.0) and perfect["R@100"] == 1.0
    late = evaluate(qrels, {"q": {"c": 3.0, "a": 2.0}})
    # DCG = 1/log2(3); IDCG = 1 + 1/log2(3)
    assert late["nDCG@10"] == pytest.approx(0.6309 / 1.6309, abs=1e-4)
    assert late["RR@10"] == pytest.approx(0.5) and late["R@100"] == pytest.approx(0.5)


def test_ingest_reports_failures_and_exit_code(env, pipeline, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "text": "ok"}\n{"text": "no id"}\n')
    result = run(env, "ingest", pipeline, str(path), "--json")
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 1 and body["added"] == 1 and len(body["failed"]) == 1
    assert body["failed"][0]["source"].endswith("c.jsonl:2")


def test_pipeline_commands(env):
    created = run(env, "pipeline", "create", "cli-made", "--language", "german", "--json")
    assert created.exit_code == 0 and json.loads(created.stdout)["language"] == "german"
    again = run(env, "pipeline", "create", "cli-made", "--json")
    assert again.exit_code == 2 and "already exists" in json.loads(again.stdout)["error"]["message"]
    listed = json.loads(run(env, "pipeline", "list", "--json").stdout)
    assert "cli-made" in {p["name"] for p in listed}
    bad = run(env, "pipeline", "create", "x", "--language", "elvish", "--json")
    assert bad.exit_code == 2


def test_demo_runs_and_explains(env):
    result = run(env, "demo")
    assert result.exit_code == 0, result.stdout
    out = result.stdout
    assert "credential-rotation.md" in out and "datensicherung.md" in out
    assert "tsquery (german)" in out
    assert "no fragment in scope contains invoic" in out
    paraphrase = out.split("similarity: a paraphrase")[1]
    assert paraphrase.index("credential-rotation.md") < paraphrase.index("trace")
    assert "bm25 #1, similarity #1" in out and "fusion: rrf k=60" in out
    again = run(env, "demo")
    assert "unchanged 6" in again.stdout


@pytest.mark.parametrize("args, field", [
    (["search", "notes", "x", "--k", "abc"], "k"),
    (["search", "notes", "x", "--bogus", "1"], "bogus"),
    (["search"], "pipeline"),
])
def test_usage_errors_under_json_are_the_one_error_shape(tmp_path, args, field):
    """Typer's own parsing errors (before any command runs) answer the shape under --json,
    through the installed entry point, and one line without it (test_cli_input)."""
    import os
    import subprocess
    import sys

    from .serving import SRC
    env = {**os.environ, "PYTHONPATH": str(SRC), "PGBRAID_DATA_DIR": str(tmp_path / "none")}
    entry = [sys.executable, "-c", "from pgbraid.cli import main; main()"]
    result = subprocess.run(entry + args + ["--json"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    body = json.loads(result.stdout)
    assert body["error"]["code"] == "invalid_request"
    assert body["error"]["details"] == {"field": field}
    human = subprocess.run(entry + args, capture_output=True, text=True, env=env, timeout=120)
    assert human.returncode == 2 and human.stdout.startswith("error: ")
    assert len(human.stdout.splitlines()) == 1


def test_a_body_that_does_not_validate_reads_as_over_http(env, cli_pipeline):
    """The message and field HTTP answers for {"query": ""} (test_http_errors), not
    pydantic's own text."""
    result = run(env, "search", cli_pipeline, "", "--json")
    error = json.loads(result.stdout)["error"]
    assert error["message"] == "query: must not be empty"
    assert error["details"]["field"] == "query"
    assert error["details"]["errors"] == [{"field": "query", "message": "query: must not be empty"}]


def test_the_next_page_cursor_prints_on_one_line_whatever_the_width(env, cli_pipeline):
    """The table's last line is copied as it is: a cursor longer than the terminal is
    not wrapped (it was split at 80 columns when piped)."""
    paged = ["--type", "bm25", "--k", "1", "--params", '{"offset": 0}']
    result = run(env, "search", cli_pipeline, "maintenance", *paged)
    line = next(x for x in result.stdout.splitlines() if x.startswith("next page: --cursor "))
    cursor = line.removeprefix("next page: --cursor ")
    assert len(line) > 80 or " " not in cursor
    following = run(env, "search", cli_pipeline, "maintenance", "--type", "bm25", "--k", "1",
                    "--cursor", cursor)
    assert following.exit_code == 0, following.stdout


def test_an_ingest_failing_every_record_names_20_hints_the_id_field_and_writes_nothing(
        env, pipeline, client, tmp_path):
    corpus = tmp_path / "beir.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "title": "t", "text": f"body {i}"}) + "\n"
                              for i in range(25)))
    result = run(env, "ingest", pipeline, str(corpus))
    assert result.exit_code == 1, result.stdout
    failed = [line for line in result.stdout.splitlines() if line.startswith("failed ")]
    assert len(failed) == 20
    assert "missing or empty id field 'id' (the record has '_id': --id-field names it)" in failed[0]
    assert "... and 5 more failures (--json lists every one)" in result.stdout
    assert "added 0" in result.stdout and "failed 25" in result.stdout
    listed = run(env, "ingest", pipeline, str(corpus), "--json")
    assert len(json.loads(listed.stdout)["failed"]) == 25
