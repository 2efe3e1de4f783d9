"""Grounding over the user's own table: the cascade, its outcomes, and bad sources."""

from __future__ import annotations

import csv
import json
import uuid

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

import pgbraid
from pgbraid import InvalidRequest
from pgbraid.cli import app

from .conftest import shared

STATES = ["TX", "CA", "NY", "WA", "IL"]


@pytest.fixture(scope="module")
def suppliers(data_dir, server):
    """A supplier table of the user's own, from real company names, with a state each."""
    table = f"suppliers_{uuid.uuid4().hex[:6]}"
    with shared("company_names", "companies.csv").open() as handle:
        names = [r["name"] for r in csv.DictReader(handle)][:2000]
    rows = [(name, STATES[i % len(STATES)]) for i, name in enumerate(names)]
    rows.append(("Acme Metal Fabrication", "TX"))
    rows.append(("Acme Metal Fabrication", "TX"))  # two suppliers with one name in one state
    with psycopg.connect(server.status().dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE TABLE {} (supplier_id serial PRIMARY KEY,"
                              " supplier_name text NOT NULL, state text NOT NULL)").format(
                                  sql.Identifier(table)))
        with admin.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} (supplier_name, state) VALUES (%s, %s)").format(
                sql.Identifier(table)), rows)
    with pgbraid.connect(data_dir=data_dir) as client:
        client.add_source(f"s_{table}", table=table, key="supplier_id", text="supplier_name",
                          scope="state", create_indexes=True)
    return f"s_{table}", table, rows


def test_exact_name_resolves(client, suppliers):
    entity, _, rows = suppliers
    name, state = rows[10]
    result = client.ground(entity, name, scope={"state": state})
    assert result["status"] == "resolved" and result["match"]["text"] == name
    assert result["strategiesTried"] == [{"strategy": "exact", "status": "ran", "hits": 1,
                                          "ms": result["strategiesTried"][0]["ms"]}]


def test_misspelled_name_needs_clarification_with_fuzzy_evidence(client, suppliers):
    entity, _, rows = suppliers
    name, state = rows[10]
    typo = name[:3] + name[4:]  # drop a letter
    result = client.ground(entity, typo, scope={"state": state})
    assert result["status"] == "clarification_needed"
    assert result["evidence"]["strategy"] == "fuzzy"
    assert result["candidates"][0]["text"] == name
    assert [t["strategy"] for t in result["strategiesTried"]] == ["exact", "fuzzy"]


def test_a_name_from_another_state_is_not_found_with_what_ran(client, suppliers):
    entity, _, rows = suppliers
    name, state = rows[10]
    other = next(s for s in STATES if s != state)
    result = client.ground(entity, name, scope={"state": other},
                           strategies=["exact", "fuzzy", "fulltext", "bm25"])
    if result["status"] == "not_found":
        assert [t["strategy"] for t in result["strategiesTried"]] == ["exact", "fuzzy", "fulltext", "bm25"]
        assert all(t["status"] == "ran" and t["hits"] == 0 for t in result["strategiesTried"])
    else:  # a similar name exists in the other state: it must not be presented as resolved
        assert result["status"] == "clarification_needed"
        assert all(c["text"] != name for c in result["candidates"])


def test_unique_gibberish_is_not_found(client, suppliers):
    entity, _, _ = suppliers
    result = client.ground(entity, "Zqxjv Wplkm", scope={"state": "TX"})
    assert result["status"] == "not_found"
    assert [t["strategy"] for t in result["strategiesTried"]] == ["exact", "fuzzy", "fulltext", "bm25"]


def test_two_suppliers_with_one_name_need_clarification(client, suppliers):
    entity, _, _ = suppliers
    result = client.ground(entity, "acme metal fabrication", scope={"state": "TX"})
    assert result["status"] == "clarification_needed"
    assert result["evidence"] == {**result["evidence"], "strategy": "exact", "reason": "exact tie"}
    assert len(result["candidates"]) == 2


def test_search_source_strategies_within_scope(client, suppliers):
    entity, _, _ = suppliers
    for kind in ("fuzzy", "fulltext", "bm25"):
        hits = client.search_source(entity, "metal fabrication", type=kind, scope={"state": "TX"})
        assert hits and hits[0]["text"] == "Acme Metal Fabrication", kind
    assert client.search_source(entity, "metal fabrication", type="bm25", scope={"state": "CA"}) == [] \
        or all(h["text"] != "Acme Metal Fabrication" for h in
               client.search_source(entity, "metal fabrication", type="bm25", scope={"state": "CA"}))
    assert client.source(entity)["missing_indexes"] == []


def test_a_gated_strategy_is_skipped_and_sends_nothing():
    with pgbraid.connect(dsn="host=127.0.0.1 port=1 connect_timeout=1 user=x dbname=x") as client:
        result = client.ground("supplier", "Acme", strategies=["pg_search"])
        assert result["status"] == "not_found"
        assert result["strategiesTried"] == [{"strategy": "pg_search", "status": "skipped",
                                              "reason": "not opted in (PGBRAID_PGSEARCH=1)"}]
        assert client._db._pool is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"table": "no_such_table", "key": "id", "text": "name"}, "does not exist"),
    ({"table": "{t}", "key": "supplier_id", "text": "supplier_name; DROP TABLE {t}; --"}, "no text column"),
    ({"table": "{t}", "key": "nope", "text": "supplier_name"}, "no key column"),
    ({"table": "{t}", "key": "supplier_id", "text": "supplier_name", "scope": "region"}, "no scope column"),
])
def test_bad_sources_create_nothing(client, superuser, suppliers, kwargs, fragment):
    _, table, _ = suppliers
    kwargs = {k: (v.replace("{t}", table) if isinstance(v, str) else v) for k, v in kwargs.items()}
    name = f"bad_{uuid.uuid4().hex[:6]}"
    with pytest.raises(InvalidRequest, match=fragment):
        client.add_source(name, **kwargs)
    assert name not in {s["name"] for s in client.sources()}
    # the table survived the injection attempt
    count = superuser.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
    assert count.fetchone()[0] == 2002


def test_bad_ground_requests(client, suppliers):
    entity, _, _ = suppliers
    with pytest.raises(InvalidRequest, match="scoped"):
        client.ground(entity, "Acme", scope={"region": "south"})
    with pytest.raises(InvalidRequest, match="strategies"):
        client.ground(entity, "Acme", strategies=["exact", "telepathy"])
    with pytest.raises(InvalidRequest):
        client.ground(entity, "")


def test_ground_cli_json(env, suppliers):
    entity, _, _ = suppliers
    result = CliRunner().invoke(app, ["ground", entity, "Acme Metal Fabrication", "--scope", "state=TX",
                                      "--json"], env=env)
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["status"] == "clarification_needed"
    bad = CliRunner().invoke(app, ["ground", entity, "x", "--scope", "state", "--json"], env=env)
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["code"] == "invalid_request"
