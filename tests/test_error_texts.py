"""Inputs without a size cap and error texts that passed PostgreSQL's words on."""

from __future__ import annotations

import pytest

from pgbraid.errors import PayloadTooLarge
from pgbraid.grounding import MAX_VALUE_CHARS

from .serving import served, tenant_client  # noqa: F401  (fixture)


def test_an_entity_source_query_is_capped(client):
    with pytest.raises(PayloadTooLarge) as raised:
        client.search_source("anything", "x" * (MAX_VALUE_CHARS + 1))
    assert raised.value.details["field"] == "query"


def test_an_entity_source_query_over_the_cap_is_413_over_http(data_dir, served):
    with tenant_client(data_dir) as tenant:
        key = tenant.create_key(pipeline="*", permissions="read,execute")
    with served.client(key["key"]) as http:
        answer = http.post("/sources/anything/search", json={"query": "x" * 20_000})
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["code"] == "payload_too_large"
