"""schemathesis against /openapi.json of a real server: for every operation, bounded
examples of valid and invalid requests, sent with an admin key of a tenant of its own.
No answer may be a server error (501 ``not_enabled`` is a documented refusal), and
every answer must match its documented status, content type, headers and schema."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                               response_headers_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

from .serving import served, tenant_client  # noqa: F401  (fixture)

EXAMPLES = 20
PIPELINE = "contract"


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return b"\n".join(json.dumps(item).encode() for item in (value if isinstance(value, list)
                                                             else [value]))


@schemathesis.check
def no_server_error(ctx, response, case):
    """Nothing 5xx, except the documented "not enabled here" (501 not_enabled)."""
    if response.status_code >= 500:
        code = response.json().get("error", {}).get("code") if response.content else None
        if response.status_code == 501 and code == "not_enabled":
            return None
        raise AssertionError(f"server error {response.status_code}: {response.text[:300]}")
    return None


STATUSES: Counter = Counter()
ANSWERED: Counter = Counter()


@schemathesis.check
def count_status(ctx, response, case):
    STATUSES["2xx" if response.status_code < 300 else response.status_code] += 1
    ANSWERED[case.operation.label, response.status_code < 300] += 1
    return None


CHECKS = [count_status, no_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]


CORE = {"GET /healthz", "GET /readyz", "GET /pipelines", "POST /pipelines",
        "GET /pipelines/{pipeline}", "GET /pipelines/{pipeline}/documents",
        "POST /pipelines/{pipeline}/documents", "POST /pipelines/{pipeline}/search",
        "POST /pipelines/{pipeline}/retrieve", "POST /pipelines/{pipeline}/graph",
        "GET /pipelines/{pipeline}/graph", "GET /keys", "POST /keys", "GET /sources"}


@pytest.fixture(scope="module")
def contract(data_dir, server):
    with tenant_client(data_dir) as tenant:
        tenant.create_pipeline(PIPELINE, embedder="none")
        tenant.ingest(PIPELINE, [{"id": "a", "text": "pump maintenance"},
                                 {"id": "b", "text": "valve inspection"}])
        yield tenant.create_key(pipeline="*", permissions="read,write,execute,admin",
                                admin=True)["key"]


def operations(url: str):
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    for result in schema.get_all_operations():
        yield result.ok()


def test_every_operation_keeps_its_contract(served, contract):
    headers = {"Authorization": f"Bearer {contract}"}
    failures: list[str] = []
    ran, labels = 0, []
    for operation in operations(served.url):
        labels.append(operation.label)
        fixed = {} if operation.method.upper() == "DELETE" and operation.path == \
            "/pipelines/{pipeline}" else {"pipeline": PIPELINE}
        fixed = {k: v for k, v in fixed.items() if "{" + k + "}" in operation.path}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed or None)

            @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def exchange(case):
                case.call_and_validate(base_url=served.url, headers=headers, checks=CHECKS,
                                       timeout=60)

            try:
                exchange()
                ran += 1
            except Unsatisfiable:  # nothing to make invalid (no parameters, no body)
                continue
            except Exception as exc:  # noqa: BLE001  (collect every operation's failure)
                failures.append(f"{operation.method.upper()} {operation.path} ({mode}): {exc}")
    assert not failures, "\n\n".join(failures)
    assert ran > 40, "fewer operations than expected were exercised"
    # Not only refusals: valid requests reached the engine and were answered.
    assert STATUSES["2xx"] > 150 and STATUSES[400] > 150, STATUSES
    # Each operation was sent requests; those not addressed by an id that random data
    # cannot guess (a document, a key, a source) also accepted some of them.
    assert {label for label, _ in ANSWERED} == set(labels)
    accepted = {label for label, ok in ANSWERED if ok}
    assert CORE <= accepted, sorted(CORE - accepted)
