"""The CLI checks its input as HTTP does, says what is wrong in one line, and names CLI
commands in what it tells a CLI user (a newcomer's trial, issue list 'cli')."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pgbraid import errors
from pgbraid.cli import app
from pgbraid.errors import InvalidRequest, describe

from .test_cli import cli_pipeline, run  # noqa: F401  (fixture)

BM25 = ["--type", "bm25", "--json"]


# -- params.k: the same check as HTTP's --------------------------------------------------

def test_params_k_sets_the_number_of_hits(env, cli_pipeline):
    """--params '{"k": 1}' gave 5 hits: the --k default overwrote it."""
    result = run(env, "search", cli_pipeline, "maintenance", *BM25, "--params", '{"k": 1}')
    assert result.exit_code == 0, result.stdout
    assert len(json.loads(result.stdout)["hits"]) == 1
    both = run(env, "search", cli_pipeline, "maintenance", *BM25, "--k", "1",
               "--params", '{"k": 1}')
    assert both.exit_code == 0 and len(json.loads(both.stdout)["hits"]) == 1
    default = run(env, "search", cli_pipeline, "maintenance", *BM25)
    assert len(json.loads(default.stdout)["hits"]) == 2


@pytest.mark.parametrize("k", ['"1"', "true", "1.5", "null"])
def test_a_params_k_that_is_not_an_integer_is_refused_as_python_and_http_refuse_it(
        env, client, cli_pipeline, k):
    """{"k": "1"} and {"k": true} were accepted silently (the --k default replaced them)."""
    params = '{"k": %s}' % k
    result = run(env, "search", cli_pipeline, "maintenance", *BM25, "--params", params)
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    with pytest.raises(InvalidRequest) as raised:  # the engine's check, which HTTP answers
        client.search(cli_pipeline, "maintenance", type="bm25", params=json.loads(params))
    assert error == describe(raised.value).body()["error"]
    assert error["message"].startswith("params.k must be an integer from 0 to")


def test_k_given_twice_with_two_values_is_refused_by_name(env, cli_pipeline):
    result = run(env, "search", cli_pipeline, "maintenance", *BM25, "--k", "2",
                 "--params", '{"k": 1}')
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["details"]["field"] == "k"
    assert "--k 2" in error["message"] and "params.k 1" in error["message"]


# -- --queries: every bad line its own error; the batch goes on --------------------------

def test_every_bad_queries_line_is_its_own_error_and_the_batch_goes_on(env, cli_pipeline, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "pump"}\n'
                       'not json\n'
                       '{"id": "q3"}\n'
                       '[1, 2]\n'
                       '{"query": "valve"}\n'
                       '\n'
                       '{"id": "q7", "query": "boiler", "extra": 1}\n'
                       '{"id": "q8", "query": "boiler water"}\n')
    result = run(env, "search", cli_pipeline, "--queries", str(queries), "--k", "1")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["id"], "error" in line) for line in lines] == [
        ("q1", False), (None, True), ("q3", True), (None, True), (None, True), ("q7", True),
        ("q8", False)]
    errors_ = [line for line in lines if "error" in line]
    assert [line["line"] for line in errors_] == [2, 3, 4, 5, 7]
    assert all(line["error"]["code"] == "invalid_request" for line in errors_)
    assert "not a JSON line" in errors_[0]["error"]["message"]
    assert "needs an id and a query" in errors_[1]["error"]["message"]
    assert errors_[4]["error"]["details"]["field"] == "extra"
    assert lines[-1]["hits"][0]["document_id"] == "d3"
    assert result.exit_code == 2, "a batch with a failed line must not exit 0"


def test_a_clean_batch_exits_0(env, cli_pipeline, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "pump"}\n{"_id": "q2", "text": "valve"}\n')
    result = run(env, "search", cli_pipeline, "--queries", str(queries))
    assert result.exit_code == 0, result.stdout
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["q1", "q2"]


def test_a_query_and_a_queries_file_together_are_refused_by_name(env, cli_pipeline, tmp_path):
    """The QUERY was silently ignored."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "pump"}\n')
    result = run(env, "search", cli_pipeline, "valve", "--queries", str(queries))
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["details"]["field"] == "queries" and "QUERY" in error["message"]


def test_a_cursor_with_a_queries_file_is_refused_by_name(env, cli_pipeline, tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "q1", "query": "pump"}\n')
    result = run(env, "search", cli_pipeline, "--queries", str(queries), "--cursor", "c")
    assert result.exit_code == 2, result.stdout
    assert json.loads(result.stdout)["error"]["details"]["field"] == "cursor"


