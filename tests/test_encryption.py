"""Encryption at rest: nothing of an encrypted pipeline's text on disk, every strategy
returns it opened, a wrong key / tampered / moved / truncated ciphertext fails loudly,
a key file others may read is refused; metadata fields and filters."""

from __future__ import annotations

import base64
import os
import secrets
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pgbraid
from pgbraid import encryption, strategies
from pgbraid.cli import app
from pgbraid.errors import IntegrityFailure, InvalidRequest, KeyUnavailable

from .serving import Served, served, tenant_client  # noqa: F401,F811  (fixture)

VERTICES = [("group", "G1", "Quokka Syndicate", ["d1"]), ("group", "G2", "Wombat Guild", ["d2"]),
            ("technique", "T1", "Marmalade Juggling", [])]
EDGES = [("group", "G1", "uses", "technique", "T1"), ("group", "G2", "uses", "technique", "T1")]


def _token() -> str:
    """A word of letters no other test writes (hex digits could occur in ciphertext)."""
    return "".join(secrets.choice("bcdfghjklmnpqrstvwxz") for _ in range(12))


def documents(token: str) -> list[dict]:
    return [
        {"id": "d1", "title": f"Quokka almanac {token}",
         "text": f"The zebras juggle purple marmalade {token} at the reactor every Tuesday.",
         "metadata": {"supplier": f"Acme {token} Rocket Skates", "year": 2024}},
        {"id": "d2", "title": "Wombat field guide",
         "text": "Wombats dig burrows near the reactor; the marmalade is kept cold.",
         "metadata": {"supplier": "Burrow Supplies", "year": 2023}},
        {"id": "d3", "title": "Reactor maintenance",
         "text": "The reactor maintenance schedule is weekly, with a marmalade break.",
         "metadata": {"supplier": "Reactor Corp", "year": 2022}},
    ]


@pytest.fixture()
def sealed(client) -> tuple[str, str]:
    """An encrypted pipeline with the default embedder (every strategy can run), the
    supplier field sealed too; and the token its first document holds."""
    name, token = f"enc-{uuid.uuid4().hex[:8]}", _token()
    info = client.create_pipeline(name, encrypt=True, encrypt_metadata=["supplier"])
    assert info.encrypted and info.encrypted_metadata == ("supplier",)
    report = client.ingest(name, documents(token))
    assert report.added == 3 and not report.failed
    client.load_graph_records(name, VERTICES, EDGES)
    return name, token


