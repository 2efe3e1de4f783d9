"""HTTP ingestion: the write permission before the body is parsed, the parse off the
event loop (a large body does not stall /healthz), and at most 10,000 documents a
request (413, nothing written)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from pgbraid.api.documents import MAX_RECORDS

from .serving import Served, served, tenant_client  # noqa: F401  (fixture)

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture()
def keys(data_dir, served):
    with tenant_client(data_dir) as tenant:
        tenant.create_pipeline("inbox", embedder="none")
        yield (tenant, tenant.create_key(pipeline="inbox", permissions="read"),
               tenant.create_key(pipeline="inbox", permissions="read,write"))


def test_a_key_without_write_is_refused_before_its_body_is_read(keys, served):
    tenant, reader, _ = keys
    with served.client(reader["key"]) as http:
        for body, headers in ((b"not json at all", {"Content-Type": "application/json"}),
                              (b'{"id": "a", "bogus": 1}', {"Content-Type": "application/json"}),
                              (b"x", {"Content-Type": "text/plain"})):
            answer = http.post("/pipelines/inbox/documents", content=body, headers=headers)
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"]["code"] == "forbidden"
    admin = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    with served.client(admin["key"]) as http:  # the server's counts, written by its read
        denied = http.get("/audit", params={"action": "access.denied"}).json()
    assert sum(e["count"] for e in denied) == 3
    assert all(k.startswith("ingest: ") for e in denied for k in e["detail"]["denials"])


@pytest.mark.parametrize("shape", ["ndjson", "array"])
def test_more_than_the_cap_is_413_and_writes_nothing(keys, served, shape):
    tenant, _, writer = keys
    records = [{"id": f"d{n}", "text": "x"} for n in range(MAX_RECORDS + 1)]
    if shape == "ndjson":
        body = "\n".join(json.dumps(r) for r in records).encode()
        headers = NDJSON
    else:
        body, headers = json.dumps(records).encode(), {"Content-Type": "application/json"}
    with served.client(writer["key"]) as http:
        answer = http.post("/pipelines/inbox/documents", content=body, headers=headers)
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "payload_too_large" and str(MAX_RECORDS) in error["message"]
        assert tenant.documents("inbox")["documents"] == []  # nothing of the 10,001
        small = (b"\n".join(body.splitlines()[:3]) if shape == "ndjson"
                 else json.dumps(records[:3]).encode())
        assert http.post("/pipelines/inbox/documents", content=small,
                         headers=headers).status_code == 200
    assert [d["document_id"] for d in tenant.documents("inbox")["documents"]] == ["d0", "d1", "d2"]


def test_healthz_answers_while_a_large_body_is_parsed(data_dir, server, tmp_path):
    """About 45 MB of NDJSON, 10,000 lines of long metadata lists, the last line bad
    (so nothing is written): parsing takes seconds; on the event loop it held every
    other request of the worker for as long."""
    with tenant_client(data_dir) as tenant:
        tenant.create_pipeline("big", embedder="none")
        writer = tenant.create_key(pipeline="big", permissions="write")
    line = json.dumps({"id": "d", "text": "x", "metadata": {"v": list(range(200)) * 5}})
    body = ("\n".join(line.replace('"d"', f'"d{n}"') for n in range(MAX_RECORDS - 1))
            + '\n{"id": "bad", "text": "x", "bogus": 1}').encode()
    served = Served(data_dir, tmp_path / "serve.log",
                    env={"PGBRAID_MAX_BODY_BYTES": str(64 << 20)})
    try:
        answer: list[httpx.Response] = []
        done = threading.Event()

        def post() -> None:
            with served.client(writer["key"]) as http:
                answer.append(http.post("/pipelines/big/documents", content=body,
                                        headers=NDJSON))
            done.set()

        started = time.perf_counter()
        thread = threading.Thread(target=post)
        thread.start()
        waits = []
        with httpx.Client(base_url=served.url, timeout=60) as http:
            while not done.is_set():
                asked = time.perf_counter()
                assert http.get("/healthz").status_code == 200
                waits.append(time.perf_counter() - asked)
                time.sleep(0.02)
        thread.join()
        took = time.perf_counter() - started
        assert answer[0].status_code == 400 and "line 10000" in answer[0].json()["error"]["message"]
        if took < 1.5:
            pytest.skip(f"the body took {took:.2f} s: too fast here to tell a stall apart")
        assert max(waits) < took / 3, (max(waits), took)
    finally:
        served.stop()


def test_a_body_comes_after_its_key(keys, served):
    """The key is checked before the body is read: a body over the limit with no valid
    key is 401 (it was 413: read first), with a valid key 413."""
    _, reader, writer = keys
    big = b"[" + b" " * (8 << 20) + b"]"
    for headers in ({}, {"Authorization": "Bearer pgb_" + "A" * 43},
                    {"Authorization": f"Basic {writer['key']}"}):
        with httpx.Client(base_url=served.url, timeout=60) as http:
            answer = http.post("/pipelines/inbox/documents", content=big,
                               headers={**headers, **NDJSON})
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["code"] == "unauthorized"
    with served.client(writer["key"]) as http:
        assert http.post("/pipelines/inbox/documents", content=big,
                         headers=NDJSON).status_code == 413
        small = http.post("/pipelines/inbox/documents", headers=NDJSON,
                          content=b'{"id": "k", "text": "after the key"}')
        assert small.status_code == 200 and small.json()["added"] == 1
