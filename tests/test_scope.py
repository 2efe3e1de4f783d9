"""Scope: classifications with their hierarchy, metadata filters, tenants under RLS."""

from __future__ import annotations

import pytest
from psycopg import sql

import pgbraid
from pgbraid import InvalidRequest, NotFound
from pgbraid.scope import OPERATORS, FilterCompiler, Scope

from .conftest import CITUS


@pytest.fixture()
def classified(client, pipeline):
    client.define_classification("secret", implies=["internal"])
    client.define_classification("internal", implies=["public"])
    client.ingest(pipeline, [
        {"id": "s", "text": "launch codes for the reactor", "classification": ["secret"]},
        {"id": "i", "text": "reactor maintenance schedule", "classification": "internal"},
        {"id": "p", "text": "reactor visitor centre opening hours"}])
    return pipeline


def test_secret_is_never_returned_to_an_internal_holder(client, classified):
    hits = client.search(classified, "reactor", classification=["internal"], params={"k": 10}).hits
    assert {h.document_id for h in hits} == {"i", "p"}
    with pytest.raises(NotFound):
        client.document(classified, "s", classification="internal")


def test_holding_secret_implies_internal(client, classified):
    hits = client.search(classified, "reactor", classification="secret", params={"k": 10}).hits
    assert {h.document_id for h in hits} == {"s", "i", "p"}


def test_redefining_a_classification_takes_back_what_it_implied(client, classified):
    client.define_classification("topsecret", implies=["secret"])
    hits = client.search(classified, "reactor", classification="topsecret", params={"k": 10}).hits
    assert {h.document_id for h in hits} == {"s", "i", "p"}  # through secret -> internal -> public
    client.define_classification("topsecret", implies=[])
    assert client.search(classified, "reactor", classification="topsecret").hits == ()
    client.define_classification("internal", implies=[])  # cuts the chain under secret too
    hits = client.search(classified, "reactor", classification="secret", params={"k": 10}).hits
    assert {h.document_id for h in hits} == {"s", "i"}
    client.define_classification("internal", implies=["public"])


def test_default_reader_holds_public_only(client, classified):
    hits = client.search(classified, "reactor", params={"k": 10}).hits
    assert {h.document_id for h in hits} == {"p"}


@pytest.mark.parametrize("bad", [[1], {"a": 1}, "", "Secret", ["ok", "bad name"], 7])
def test_bad_classification_formats_are_rejected(client, classified, bad):
    with pytest.raises(InvalidRequest):
        client.search(classified, "reactor", classification=bad)


@pytest.fixture()
def tagged(client, pipeline):
    client.ingest(pipeline, [
        {"id": "a", "text": "pump report", "metadata": {"year": 2019, "team": "ops", "tags": ["x", "y"]}},
        {"id": "b", "text": "pump report", "metadata": {"year": 2021, "team": "dev", "tags": ["y"]}},
        {"id": "c", "text": "pump report", "metadata": {"year": 2024, "nested": {"level": 3}}},
        {"id": "d", "text": "pump report"}])
    return pipeline


@pytest.mark.parametrize("filters, expected", [
    ({"team": "ops"}, {"a"}),
    ({"year": {"gte": 2020}}, {"b", "c"}),
    ({"year": {"gt": 2019, "lt": 2024}}, {"b"}),
    ({"year": {"lte": 2019}}, {"a"}),
    ({"team": {"in": ["ops", "dev"]}}, {"a", "b"}),
    ({"team": {"nin": ["ops"]}}, {"b", "c", "d"}),
    ({"team": {"ne": "ops"}}, {"b", "c", "d"}),
    ({"tags": "x"}, {"a"}),
    ({"nested.level": 3}, {"c"}),
    ({"year": {"exists": False}}, {"d"}),
    ({"or": [{"team": "ops"}, {"year": 2024}]}, {"a", "c"}),
    ({"and": [{"tags": "y"}, {"not": {"team": "ops"}}]}, {"b"}),
    ({"not": {"year": {"lt": 2024}}}, {"c", "d"}),
])
def test_metadata_filters(client, tagged, filters, expected):
    hits = client.search(tagged, "pump", filters=filters, params={"k": 10}).hits
    assert {h.document_id for h in hits} == expected


@pytest.mark.parametrize("filters", [
    {"year": {"between": [1, 2]}}, {"and": {}}, {"or": []}, [], {"": 1}, {"a..b": 1},
    {"year": {"in": []}}, {"year": {"gte": {"x": 1}}}, {"year": {"exists": "yes"}},
    {"year": float("nan")},
])
def test_bad_filters_are_rejected_before_any_statement(client, tagged, filters):
    with pytest.raises(InvalidRequest):
        client.search(tagged, "pump", filters=filters)


def test_filter_values_never_reach_the_sql_text():
    compiler = FilterCompiler(sql.SQL("metadata"))
    where = compiler.compile({"team'; DROP TABLE x; --": {"in": ["a'b", "c"]}})
    text = where.as_string(None)
    assert "DROP" not in text and "a'b" not in text
    assert text == "metadata @? %(scope_filter_0)s::jsonpath"
    assert compiler.params["scope_filter_0"] == (
        '$."team\'; DROP TABLE x; --" ? (@ == "a\'b" || @ == "c")')


def test_every_operator_is_documented_and_covered():
    covered = {op for f, _ in test_metadata_filters.pytestmark[0].args[1]
               for op in _operators(f)}
    for key, operator in OPERATORS.items():
        assert operator.description, key
        assert key in covered | {"eq"}, f"operator {key} has no test case"


def _operators(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from (k for k in value if k in OPERATORS)
            yield from _operators(value) if isinstance(value, (dict, list)) else ()
    elif isinstance(node, list):
        for item in node:
            yield from _operators(item)


def test_scope_renders_current_version_and_not_quarantined():
    where, params = Scope(7, ("public",)).where("f")
    text = where.as_string(None)
    assert '"f".current' in text and 'NOT "f".quarantined' in text
    assert params == {"scope_pipeline": 7, "scope_classifications": ["public"]}


def test_tenants_are_isolated_by_row_level_security(data_dir, server, pipeline, client):
    with pgbraid.connect(data_dir=data_dir, tenant="other") as other:
        assert pipeline not in {p.name for p in other.pipelines()}
        with pytest.raises(NotFound):
            other.search(pipeline, "anything")
        other.create_pipeline(pipeline, embedder="none")  # the same name is free in another tenant
    with client.session() as conn:
        row = conn.execute("SELECT current_user, rolsuper, rolbypassrls FROM pg_roles"
                           " WHERE rolname = current_user").fetchone()
        assert row == ("pgbraid_app", False, False)
        # Even raw SQL in a session sees one tenant only.
        tenants = {r[0] for r in conn.execute("SELECT DISTINCT tenant_id FROM pgbraid.pipelines")}
        assert tenants == {"default"}


@pytest.mark.skipif(CITUS, reason="LEAKPROOF is declared on the coordinator only: the "
                    "workers plan full-text under RLS without the GIN index (docs/scale.md, 3)")
def test_gin_index_serves_fulltext_under_rls(client, pipeline, superuser):
    client.ingest(pipeline, [{"id": str(i), "text": f"filler text number {i}"} for i in range(300)]
                  + [{"id": "rare", "text": "a zygote"}])
    superuser.execute("ANALYZE pgbraid.fragments")
    with client.session() as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM pgbraid.fragments f WHERE f.current AND NOT f.quarantined"
            " AND f.tsv @@ to_tsquery('english', 'zygote')"))
    assert "fragments_tsv" in plan, plan
