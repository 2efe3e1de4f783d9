"""Bad input, through the Python API and the CLI: a clear error from the table, nothing
sent (an unreachable DSN proves it where no database is needed) and nothing written."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid import InvalidRequest
from pgbraid.cli import app
from pgbraid.errors import PayloadTooLarge

runner = CliRunner()
UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x"


def cli(env, *args):
    return runner.invoke(app, list(args), env=env)


def _nested(levels: int) -> dict:
    node: dict = {"team": "ops"}
    for _ in range(levels):  # built without recursion, as an attacker's JSON parser would
        node = {"not": node}
    return node


@pytest.fixture()
def offline():
    """A client whose server cannot be reached: whatever it refuses, it refused unsent."""
    with pgbraid.connect(dsn=UNREACHABLE, pool_timeout=1) as client:
        yield client
        assert client._db._pool is None


@pytest.fixture()
def stocked(client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "pump maintenance", "metadata": {"team": "ops"}}])
    return pipeline


# -- text PostgreSQL cannot store ------------------------------------------------------

@pytest.mark.parametrize("request_, fragment", [
    ({"query": "pump\x00"}, "NUL"),
    ({"query": "pump\ud800"}, "surrogates"),
    ({"query": "pump", "filters": {"te\x00am": "ops"}}, "NUL"),
    ({"query": "pump", "filters": {"team": "o\x00ps"}}, "NUL"),
    ({"query": "pump", "filters": {"te\udc80am": "ops"}}, "surrogates"),
    ({"query": "pump", "filters": {"team": {"in": ["ok", "\ud800"]}}}, "surrogates"),
    ({"query": "pump", "classification": ["public\x00"]}, "classification"),
    ({"query": "pump", "classification": ["pub\ud800"]}, "classification"),
    ({"query": "pump", "classification": "public\n"}, None),  # stripped: still "public"
])
def test_unstorable_text_in_a_search_is_refused_unsent(offline, request_, fragment):
    if fragment is None:
        assert offline.engine.parse(request_).classification == ("public",)
        return
    with pytest.raises(InvalidRequest, match=fragment):
        offline.search("docs", **request_)


@pytest.mark.parametrize("name", ["do\x00cs", "do\ud800cs", "docs\n", "x" * 64, ""])
def test_bad_pipeline_names_are_refused_everywhere(client, name, env):
    for call in (lambda: client.search(name, "pump"), lambda: client.document(name, "a"),
                 lambda: client.versions(name, "a"), lambda: client.pipeline(name),
                 lambda: client.create_pipeline(name, embedder="none"),
                 lambda: client.ingest(name, [{"id": "a", "text": "x"}])):
        with pytest.raises(InvalidRequest, match="invalid pipeline name"):
            call()
    assert name not in {p.name for p in client.pipelines()}
    if name:  # (the CLI takes "" as a missing argument)
        result = cli(env, "search", name, "pump", "--json")
        assert result.exit_code == 2 and "invalid pipeline name" in result.stdout


@pytest.mark.parametrize("document_id", ["a\x00", "a\ud800", "", "x" * 1001, 7])
def test_bad_document_ids_are_refused(client, stocked, document_id):
    with pytest.raises(InvalidRequest, match="document id"):
        client.document(stocked, document_id)
    with pytest.raises(InvalidRequest, match="document id"):
        client.versions(stocked, document_id)


def test_bad_document_ids_on_the_cli(env, stocked):
    for document_id in ("a\x00", "a\udcff"):  # \udcff: an undecodable byte in argv
        result = cli(env, "document", stocked, document_id, "--json")
        assert result.exit_code == 2, result.stdout
        assert json.loads(result.stdout)["error"]["code"] == "invalid_request"


def test_bad_queries_and_filters_on_the_cli(env, stocked):
    for args in (["pump\ud800"], ["pump", "--filter", '{"te\\u0000am": "ops"}'],
                 ["pump", "--filter", '{"team": "\\ud800"}'],
                 ["pump", "--type", "bm25", "--distance-strategy", "manhattan"]):
        result = cli(env, "search", stocked, *args, "--json")
        assert result.exit_code == 2, result.stdout
        assert json.loads(result.stdout)["error"]["code"] == "invalid_request"


def test_a_bad_record_fails_alone_and_the_rest_is_written(client, pipeline):
    deep: dict = {}
    node = deep
    for _ in range(1000):
        node["x"] = {}
        node = node["x"]
    report = client.ingest(pipeline, [
        {"id": "nul\x00id", "text": "x"},
        {"id": "sur\ud800id", "text": "x"},
        {"id": "b", "text": "text with a lone \udfff surrogate"},
        {"id": "c", "text": "x", "title": "title \ud800"},
        {"id": "d", "text": "x", "metadata": {"k\ud800": 1}},
        {"id": "e", "text": "x", "metadata": {"k": "v\x00"}},
        {"id": "f", "text": "x", "metadata": deep},
        {"id": "g", "text": "x", "metadata": {"when": datetime.now()}},
        {"id": "h", "text": "x", "classification": ["secret\ud800"]},
        {"id": "good", "text": "the one good pump record"},
    ])
    assert report.added == 1 and len(report.failed) == 9
    messages = " | ".join(f.message for f in report.failed)
    for fragment in ("NUL", "surrogates", "nests deeper", "not JSON", "classification"):
        assert fragment in messages
    assert [h.document_id for h in client.search(pipeline, "pump").hits] == ["good"]
    assert client.pipeline(pipeline).documents == 1


def test_bad_jsonl_lines_fail_alone_on_the_cli(env, pipeline, client, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        '{"id": "x\\ud800", "text": "lone surrogate in the id"}',
        '{"id": "y", "text": "lone surrogate \\udc00 in the text"}',
        '{"id": "z", "text": "nul", "metadata": {"k": "\\u0000"}}',
        '{"id": "w", "text": "deep", "metadata": ' + '[' * 100_000 + ']' * 100_000 + '}',
        '{"id": "ok", "text": "a pump that works"}']) + "\n")
    result = cli(env, "ingest", pipeline, str(path), "--json")
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 1 and body["added"] == 1 and len(body["failed"]) == 4
    assert [f["source"].rsplit(":", 1)[1] for f in body["failed"]] == ["1", "2", "3", "4"]
    assert client.pipeline(pipeline).documents == 1


# -- version and as_of --------------------------------------------------------------

@pytest.mark.parametrize("version", ["1 OR 1=1", "1", True, 0, -1, 1.0, 2**40])
def test_version_must_be_an_int_from_1(client, stocked, version):
    with pytest.raises(InvalidRequest, match="version"):
        client.document(stocked, "a", version=version)


@pytest.mark.parametrize("as_of", ["junk", "2026-13-01", 1767225600, [], b"2026-01-01",
                                   datetime.now().date()])
def test_as_of_is_a_datetime_or_an_iso_string_only(client, stocked, as_of):
    with pytest.raises(InvalidRequest, match="as_of"):
        client.document(stocked, "a", as_of=as_of)


def test_as_of_reads_the_version_valid_then_naive_meaning_utc(client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "first text"}])
    client.ingest(pipeline, [{"id": "a", "text": "second text"}])
    first, _ = client.versions(pipeline, "a")
    valid_to = datetime.fromisoformat(first["valid_to"])
    moment = valid_to.astimezone(timezone.utc) - (valid_to - datetime.fromisoformat(
        first["valid_from"])) / 2
    naive_utc = moment.replace(tzinfo=None)
    for as_of in (moment, moment.isoformat(), naive_utc, naive_utc.isoformat(),
                  moment.astimezone().isoformat()):
        assert client.document(pipeline, "a", as_of=as_of)["version"] == 1, as_of
    assert client.document(pipeline, "a", as_of=datetime.now(timezone.utc))["version"] == 2
    with pytest.raises(InvalidRequest, match="either version or as_of"):
        client.document(pipeline, "a", version=1, as_of=moment)


def test_as_of_on_the_cli(env, client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "first text"}])
    now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat()
    read = cli(env, "document", pipeline, "a", "--as-of", now, "--json")
    assert read.exit_code == 0 and json.loads(read.stdout)["version"] == 1
    for bad in ("yesterday", "2026-02-30"):
        result = cli(env, "document", pipeline, "a", "--as-of", bad, "--json")
        assert result.exit_code == 2 and "as_of" in json.loads(result.stdout)["error"]["message"]
    result = cli(env, "document", pipeline, "a", "--version", "1 OR 1=1")
    assert result.exit_code == 2  # typer refuses it as not an integer


# -- numbers ------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("type_, params", [
    ("fulltext", {"k": NAN}), ("fulltext", {"k": 2.5}), ("fulltext", {"k": True}),
    ("fulltext", {"threshold": NAN}), ("fulltext", {"threshold": INF}),
    ("fuzzy", {"threshold": NAN}), ("bm25", {"k1": NAN}), ("bm25", {"b": INF}),
    ("bm25", {"k1": "1.2"}), ("similarity", {"threshold": NAN}),
    ("mmr", {"lambda_mult": NAN}), ("mmr", {"lambda_mult": -INF}), ("mmr", {"fetch_k": INF}),
    ("mmr", {"fetch_k": 20.0}), ("hybrid", {"weights": {"bm25": INF}}),
    ("hybrid", {"weights": {"bm25": NAN}}), ("hybrid", {"rrf_k": NAN}),
    ("hybrid", {"depth": INF}), ("hybrid", {"depth": {"bm25": NAN}}),
    ("hybrid", {"leg_params": {"fuzzy": {"threshold": NAN}}, "strategies": ["fuzzy"]}),
    ("graph", {"hops": NAN}), ("graph", {"max_fanout": INF}), ("graph", {"hops": 10**400}),
])
def test_nan_and_infinity_are_refused_for_every_number(offline, type_, params):
    with pytest.raises(InvalidRequest, match="must be"):
        offline.search("docs", "pump", type=type_, params=params)


@pytest.mark.parametrize("params, fragment", [
    ({"seed": "G00\x0016"}, "NUL"), ({"seed": {"key": 1}}, "string"),
    ({"seed_type": "gro\ud800up"}, "surrogates"), ({"edge_types": ["us\x00es"]}, "NUL"),
])
def test_graph_names_are_checked_unsent(offline, params, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        offline.search("docs", "APT29", type="graph", params=params)


@pytest.mark.parametrize("vector, distance, fragment", [
    ([NAN] * 384, "cosine", "NaN"), ([INF] * 384, "euclidean-distance", "NaN"),
    ([1e39] * 384, "dot-product", "float32"), ([0.0] * 384, "cosine", "all zeros"),
    ([], "cosine", "list of 1"), ("0.1, 0.2", "cosine", "list of 1"),
])
def test_bad_query_vectors_are_refused(offline, vector, distance, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        offline.search("docs", "pump", type="similarity", distance_strategy=distance,
                       params={"vector": vector})


@pytest.mark.parametrize("type_", ["bm25", "fulltext", "fuzzy", "graph", "relational"])
def test_a_wrong_distance_strategy_is_refused_for_every_type_unsent(offline, type_):
    """Not only where a vector leg runs: bm25 answered a search with "manhattan" (trial2)."""
    with pytest.raises(InvalidRequest, match="distance_strategy") as caught:
        offline.search("docs", "pump", type=type_, distance_strategy="manhattan")
    assert caught.value.details["field"] == "distance_strategy"


def test_the_request_model_and_the_vector_store_know_the_same_distances():
    from typing import get_args

    from pgbraid.models import SearchRequest
    from pgbraid.strategies.vector.store import DISTANCES
    declared = get_args(SearchRequest.model_fields["distance_strategy"].annotation)
    assert set(declared) == set(DISTANCES)


def test_a_zero_vector_is_fine_where_it_has_a_distance(offline):
    request = offline.engine.parse({"query": "pump", "type": "similarity",
                                    "distance_strategy": "euclidean-distance",
                                    "params": {"vector": [0.0] * 384}})
    assert request.params["vector"] == [0.0] * 384


# -- filter size --------------------------------------------------------------------

@pytest.mark.parametrize("levels", [9, 1_000, 100_000])
def test_deep_filters_fail_with_the_depth_message(offline, levels, env):
    with pytest.raises(InvalidRequest, match="nests deeper than 8 levels"):
        offline.search("docs", "pump", filters=_nested(levels))
    text = '{"not": ' * levels + '{"team": "ops"}' + "}" * levels
    result = cli({**env, "PGBRAID_DSN": UNREACHABLE}, "search", "docs", "pump", "--filter", text,
                 "--json")
    assert result.exit_code == 2, result.stdout
    assert "nests deeper than 8 levels" in json.loads(result.stdout)["error"]["message"]


def test_a_10_mb_filter_value_is_refused_at_once(offline):
    for filters in ({"team": "x" * 10_000_000}, {"team": {"in": ["x" * 100_000] * 1000}}):
        started = time.perf_counter()
        with pytest.raises(PayloadTooLarge, match="limit is 1024"):
            offline.search("docs", "pump", filters=filters)
        assert time.perf_counter() - started < 0.05


def test_whole_filter_and_condition_limits(offline):
    with pytest.raises(PayloadTooLarge, match="larger than 65536 bytes"):
        offline.search("docs", "pump", filters={"team": {"in": ["y" * 1000] * 100}})
    with pytest.raises(InvalidRequest, match="at most 64 conditions"):
        offline.search("docs", "pump", filters={"and": [{"n": i} for i in range(65)]})
    with pytest.raises(InvalidRequest, match="64-bit"):
        offline.search("docs", "pump", filters={"n": 10**5000})


def test_filter_limits_come_from_settings(client, stocked, data_dir):
    wide = {"team": {"in": ["ops", "z" * 2000]}}
    with pytest.raises(PayloadTooLarge):
        client.search(stocked, "pump", filters=wide)
    with pgbraid.connect(data_dir=data_dir, filter_max_value_bytes=4096,
                         filter_max_depth=12) as roomy:
        assert [h.document_id for h in roomy.search(stocked, "pump", filters=wide).hits] == ["a"]
        assert [h.document_id for h in roomy.search(stocked, "pump", filters=_nested(12)).hits] \
            == ["a"]  # twelve nots of team = ops
        with pytest.raises(InvalidRequest, match="deeper than 12"):
            roomy.search(stocked, "pump", filters=_nested(13))


def test_an_over_long_query_is_payload_too_large(offline):
    with pytest.raises(PayloadTooLarge, match="limit is 10000"):
        offline.search("docs", "x" * 10_001)


@pytest.mark.parametrize("entity, value, scope", [
    ("suppliers", "Acme\ud800", {}), ("suppliers", "Acme", {"state": "T\x00X"}),
    ("supp\x00liers", "Acme", {}),
])
def test_entity_lookups_refuse_unstorable_text_unsent(offline, entity, value, scope):
    with pytest.raises(InvalidRequest):
        offline.ground(entity, value, scope=scope)
    with pytest.raises(InvalidRequest):
        offline.search_source(entity, value, scope=scope)
