"""``pgbraid mcp`` as a subprocess, talked to with the MCP SDK's own client; and
``pgbraid serve --mcp`` over streamable HTTP."""

from __future__ import annotations

import json
import os
import sys

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from pgbraid.api.schemas import GroundBody, SearchBody
from pgbraid.integrations.mcp_tools import TOOLS

from .serving import SRC, Served
from .test_fulltext import PLAYER_PAGE, godot  # noqa: F401  (module fixture)
from .test_grounding import suppliers  # noqa: F401  (module fixture)

QUERY = "AnimatedSprite2D play animation"


def stdio(data_dir, key: str | None = None, *args: str) -> StdioServerParameters:
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PYTHONPATH": path}
    if key:
        env["PGBRAID_API_KEY"] = key
    return StdioServerParameters(command=sys.executable, args=["-m", "pgbraid", "mcp", *args],
                                 env=env)


def talk(server, *calls):
    """Open one MCP session, list the tools, make the calls; (tools, results)."""
    async def main():
        async with Client(server) as client:
            tools = await client.list_tools()
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return tools, results

    return anyio.run(main)


@pytest.fixture()
def reader_key(client, godot):  # noqa: F811
    key = client.create_key(pipeline="*", permissions="read,execute")
    yield key
    client.revoke_key(key["id"])


def test_stdio_lists_tools_and_answers_search_ground_and_documents(
        data_dir, client, godot, suppliers, reader_key):  # noqa: F811
    entity, _, rows = suppliers
    name, state = rows[10]
    tools, (found, grounded, missing, document, listed) = talk(
        stdio(data_dir, reader_key["key"]),
        ("search", {"pipeline": godot, "query": QUERY, "type": "fulltext", "params": {"k": 5}}),
        ("ground", {"entity": entity, "value": name, "scope": {"state": state}}),
        ("ground", {"entity": entity, "value": "Zqxjv Wplkm", "scope": {"state": state}}),
        ("get_document", {"pipeline": godot, "document_id": PLAYER_PAGE, "version": 1}),
        ("list_pipelines", {}))
    by_name = {tool.name: tool for tool in tools.tools}
    assert set(by_name) == {"search", "ground", "get_document", "list_pipelines"}
    search_schema = by_name["search"].input_schema
    assert search_schema["additionalProperties"] is False
    assert set(search_schema["properties"]) == {*SearchBody.model_json_schema()["properties"],
                                                "pipeline"}
    for field in ("pipeline", "query", "type", "params", "filters", "classification",
                  "distance_strategy", "as_of"):
        assert field in search_schema["properties"]
    assert by_name["ground"].input_schema == GroundBody.model_json_schema()

    assert not found.is_error
    body = found.structured_content
    assert PLAYER_PAGE in [hit["document_id"] for hit in body["hits"][:3]]
    assert body["trace"]["retrievers"][0]["retriever"] == "fulltext"
    assert json.loads(found.content[0].text) == body  # the text is the same JSON

    assert grounded.structured_content["status"] == "resolved"
    assert grounded.structured_content["match"]["text"] == name
    assert missing.structured_content["status"] == "not_found"
    assert [s["strategy"] for s in missing.structured_content["strategiesTried"]] == \
        ["exact", "fuzzy", "fulltext", "bm25"]
    assert document.structured_content["document_id"] == PLAYER_PAGE
    assert document.structured_content["version"] == 1
    assert godot in [p["name"] for p in listed.structured_content["pipelines"]]


