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


# -- messages that name the CLI's own commands -------------------------------------------

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
