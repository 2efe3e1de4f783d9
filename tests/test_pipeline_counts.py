"""Pipeline counts (``pipeline``, ``pipelines``, GET /pipelines): exact, and only of
what the principal may see: its classifications (with what they imply), its
tenant, never a quarantined document, per pipeline in a listing."""

from __future__ import annotations

import uuid

import pytest

import pgbraid
from pgbraid.scope import Principal

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
        everything = counts(admin.pipeline(NAME))
        secret_fragments = everything[2] - 3  # p, p2, i: one fragment each
        assert secret_fragments > 1  # the long one is several
        assert everything == (4, 5, 3 + secret_fragments)  # q quarantined, i has 2 versions
    expected = {(): (2, 2, 2), (INTERNAL,): (3, 4, 3), (SECRET,): (4, 5, 3 + secret_fragments)}
    for held, want in expected.items():
        with tenant(data_dir, a, held) as bounded:
            assert counts(bounded.pipeline(NAME)) == want, held
            assert [counts(p) for p in bounded.pipelines() if p.name == NAME] == [want], held


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
        assert counts(admin.pipeline(NAME)) == (6, 7, 6)


def test_tenants_with_the_same_pipeline_name_count_their_own(data_dir, tenants):
    a, b = tenants
    with tenant(data_dir, b) as other:
        listed = {p.name: counts(p) for p in other.pipelines()}
        assert listed == {NAME: (1, 1, 1), OTHER: (3, 3, 3)}
        assert counts(other.pipeline(NAME)) == (1, 1, 1)
    with tenant(data_dir, a) as mine:
        assert [p.name for p in mine.pipelines()] == [NAME]
        assert counts(mine.pipeline(NAME))[0] == 4