def test_eval_refuses_a_params_k_other_than_its_depth(env, cli_pipeline, tmp_path):
    """eval's --depth is the number of hits: a params.k of another value was overwritten."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "1", "text": "pump"}\n')
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n")
    args = ["eval", cli_pipeline, "--queries", str(queries), "--qrels", str(qrels), "--json"]
    refused = run(env, *args, "--params", '{"k": 10}')
    assert refused.exit_code == 2, refused.stdout
    error = json.loads(refused.stdout)["error"]
    assert error["details"]["field"] == "k" and "--depth 100" in error["message"]
    assert run(env, *args, "--depth", "10", "--params", '{"k": 10}').exit_code == 0


# -- serve: the port checked before anything starts --------------------------------------

@pytest.mark.parametrize("command", ["serve", "embeddings-serve"])
@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_refused_before_the_server_starts(env, command, port):
    """serve --port 99999 started the app, then ended in a 73-line OverflowError, exit 70."""
    result = run(env, command, "--port", port)
    assert result.exit_code == 2, result.stdout
    assert result.stdout == f"error: --port must be an integer from 0 to 65535, got {port}\n"


# -- messages that name the CLI's own commands -------------------------------------------

def test_keys_create_without_permissions_says_they_are_required(env):
    result = run(env, "keys", "create", "--json")
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["details"]["field"] == "permissions"
    assert "--permissions is required" in error["message"] and "''" not in error["message"]
    empty = run(env, "keys", "create", "--permissions", " ", "--json")
    assert "--permissions is required" in json.loads(empty.stdout)["error"]["message"]
    assert run(env, "keys", "create", "--permissions", "read", "--json").exit_code == 0


def test_a_graph_search_without_edges_names_edges_load_to_a_cli_user(env, client, cli_pipeline):
    result = run(env, "search", cli_pipeline, "pump", "--type", "graph")
    assert result.exit_code == 2, result.stdout
    assert "pgbraid edges load" in result.stdout and "POST /" not in result.stdout
    with pytest.raises(InvalidRequest) as raised:  # Python and HTTP keep theirs
        client.search(cli_pipeline, "pump", type="graph")
    assert "POST /pipelines/{p}/graph, client.load_graph" in raised.value.message
    assert describe(raised.value).message == raised.value.message == str(raised.value)
    assert "pgbraid edges load" in describe(raised.value, interface="cli").message


def test_every_remedy_is_said_for_every_interface_and_names_a_real_cli_command():
    """The hints per interface live in one table: a CLI hint names a command that exists."""
    import typer.main

    root = typer.main.get_command(app)
    for name, said in errors.REMEDIES.items():
        assert set(said) == set(errors.INTERFACES), name
        words = said["cli"].split()
        assert words[0] == "pgbraid", name
        command = root
        for word in words[1:]:
            if not hasattr(command, "get_command") or word.isupper():
                break
            command = command.get_command(None, word)
            assert command is not None, f"{name}: no command {said['cli']!r}"
        assert not hasattr(command, "get_command"), f"{name}: {said['cli']!r} is a group"


def test_ingest_into_a_missing_pipeline_says_so_before_any_progress_bar(env, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "text": "ok"}\n')
    result = run(env, "ingest", "nosuch", str(path))
    assert result.exit_code == 2
    assert result.stdout == "error: pipeline 'nosuch' does not exist\n"


# -- usage errors: one line, as the README says ------------------------------------------

def _entry(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    from .serving import SRC
    env = {**os.environ, "PYTHONPATH": str(SRC), "PGBRAID_DATA_DIR": str(tmp_path / "none"),
           "COLUMNS": "60"}
    return subprocess.run([sys.executable, "-c", "from pgbraid.cli import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("args, said", [
    (["search", "notes", "x", "--k", "abc"], "Invalid value for '--k'"),
    (["search", "notes", "x", "--bogus", "1"], "No such option: --bogus"),
    (["search"], "Missing argument 'pipeline'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
])
def test_a_usage_error_prints_one_line(tmp_path, args, said):
    result = _entry(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stdout.splitlines()) == 1 and not result.stderr, (result.stdout,
                                                                        result.stderr)
    assert result.stdout.startswith("error: ") and said in result.stdout
    assert result.stdout.endswith(" --help')\n")  # where to look next


def test_help_and_no_arguments_still_print_the_help(tmp_path):
    for args in ([], ["keys"], ["search", "--help"]):
        result = _entry(args, tmp_path)
        assert "Usage:" in result.stdout + result.stderr, args
        assert result.returncode == (0 if "--help" in args else 2), args
