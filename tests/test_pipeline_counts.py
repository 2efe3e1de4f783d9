"""Pipeline counts (``pipeline``, ``pipelines``, GET /pipelines): exact, and only of
what the principal may see: its classifications (with what they imply), its
tenant, never a quarantined document, per pipeline in a listing."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid.cli import app
from pgbraid.scope import Principal

from .serving import served  # noqa: F401  (fixture)

TAG = uuid.uuid4().hex[:6]
SECRET, INTERNAL = f"secret-{TAG}", f"internal-{TAG}"
NAME = f"counted-{TAG}"  # the same pipeline name in two tenants
OTHER = f"counted-other-{TAG}"
LONG = " ".join(f"Sentence {i} about the reactor's cooling loop and its pumps." for i in range(40))


def tenant(data_dir, name: str, classifications=None) -> pgbraid.Client:
    principal = Principal.local(name)
    if classifications is not None:
        principal = Principal(name, principal.permissions, tuple(classifications), True)
    return pgbraid.connect(data_dir=data_dir, principal=principal)


@pytest.fixture(scope="module")
def tenants(data_dir, server):
    """Tenant a: public, internal, secret documents (one of them long: several
    fragments; one with a second version; one quarantined); tenant b: the same
    pipeline name with other documents, and a second pipeline."""
    a, b = f"ca{TAG}", f"cb{TAG}"
    with tenant(data_dir, a) as admin:
        admin.define_classification(SECRET, implies=[INTERNAL])
        admin.create_pipeline(NAME, embedder="none", chunk_size=200)
        admin.ingest(NAME, [
            {"id": "p", "text": "reactor visitor centre"},
            {"id": "p2", "text": "reactor car park"},
            {"id": "i", "text": "reactor maintenance", "classification": [INTERNAL]},
            {"id": "s", "text": LONG, "classification": [SECRET]},
            {"id": "q", "text": "reactor rumours", "classification": [INTERNAL]}])
        admin.ingest(NAME, [{"id": "i", "text": "reactor maintenance, revised",
                             "classification": [INTERNAL]}])
        admin.quarantine_document(NAME, "q", reason="under review")
    with tenant(data_dir, b) as admin:
        admin.create_pipeline(NAME, embedder="none")
        admin.create_pipeline(OTHER, embedder="none")
        admin.ingest(NAME, [{"id": "x", "text": "another tenant's note"}])
        admin.ingest(OTHER, [{"id": f"y{i}", "text": f"note {i}"} for i in range(3)])
    return a, b


def counts(info) -> tuple[int, int, int]:
    return info.documents, info.versions, info.fragments


def test_counts_are_exact_for_each_classification(data_dir, tenants):
    a, _ = tenants
    with tenant(data_dir, a) as admin:
        everything = counts(admin.pipeline(NAME, classification=[SECRET, "public"]))
        secret_fragments = everything[2] - 3  # p, p2, i: one fragment each
        assert secret_fragments > 1  # the long one is several
        assert everything == (4, 5, 3 + secret_fragments)  # q quarantined, i has 2 versions
        # holding nothing named, the admin holds public, as in its reads and searches
        assert counts(admin.pipeline(NAME)) == (2, 2, 2)
    expected = {(): (2, 2, 2), (INTERNAL,): (3, 4, 3), (SECRET,): (4, 5, 3 + secret_fragments)}
    for held, want in expected.items():
        with tenant(data_dir, a, held) as bounded:
            assert counts(bounded.pipeline(NAME)) == want, held
            assert [counts(p) for p in bounded.pipelines() if p.name == NAME] == [want], held
            assert counts(bounded.pipeline(NAME, classification="public")) == (2, 2, 2)
        with tenant(data_dir, a) as admin:
            named = [*held, "public"]
            assert counts(admin.pipeline(NAME, classification=named)) == want, held
            assert [counts(p) for p in admin.pipelines(classification=named)
                    if p.name == NAME] == [want], held


def _principal(name: str, permissions: set[str], classifications=None) -> Principal:
    return Principal(name, {"*": frozenset(permissions)}, classifications)


@pytest.mark.parametrize("permissions, bound", [
    ({"read"}, None), ({"read", "write"}, None), ({"read"}, (INTERNAL,)),
    ({"read", "write"}, (SECRET,)), ({"read", "write", "execute", "admin"}, None),
])
def test_pipeline_show_counts_what_document_list_lists(data_dir, tenants, permissions, bound):
    """For every principal, bounded or not, with or without naming classifications: the
    document count is the listing's length, less the quarantined documents a writer
    sees flagged there (counts leave them out for everyone). An unbounded key counted
    every classification while its listing held only public."""
    a, _ = tenants
    principal = _principal(a, permissions, bound)
    with pgbraid.connect(data_dir=data_dir, principal=principal) as client:
        for named in (None, "public", INTERNAL, [*(bound or (SECRET,)), "public"]):
            asked = {} if named is None else {"classification": named}
            listed = client.documents(NAME, **asked)["documents"]
            searchable = [d for d in listed if not d["quarantined"]]
            assert client.pipeline(NAME, **asked).documents == len(searchable), named
            assert [p.documents for p in client.pipelines(**asked)] == [len(searchable)], named


def test_counts_refuse_what_the_principal_may_not_hold(data_dir, tenants):
    a, _ = tenants
    with tenant(data_dir, a, (INTERNAL,)) as bounded:
        with pytest.raises(pgbraid.Forbidden, match=SECRET):
            bounded.pipeline(NAME, classification=SECRET)
        with pytest.raises(pgbraid.Forbidden, match=SECRET):
            bounded.pipelines(classification=SECRET)


def test_a_count_never_includes_a_hidden_document(data_dir, server):
    """A public reader's counts move when a public document comes, not when a secret,
    an internal or a quarantined one does (a tenant of its own: nothing to clean up)."""
    c = f"cc{uuid.uuid4().hex[:8]}"
    with tenant(data_dir, c, ()) as public, tenant(data_dir, c) as admin:
        admin.define_classification(SECRET, implies=[INTERNAL])
        admin.create_pipeline(NAME, embedder="none")
        admin.ingest(NAME, [{"id": "seen", "text": "reactor visitor centre"}])
        assert counts(public.pipeline(NAME)) == (1, 1, 1)
        admin.ingest(NAME, [{"id": f"hidden-{i}", "text": "reactor core", "classification":
                             [SECRET if i % 2 else INTERNAL]} for i in range(4)])
        admin.ingest(NAME, [{"id": "shown-then-quarantined", "text": "reactor lunch menu"}])
        admin.quarantine_document(NAME, "shown-then-quarantined")
        assert counts(public.pipeline(NAME)) == (1, 1, 1)
        assert [counts(p) for p in public.pipelines()] == [(1, 1, 1)]
        admin.ingest(NAME, [{"id": "seen", "text": "reactor visitor centre, now secret",
                             "classification": [SECRET]}])
        assert counts(public.pipeline(NAME)) == (0, 1, 0)  # its public first version stays
        admin.ingest(NAME, [{"id": "shown", "text": "reactor opening hours"}])
        assert counts(public.pipeline(NAME)) == (1, 2, 1)
        assert counts(admin.pipeline(NAME)) == (1, 2, 1)  # holding public, as by default
        assert counts(admin.pipeline(NAME, classification=[SECRET, "public"])) == (6, 7, 6)


def test_tenants_with_the_same_pipeline_name_count_their_own(data_dir, tenants):
    a, b = tenants
    with tenant(data_dir, b) as other:
        listed = {p.name: counts(p) for p in other.pipelines()}
        assert listed == {NAME: (1, 1, 1), OTHER: (3, 3, 3)}
        assert counts(other.pipeline(NAME)) == (1, 1, 1)
    with tenant(data_dir, a) as mine:
        assert [p.name for p in mine.pipelines()] == [NAME]
        assert counts(mine.pipeline(NAME, classification=[SECRET, "public"]))[0] == 4


def _listed(body: dict) -> int:
    return sum(not d["quarantined"] for d in body["documents"])


def test_the_cli_and_http_show_the_counts_the_listing_lists(data_dir, tenants, served):
    """`pgbraid pipeline show` (the local admin) and GET /pipelines/{p} (an unbounded key):
    the documents `document list` and GET .../documents list, with and without naming
    classifications."""
    a, _ = tenants
    env = {"PGBRAID_DATA_DIR": str(data_dir), "PGBRAID_TENANT": a}
    runner = CliRunner()
    for named in ([], ["--classification", f"{SECRET},public"]):
        shown = json.loads(runner.invoke(app, ["pipeline", "show", NAME, *named, "--json"],
                                         env=env).stdout)
        listed = json.loads(runner.invoke(app, ["document", "list", NAME, *named, "--json"],
                                          env=env).stdout)
        assert shown["documents"] == _listed(listed) == (4 if named else 2), named
    with tenant(data_dir, a) as admin:
        key = admin.create_key(pipeline=NAME, permissions="read")["key"]
    with served.client(key) as http:
        for query in ("", f"?classification={SECRET},public"):
            shown = http.get(f"/pipelines/{NAME}{query}").json()
            listed = http.get(f"/pipelines/{NAME}/documents{query}").json()
            assert shown["documents"] == _listed(listed) == (4 if query else 2), query
            assert [p["documents"] for p in http.get(f"/pipelines{query}").json()] == [
                shown["documents"]]
        refused = http.get(f"/pipelines/{NAME}?classfication=public")
        assert refused.status_code == 400 and "classfication" in refused.text