def _heap(superuser, server, table: str) -> bytes:
    """The bytes of a table's heap and TOAST files, after a checkpoint."""
    superuser.execute("CHECKPOINT")
    data = b""
    paths = superuser.execute("SELECT pg_relation_filepath(oid), pg_relation_filepath(reltoastrelid)"
                              " FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()
    for path in filter(None, paths):
        base = Path(server.cluster) / path
        for segment in [base, *sorted(base.parent.glob(base.name + ".*"))]:
            if segment.suffix not in (".fsm", ".vm") and segment.exists():
                data += segment.read_bytes()
    return data


def test_the_heap_holds_no_plaintext_of_an_encrypted_pipeline(client, superuser, server):
    plain, secret = _token(), _token()
    client.create_pipeline(f"plain-{plain}", embedder="none")
    client.ingest(f"plain-{plain}", documents(plain))
    name = f"enc-{secret}"
    client.create_pipeline(name, embedder="none", encrypt=True, encrypt_metadata=["supplier"])
    client.ingest(name, documents(secret))
    for table in ("pgbraid.fragments", "pgbraid.versions"):
        heap = _heap(superuser, server, table)
        # The unencrypted pipeline's phrase is on disk as it is: the scan can see text.
        assert f"juggle purple marmalade {plain}".encode() in heap, table
        assert f"Acme {plain} Rocket Skates".encode() in heap, table
        assert f"juggle purple marmalade {secret}".encode() not in heap, table
        assert f"Quokka almanac {secret}".encode() not in heap, table
        # The sealed metadata field is in no index: not one of its words is on disk.
        assert f"Acme {secret} Rocket".encode() not in heap and b"Rocket Skates" in heap
    # The search still finds it, opened.
    hit = client.search(name, f"marmalade {secret}", type="bm25").hits[0]
    assert hit.page_content == documents(secret)[0]["text"]
    assert hit.metadata["supplier"] == f"Acme {secret} Rocket Skates"


def _requests(token: str) -> list[dict]:
    walked = []
    for name in strategies.REGISTRY:
        if name == "graph":
            walked.append({"type": name, "query": "Quokka Syndicate",
                           "params": {"k": 5, "mode": "neighbours", "hops": 2}})
        elif name == "fuzzy":
            walked.append({"type": name, "query": f"zebra {token[:-1]}"})
        else:
            walked.append({"type": name, "query": f"purple marmalade {token}"})
    return walked + [{"type": "hybrid", "query": f"purple marmalade {token}"},
                     {"type": "auto", "query": f"juggle marmalade {token}"},
                     {"type": "bm25", "query": f"marmalade {token}", "as_of": "2100-01-01T00:00:00Z"}]


def test_every_strategy_returns_the_opened_text(client, sealed):
    name, token = sealed
    texts = {d["id"]: d for d in documents(token)}
    for request in _requests(token):
        response = client.search(name, **request)
        if request["type"] == "relational":
            assert response.hits == ()  # the documented no-op
            continue
        assert response.hits, request
        for hit in response.hits:
            assert hit.page_content == texts[hit.document_id]["text"], request
            assert hit.title == texts[hit.document_id]["title"], request
            assert hit.metadata == texts[hit.document_id]["metadata"], request
        if request["type"] not in ("graph", "similarity", "mmr"):
            assert response.hits[0].document_id == "d1", request


def test_highlights_come_from_the_opened_text(client, sealed):
    name, token = sealed
    for type_ in ("fulltext", "bm25", "hybrid"):
        hit = client.search(name, f"juggle {token}", type=type_,
                            params={"highlight": True}).hits[0]
        assert hit.highlights and "<mark>juggle</mark>" in " ".join(hit.highlights), type_
        assert "pgbraid:1:" not in " ".join(hit.highlights)


def test_fuzzy_matches_distinct_words_of_an_encrypted_pipeline(client, sealed, superuser):
    name, token = sealed
    hits = client.search(name, "marmelade", type="fuzzy", params={"threshold": 0.4}).hits
    assert {h.document_id for h in hits} == {"d1", "d2", "d3"}
    words = superuser.execute(
        "SELECT f.words, f.body FROM pgbraid.fragments f JOIN pgbraid.pipelines p"
        " ON p.id = f.pipeline_id JOIN pgbraid.documents d ON d.id = f.document_id"
        " WHERE p.name = %s AND d.external_id = 'd1'", (name,)).fetchone()
    assert words[0].split() == sorted(set(words[0].split())) and token in words[0].split()
    assert words[1].startswith(encryption.PREFIX)


def test_document_and_fragment_reads_are_opened(client, sealed):
    name, token = sealed
    document = client.document(name, "d1")
    assert document["text"] == documents(token)[0]["text"]
    assert document["title"] == f"Quokka almanac {token}"
    assert document["metadata"]["supplier"] == f"Acme {token} Rocket Skates"
    listed = client.documents(name)["documents"]
    assert [d["title"] for d in listed] == [d["title"] for d in documents(token)]
    hit = client.search(name, f"marmalade {token}", type="bm25").hits[0]
    fragment = client.fragment(name, hit.fragment_id)
    assert fragment["page_content"] == hit.page_content and fragment["title"] == hit.title


def test_a_sealed_metadata_field_cannot_be_filtered(client, sealed):
    name, token = sealed
    with pytest.raises(InvalidRequest, match="supplier.*encrypted"):
        client.search(name, "marmalade", type="bm25", filters={"supplier": "Reactor Corp"})
    hits = client.search(name, "marmalade", type="bm25", filters={"year": {"gte": 2023}}).hits
    assert {h.document_id for h in hits} == {"d1", "d2"}


def test_a_wrong_key_fails_loudly_and_returns_nothing(data_dir, sealed):
    name, token = sealed
    other = base64.b64encode(os.urandom(32)).decode()
    with pgbraid.connect(data_dir=data_dir, encryption_key=other) as stranger:
        with pytest.raises(KeyUnavailable, match="wrong or missing encryption key"):
            stranger.search(name, f"marmalade {token}", type="bm25")
        with pytest.raises(KeyUnavailable):
            stranger.document(name, "d1")
        with pytest.raises(KeyUnavailable):
            stranger.ingest(name, [{"id": "d9", "text": "more marmalade"}])
        assert stranger.pipeline(name).documents == 3  # nothing written
        # A search with no hits has nothing to open, and answers.
        assert stranger.search(name, "nonexistentword", type="bm25").hits == ()


def _stored(superuser, name: str, document: str) -> tuple[int, str]:
    return superuser.execute(
        "SELECT f.id, f.body FROM pgbraid.fragments f JOIN pgbraid.pipelines p"
        " ON p.id = f.pipeline_id JOIN pgbraid.documents d ON d.id = f.document_id"
        " WHERE p.name = %s AND d.external_id = %s", (name, document)).fetchone()


def test_tampered_truncated_and_moved_ciphertexts_are_refused(client, sealed, superuser):
    name, token = sealed
    fragment, body = _stored(superuser, name, "d1")
    head, data = body.rsplit(":", 1)
    raw = bytearray(base64.urlsafe_b64decode(data))
    raw[20] ^= 0x01
    tampered = f"{head}:{base64.urlsafe_b64encode(bytes(raw)).decode()}"
    other, other_body = _stored(superuser, name, "d2")
    for stored, why in ((tampered, "fails its AES-GCM check"), (body[:40], "truncated"),
                        (other_body, "fails its AES-GCM check")):
        superuser.execute("UPDATE pgbraid.fragments SET body = %s WHERE id = %s", (stored, fragment))
        with pytest.raises(IntegrityFailure, match=why):
            client.search(name, f"marmalade {token}", type="bm25")
    refused = [e for e in client.audit(action="encryption.refused", limit=10)
               if e["target"] == name]
    assert len(refused) >= 3 and refused[0]["detail"]["operation"] == "search"  # audited
    superuser.execute("UPDATE pgbraid.fragments SET body = %s WHERE id = %s", (body, fragment))
    assert client.search(name, f"marmalade {token}", type="bm25").hits[0].page_content \
        == documents(token)[0]["text"]


def test_a_key_file_others_may_read_is_refused_at_start(data_dir, server, tmp_path):
    path = tmp_path / "keys"
    path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    path.chmod(0o644)
    with pytest.raises(KeyUnavailable, match="0o644.*chmod 600"):
        pgbraid.connect(data_dir=data_dir, encryption_key_file=path)
    path.chmod(0o600)
    with pgbraid.connect(data_dir=data_dir, encryption_key_file=path) as client:
        assert client.keyring.ids() == [encryption.key_id(base64.b64decode(path.read_text()))]
    with pytest.raises(KeyUnavailable, match="does not exist"):
        pgbraid.connect(data_dir=data_dir, encryption_key_file=tmp_path / "missing")
    with pytest.raises(KeyUnavailable, match="holds 16 bytes"):
        pgbraid.connect(data_dir=data_dir, encryption_key=base64.b64encode(b"x" * 16).decode())


def test_the_embedded_default_key_file_is_private(client, sealed, data_dir):
    path = data_dir / encryption.KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600


def test_no_key_for_an_external_server_is_a_clear_error(server):
    ring = encryption.Keyring.from_settings(pgbraid.client.load_settings(dsn=server.status().dsn),
                                            embedded=False)
    with pytest.raises(KeyUnavailable, match="no encryption key is configured"):
        ring.current()


def test_encrypt_metadata_needs_encrypt(client):
    with pytest.raises(InvalidRequest, match="needs encrypt"):
        client.create_pipeline(f"x-{uuid.uuid4().hex[:6]}", embedder="none",
                               encrypt_metadata=["a"])


def test_over_http_an_encrypted_pipeline_and_a_server_with_the_wrong_key(data_dir, served,
                                                                         tmp_path):
    token = _token()
    with tenant_client(data_dir) as tenant:
        key = tenant.create_key(pipeline="*", permissions="read,write,execute,admin", admin=True)
    with served.client(key["key"]) as http:
        created = http.post("/pipelines", json={"name": "vault", "embedder": "none",
                                                "encrypt": True, "encrypt_metadata": ["supplier"]})
        assert created.status_code == 201 and created.json()["encrypted"] is True
        assert created.json()["encrypted_metadata"] == ["supplier"]
        assert http.post("/pipelines/vault/documents", json=documents(token)).json()["added"] == 3
        body = http.post("/pipelines/vault/search", json={"query": f"marmalade {token}",
                                                          "type": "bm25"}).json()
        assert body["hits"][0]["page_content"] == documents(token)[0]["text"]
        refused = http.post("/pipelines", json={"name": "v2", "encrypt_metadata": ["a"],
                                                "embedder": "none"})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    wrong = Served(data_dir, tmp_path / "wrong.log",
                   env={"PGBRAID_ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode()})
    try:
        with wrong.client(key["key"]) as http:
            answer = http.post("/pipelines/vault/search", json={"query": f"marmalade {token}",
                                                                "type": "bm25"})
            assert answer.status_code == 503 and "hits" not in answer.json()
            assert answer.json()["error"]["code"] == "key_unavailable"
    finally:
        wrong.stop()
    loose = tmp_path / "loose.keys"
    loose.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    loose.chmod(0o640)
    refusing = Served(data_dir, tmp_path / "loose.log", wait=None,
                      env={"PGBRAID_ENCRYPTION_KEY_FILE": str(loose)})
    assert refusing.process.wait(timeout=60) == 78  # EX_CONFIG, before binding a socket
    refusing.stop()
    said = CliRunner().invoke(app, ["serve"], env={"PGBRAID_DATA_DIR": str(data_dir),
                                                   "PGBRAID_ENCRYPTION_KEY_FILE": str(loose)})
    assert said.exit_code == 78 and "mode 0o640" in said.output and "chmod 600" in said.output


def test_only_the_returned_hits_are_opened(client, sealed, superuser):
    name, token = sealed
    fragment, body = _stored(superuser, name, "d3")
    superuser.execute("UPDATE pgbraid.fragments SET body = %s WHERE id = %s",
                      (body[:-8] + "AAAAAAAA", fragment))
    try:
        for type_ in ("bm25", "hybrid"):  # d3 ranks (it holds marmalade), below the page
            hits = client.search(name, f"marmalade {token}", type=type_, params={"k": 1}).hits
            assert [h.document_id for h in hits] == ["d1"]
            with pytest.raises(IntegrityFailure):
                client.search(name, f"marmalade {token}", type=type_, params={"k": 3})
    finally:
        superuser.execute("UPDATE pgbraid.fragments SET body = %s WHERE id = %s", (body, fragment))
