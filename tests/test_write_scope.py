"""Writes respect the writer's classifications (security review finding 1): a writer
bounded to some classifications cannot label beyond them, cannot overwrite or delete a
document whose current version lies beyond them, and learns nothing of its content
("unchanged" is never said of a version it could not read). In Python and over HTTP."""

from __future__ import annotations

import pytest

from pgbraid import Principal
from pgbraid.errors import Forbidden, NotFound

from .serving import served, tenant_client  # noqa: F401  (fixture)

SECRET_TEXT = "The launch code is 0000 and the vault opens on Fridays."


@pytest.fixture()
def tenant(data_dir, server):
    with tenant_client(data_dir) as client:
        client.define_classification("secret", implies=["internal"])
        client.create_pipeline("notes", embedder="none")
        client.ingest("notes", [
            {"id": "sec1", "text": SECRET_TEXT, "classification": ["secret"]},
            {"id": "int1", "text": "Internal wiki page about rotas.", "classification": ["internal"]},
            {"id": "pub1", "text": "Public page about opening hours."}])
        yield client


def _writer(tenant, *classifications: str):
    return tenant.acting_as(Principal(tenant.tenant, {"notes": frozenset({"write"})},
                                      classifications))


ALL = ["secret", "internal", "public"]


def _current(tenant, document_id: str) -> dict:
    return tenant.document("notes", document_id, classification=ALL)


def _denials(tenant) -> list[str]:
    """Every refusal counted in the log (audit.denied: "operation: message"), one entry each."""
    kinds = []
    for event in tenant.audit(action="access.denied"):
        for kind, count in event["detail"]["denials"].items():
            kinds += [kind] * count
    return kinds


def test_a_bounded_writer_cannot_overwrite_or_probe_a_document_beyond_it(tenant):
    writer = _writer(tenant, "public")
    answers = []
    for record in ({"id": "sec1", "text": SECRET_TEXT, "classification": ["secret"]},  # the guess
                   {"id": "sec1", "text": SECRET_TEXT},                                # relabelled
                   {"id": "sec1", "text": "tampered"}):
        report = writer.ingest("notes", [record]).as_dict()
        assert (report["added"], report["updated"], report["unchanged"]) == (0, 0, 0), report
        answers.append([f["message"] for f in report["failed"]])
    # the right guess, a relabelling and other text get one and the same answer
    assert answers[1] == answers[2] and len(answers[2]) == 1
    assert "outside this principal's classifications" in answers[2][0]
    assert "exists" in answers[2][0] and "secret" not in answers[2][0]
    assert "may not write classification(s) secret" in answers[0][0]
    kept = _current(tenant, "sec1")
    assert kept["version"] == 1 and kept["text"] == SECRET_TEXT
    assert kept["classifications"] == ["secret"]
    assert [v["version"] for v in tenant.versions("notes", "sec1", classification=ALL)] == [1]
    denied = _denials(tenant)
    assert len(denied) == 3 and all(d.startswith("ingest: 1 document(s) of pipeline 'notes'")
                                    and "'sec1'" in d for d in denied), denied


def test_a_bounded_writer_cannot_label_beyond_what_it_holds(tenant):
    writer = _writer(tenant, "internal")
    report = writer.ingest("notes", [
        {"id": "new-secret", "text": "a", "classification": ["secret"]},
        {"id": "new-mixed", "text": "b", "classification": ["internal", "secret"]},
        {"id": "new-internal", "text": "c", "classification": ["internal"]},
        {"id": "new-public", "text": "d"}])
    assert (report.added, len(report.failed)) == (2, 2)
    assert sorted(f.source for f in report.failed) == ["record 'new-mixed'", "record 'new-secret'"]
    for missing in ("new-secret", "new-mixed"):
        with pytest.raises(NotFound):
            tenant.document("notes", missing, classification=ALL)
    assert _current(tenant, "new-internal")["classifications"] == ["internal"]


def test_within_its_bound_a_writer_overwrites_and_sees_unchanged(tenant):
    writer = _writer(tenant, "internal")   # holds internal and public
    same = writer.ingest("notes", [{"id": "pub1", "text": "Public page about opening hours."},
                                   {"id": "int1", "text": "Internal wiki page about rotas.",
                                    "classification": ["internal"]}])
    assert (same.unchanged, same.updated, len(same.failed)) == (2, 0, 0)
    changed = writer.ingest("notes", [{"id": "int1", "text": "New rota.",
                                       "classification": ["internal"]}])
    assert changed.updated == 1 and _current(tenant, "int1")["text"] == "New rota."
    # secret implies internal: a secret writer may replace an internal document, not relabel up
    # beyond what it holds
    secret = _writer(tenant, "secret")
    assert secret.ingest("notes", [{"id": "int1", "text": "x", "classification": ["secret"]}]
                         ).updated == 1
    assert writer.ingest("notes", [{"id": "int1", "text": "back"}]).failed  # now beyond internal