def test_stdio_refuses_unknown_arguments_by_name_in_the_one_error_shape(data_dir, godot):  # noqa: F811
    _, (unknown, bad_type, no_tool, no_such) = talk(
        stdio(data_dir),
        ("search", {"pipeline": godot, "query": QUERY, "k": 5}),
        ("search", {"pipeline": godot, "query": QUERY, "type": "warp"}),
        ("summon", {}),
        ("get_document", {"pipeline": godot, "document_id": "no/such.rst"}))
    assert unknown.is_error
    assert unknown.structured_content == {"error": {
        "code": "invalid_request", "message": "unknown field 'k'",
        "details": {"field": "k", "errors": [{"field": "k", "message": "unknown field 'k'"}]}}}
    assert json.loads(unknown.content[0].text) == unknown.structured_content
    assert bad_type.is_error and "unknown search type" in bad_type.structured_content[
        "error"]["message"]
    assert no_tool.is_error and no_tool.structured_content["error"]["code"] == "not_found"
    assert no_such.is_error and no_such.structured_content["error"]["code"] == "not_found"


def test_a_revoked_key_is_refused_at_the_next_call(data_dir, client, godot):  # noqa: F811
    key = client.create_key(pipeline=godot, permissions="read,execute")

    async def main():
        async with Client(stdio(data_dir, key["key"])) as mcp:
            before = await mcp.call_tool("list_pipelines", {})
            client.revoke_key(key["id"])
            after = await mcp.call_tool("list_pipelines", {})
            return before, after

    before, after = anyio.run(main)
    assert [p["name"] for p in before.structured_content["pipelines"]] == [godot]
    assert after.is_error and after.structured_content["error"] == {
        "code": "unauthorized", "message": "this API key was revoked", "details": {}}


def test_a_bad_key_stops_the_server_at_start_with_the_error_on_stderr(data_dir, tmp_path, env):
    import subprocess

    key_file = tmp_path / "key"
    key_file.write_text("pgb_" + "A" * 43)
    key_file.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "pgbraid", "mcp", "--key-file", str(key_file)],
                          env={**os.environ, **env, "PYTHONPATH": str(SRC)}, input=b"",
                          capture_output=True, timeout=60)
    assert done.returncode == 77 and done.stdout == b""
    assert json.loads(done.stderr.decode().strip().splitlines()[-1])["error"]["code"] == \
        "unauthorized"


def test_streamable_http_under_serve_takes_each_requests_key(
        data_dir, server, client, godot, reader_key, tmp_path):  # noqa: F811
    served = Served(data_dir, tmp_path / "serve.log", "--mcp")
    try:
        def over_http(key):
            async def main():
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                    transport = streamable_http_client(served.url + "/mcp", http_client=http)
                    async with Client(transport) as mcp:
                        tools = await mcp.list_tools()
                        found = await mcp.call_tool("search", {"pipeline": godot, "query": QUERY,
                                                               "type": "fulltext"})
                        return tools, found
            return anyio.run(main)

        tools, found = over_http(reader_key["key"])
        assert {tool.name for tool in tools.tools} == set(TOOLS)
        assert PLAYER_PAGE in [h["document_id"] for h in found.structured_content["hits"][:3]]
        refused = httpx2.post(served.url + "/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                         "method": "tools/list"})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
    finally:
        served.stop()


def test_a_key_file_others_may_read_is_refused_before_anything_runs(data_dir, client, tmp_path, env):
    import subprocess

    key = client.create_key(pipeline="*", permissions="read,execute")
    key_file = tmp_path / "key"
    key_file.write_text(key["key"] + "\n")
    key_file.chmod(0o644)  # what `... --json | jq -r .key > file` leaves under umask 022
    try:
        done = subprocess.run([sys.executable, "-m", "pgbraid", "mcp", "--key-file", str(key_file)],
                              env={**os.environ, **env, "PYTHONPATH": str(SRC)}, input=b"",
                              capture_output=True, timeout=60)
    finally:
        client.revoke_key(key["id"])
    assert done.returncode == 2 and done.stdout == b""
    error = json.loads(done.stderr.decode().strip().splitlines()[-1])["error"]
    assert error["code"] == "invalid_request" and error["details"] == {"field": "key-file"}
    assert "0o644" in error["message"] and "chmod 600" in error["message"]