def test_a_refused_record_fails_alone_and_stop_stops_there(tenant):
    writer = _writer(tenant, "public")
    records = [{"id": "a1", "text": "one"}, {"id": "sec1", "text": "x"}, {"id": "a2", "text": "two"}]
    report = writer.ingest("notes", records)
    assert (report.added, [f.source for f in report.failed], report.stopped) == (
        2, ["record 'sec1'"], False)
    stopped = writer.ingest("notes", [{"id": "b1", "text": "one"}, {"id": "sec1", "text": "x"},
                                      {"id": "b2", "text": "two"}], on_error="stop")
    assert stopped.stopped and [f.source for f in stopped.failed] == ["record 'sec1'"]
    with pytest.raises(NotFound):
        tenant.document("notes", "b2", classification=ALL)


def test_deleting_beyond_the_bound_is_forbidden_and_audited(tenant):
    writer = _writer(tenant, "public")
    with pytest.raises(Forbidden, match="outside this principal's classifications"):
        writer.delete_document("notes", "sec1")
    assert _current(tenant, "sec1")["version"] == 1
    with pytest.raises(NotFound):
        writer.delete_document("notes", "nothing-here")
    assert writer.delete_document("notes", "pub1")["expired_version"] == 1
    denied = _denials(tenant)
    assert [d.split(":")[0] for d in denied] == ["delete_document"] and "'sec1'" in denied[0]


def test_a_bounded_admin_cannot_delete_a_pipeline_holding_more_than_it_may_write(tenant):
    """Deleting the pipeline deletes every version of every document in it: a principal
    refused the delete of one of them must be refused the whole pipeline too."""
    admin = tenant.acting_as(Principal(tenant.tenant, {"notes": frozenset({"admin"})},
                                       ("public",)))
    with pytest.raises(Forbidden, match="outside this principal's classifications"):
        admin.delete_pipeline("notes")
    assert _current(tenant, "sec1")["version"] == 1
    assert [d.split(":")[0] for d in _denials(tenant)] == ["delete_pipeline"]
    # An old version beyond the bound is deleted with the pipeline too: refused as well.
    tenant.ingest("notes", [{"id": "sec1", "text": "declassified", "classification": "public"},
                            {"id": "int1", "text": "now public", "classification": "public"}])
    with pytest.raises(Forbidden):
        admin.delete_pipeline("notes")
    tenant.create_pipeline("open", embedder="none")
    tenant.ingest("open", [{"id": "pub1", "text": "Public page."}])
    tenant.acting_as(Principal(tenant.tenant, {"open": frozenset({"admin"})},
                               ("public",))).delete_pipeline("open")
    assert "open" not in [p.name for p in tenant.pipelines()]


def test_the_unbounded_writer_is_not_checked(tenant):
    report = tenant.ingest("notes", [{"id": "sec1", "text": "rewritten", "classification": "public"}])
    assert report.updated == 1
    assert tenant.delete_document("notes", "sec1")["expired_version"] == 2


def test_over_http_a_public_write_key(tenant, served):
    key = tenant.create_key(pipeline="notes", permissions="write", classification="public")
    with served.client(key["key"]) as http:
        guess = http.post("/pipelines/notes/documents",
                          json={"id": "sec1", "text": SECRET_TEXT, "classification": "secret"})
        other = http.post("/pipelines/notes/documents", json={"id": "sec1", "text": "tampered"})
        assert guess.status_code == other.status_code == 200
        for answer in (guess.json(), other.json()):
            assert (answer["unchanged"], answer["updated"], len(answer["failed"])) == (0, 0, 1)
        gone = http.delete("/pipelines/notes/documents/sec1")
        missing = http.delete("/pipelines/notes/documents/no-such-doc")
        assert (gone.status_code, gone.json()["error"]["code"]) == (403, "forbidden")
        assert missing.status_code == 404
    kept = _current(tenant, "sec1")
    assert (kept["version"], kept["text"]) == (1, SECRET_TEXT)
    owner = tenant.create_key(pipeline="*", permissions="admin", admin=True)
    with served.client(owner["key"]) as http:  # the server's counts, flushed by its read
        events = http.get("/audit", params={"action": "access.denied"}).json()
    kinds = [k for e in events for k in e["detail"]["denials"]]
    assert sorted(k.split(":")[0] for k in kinds) == ["delete_document", "ingest"], kinds


def test_quarantine_and_release_stay_within_the_bound(tenant):
    tenant.ingest("notes", [{"id": "mixed", "text": "public first"}])
    tenant.ingest("notes", [{"id": "mixed", "text": "then secret", "classification": "secret"}])
    writer = _writer(tenant, "public")
    for call in (lambda: writer.quarantine_document("notes", "mixed", reason="x"),
                 lambda: writer.release_document("notes", "mixed")):
        with pytest.raises(Forbidden, match="outside this principal's classifications"):
            call()
    with pytest.raises(NotFound):  # no version it may see: as if it did not exist
        writer.quarantine_document("notes", "sec1")
    assert tenant.quarantine_document("notes", "mixed")["changed"]
    with pytest.raises(Forbidden):
        writer.release_document("notes", "mixed")
    assert writer.quarantine_document("notes", "pub1")["changed"]
    assert writer.release_document("notes", "pub1")["changed"]
    operations = [d.split(":")[0] for d in _denials(tenant)]
    assert sorted(operations) == ["quarantine_document", "release_document", "release_document"]
