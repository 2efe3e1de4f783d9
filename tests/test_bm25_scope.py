"""bm25 within the reader's scope: non-interference, migration 011 on existing
pipelines, and random fragment ids."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

import pgbraid
from pgbraid import NotFound
from pgbraid.db.migrations import migrate
from pgbraid.ingest.prepare import prepare
from pgbraid.ingest.readers import SourceDocument
from pgbraid.pipelines import Pipeline

from .bm25_worker import scifact
from .conftest import shared
from .test_bm25_concurrency import index_state

READER = ["internal"]
GERMAN = "Die Geschwindigkeit der Zellen wird jede Sekunde im Gewebe berechnet"


def _base_documents() -> list[dict]:
    docs = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[:60]
    for i, doc in enumerate(docs):
        doc["metadata"] = {"group": i % 3}
        doc["classification"] = ["public"] if i < 40 else ["internal"] if i < 58 \
            else ["internal", "secret"]  # in scope: it holds internal
    return docs


def _secret_documents(revision: int) -> list[dict]:
    """Ten secret documents sharing the readers' query words; four German; one with a
    word nothing else holds."""
    english = [{"id": f"s{i}", "classification": ["secret"],
                "title": f"Classified cell study {i} revision {revision}",
                "text": f"quokkaplasm {revision} cells tissue protein expression cancer " * (i + 1)}
               for i in range(6)]
    german = [{"id": f"g{i}", "classification": ["secret"], "language": "de",
               "text": f"{GERMAN}. Die Proteine der Zellen {i} Fassung {revision}."}
              for i in range(4)]
    return english + german


QUERIES = [
    ("bm25", "cells tissue protein expression", None),
    ("bm25", "cancer cells", {"group": 1}),
    ("bm25", "quokkaplasm", None),  # only secret documents hold it
    ("bm25", GERMAN, None),
    ("bm25", "the of", None),
    ("fulltext", "protein expression", None),
    ("fulltext", GERMAN, None),
    ("fulltext", "quokkaplasm cells", None),
]


def _strip(value, drop: frozenset[str]):
    if isinstance(value, dict):
        return {k: _strip(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_strip(v, drop) for v in value]
    return value


def _responses(client, pipeline: str, drop=frozenset({"ms"})) -> list:
    """Every query's response (JSON, without timings), after one warming pass."""
    def run():
        return [client.search(pipeline, q, type=t, classification=READER, filters=f,
                              params={"k": 10}).model_dump(mode="json")
                for t, q, f in QUERIES]
    run()
    return _strip(run(), drop)


def test_bm25_answers_do_not_move_when_secret_content_changes(client, data_dir):
    """An internal reader's responses (hits, ranks, scores, N, avgdl, df, idf, the
    tokenizing configuration, explanations) stay identical while ten secret documents,
    some German, are added, changed and removed, and equal those of a pipeline that
    never had them."""
    client.define_classification("internal", implies=["public"])
    client.define_classification("secret", implies=["internal"])
    with_secrets, never = (f"ni-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for name in (with_secrets, never):
        client.create_pipeline(name, embedder="none")
        client.ingest(name, _base_documents())
    before = _responses(client, with_secrets)
    assert before[0]["hits"] and before[1]["hits"]
    details = [r["trace"]["retrievers"][0]["details"] for r in before]
    assert details[2]["explanation"] == "no query term occurs in any fragment in scope"
    assert details[3]["config"] == details[6]["config"] == "english"
    across = frozenset({"ms", "pipeline", "fragment_id"})  # ids differ between pipelines
    assert _strip(before, across) == _responses(client, never, across)

    client.ingest(with_secrets, _secret_documents(1))
    secret = client.search(with_secrets, "quokkaplasm", type="bm25", classification=["secret"])
    assert secret.hits  # the secret reader sees them: the change is real
    assert secret.trace.retrievers[0].details["documents"] > details[0]["documents"]
    assert _responses(client, with_secrets) == before, "after adding secret documents"
    client.ingest(with_secrets, _secret_documents(2))
    assert _responses(client, with_secrets) == before, "after changing them"
    for doc in _secret_documents(2):
        assert client.delete_document(with_secrets, doc["id"])
    assert client.search(with_secrets, "quokkaplasm", type="bm25",
                         classification=["secret"]).hits == ()
    assert _responses(client, with_secrets) == before, "after removing them"
    index_state(client, with_secrets)


def test_a_removed_document_stops_counting_and_comes_back_as_a_new_version(client, pipeline):
    client.ingest(pipeline, [{"id": "a", "text": "xylophone practice"},
                             {"id": "b", "text": "drum practice"}])
    assert client.delete_document(pipeline, "a")["expired_version"] == 1
    with pytest.raises(NotFound):  # nothing current left to delete
        client.delete_document(pipeline, "a")
    details = client.search(pipeline, "practice", type="bm25").trace.retrievers[0].details
    assert details["documents"] == 1 and details["terms"][0]["df"] == 1
    assert [v["current"] for v in client.versions(pipeline, "a")] == [False]
    client.ingest(pipeline, [{"id": "a", "text": "xylophone practice"}])
    (hit,) = client.search(pipeline, "xylophone", type="bm25").hits
    assert (hit.document_id, hit.version) == ("a", 2)
    index_state(client, pipeline)


# -- migration 011 on a pipeline written before it -------------------------------

_LEGACY_FRAGMENT = """
INSERT INTO pgbraid.fragments
    (tenant_id, pipeline_id, document_id, version_id, ordinal, section, body, language,
     ts_config, tsv, metadata, classifications, current, bm25_ordinal, bm25_length,
     bm25_terms, bm25_tfs, title, content_hash)
SELECT 'default', %(pipeline)s, %(document)s, %(version)s, %(ordinal)s, %(section)s, %(body)s,
       %(config)s, %(config)s::regconfig, to_tsvector(%(config)s::regconfig, %(body)s), '{}',
       %(classifications)s, %(current)s, %(bm25_ordinal)s, coalesce(b.length, 0),
       coalesce(b.terms, '{}'), coalesce(b.tfs, '{}'), %(title)s, 'x'
FROM (SELECT sum(array_length(positions, 1)) AS length,
             array_agg(lexeme ORDER BY lexeme) AS terms,
             array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
      FROM unnest(to_tsvector(%(config)s::regconfig, %(bm25_text)s))) AS b
"""


def _first_version(doc: dict) -> dict:
    return {**doc, "text": "An earlier abstract about protein folding in cells."}


def _legacy_pipeline(conn, docs: list[dict]) -> None:
    """A pipeline as the code before migration 011 left it: fragments with their forward
    index and ordinals (the last document twice: an expired first version, then the
    current one). The old posting tables may hold anything: 011 rebuilds from the
    forward index."""
    pid, created = conn.execute(
        "INSERT INTO pgbraid.pipelines (tenant_id, name) VALUES ('default', 'legacy')"
        " RETURNING id, created_at").fetchone()
    pipeline = Pipeline(pid, "default", "legacy", True, "english", None, None, 1000, {}, created)
    ordinal = 0
    for n, doc in enumerate(docs[:-1] + [_first_version(docs[-1]), docs[-1]]):
        expired = n == len(docs) - 1
        prepared = prepare(SourceDocument(id=doc["id"], text=doc["text"], title=doc.get("title"),
                                          classifications=tuple(doc["classification"])), pipeline)
        document = conn.execute(
            "INSERT INTO pgbraid.documents (tenant_id, pipeline_id, external_id, current_version)"
            " VALUES ('default', %s, %s, %s) ON CONFLICT (pipeline_id, external_id)"
            " DO UPDATE SET current_version = 2 RETURNING id", (pid, doc["id"], 1)).fetchone()[0]
        version = conn.execute(
            "INSERT INTO pgbraid.versions (tenant_id, document_id, version, body, content_hash,"
            " classifications) VALUES ('default', %s, %s, %s, 'x', %s) RETURNING id",
            (document, 2 if n == len(docs) else 1, doc["text"], list(prepared.classifications))
        ).fetchone()[0]
        for i, piece in enumerate(prepared.pieces):
            conn.execute(_LEGACY_FRAGMENT, {
                "pipeline": pid, "document": document, "version": version, "ordinal": i,
                "section": piece.section, "body": piece.text, "config": piece.config,
                "classifications": list(prepared.classifications), "current": not expired,
                "bm25_ordinal": ordinal, "bm25_text": piece.bm25_text, "title": doc.get("title")})
            ordinal += 1
    conn.execute("INSERT INTO pgbraid.bm25_stats (tenant_id, pipeline_id, next_ordinal, next_segment)"
                 " VALUES ('default', %s, %s, 7)", (pid, ordinal))


def _answers(client, pipeline: str, queries: list[str], held) -> list:
    out = []
    for text in queries:
        response = client.search(pipeline, text, type="bm25", classification=held,
                                 params={"k": 10})
        details = response.trace.retrievers[0].details
        out.append(([(h.document_id, h.version, round(h.score, 9)) for h in response.hits],
                    details["documents"], details["avgdl"], details["terms"], details["config"]))
    return out


def test_migration_011_rebuilds_existing_pipelines(superuser, server):
    """A database at migration 010 with a pipeline of mixed classifications and an
    expired version: after 011 its bm25 answers equal a fresh pipeline's of the same
    documents, for public and secret readers, before and after more ingestion."""
    name = f"legacy_{uuid.uuid4().hex[:8]}"
    superuser.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    dsn = server.status().dsn.replace("dbname=postgres", f"dbname={name}")
    docs = _base_documents()[:45]
    for doc in docs[30:]:
        doc["classification"] = ["secret"]
    queries = [json.loads(line)["text"] for line in shared("beir_scifact", "queries.jsonl").open()][:40]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, until=10)
            with conn.transaction():
                _legacy_pipeline(conn, docs)
        with pgbraid.connect(dsn=dsn) as client:
            client.create_pipeline("fresh", embedder="none")
            client.ingest("fresh", docs[:-1] + [_first_version(docs[-1])])
            client.ingest("fresh", docs[-1:])
            for held in (["public"], ["secret"]):
                assert _answers(client, "legacy", queries, held) == \
                       _answers(client, "fresh", queries, held), held
            more = scifact(str(shared("beir_scifact", "corpus.jsonl.gz")))[100:130]
            for target in ("legacy", "fresh"):
                client.ingest(target, [{**d, "classification": ["public"]} for d in more])
            assert _answers(client, "legacy", queries, ["secret"]) == \
                   _answers(client, "fresh", queries, ["secret"])
            index_state(client, "legacy")
    finally:
        superuser.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))


# -- random fragment ids -----------------------------------------------------------

def _fragment_ids(client, pipeline: str) -> list[int]:
    with client.session() as conn:
        return [r[0] for r in conn.execute(
            "SELECT f.id FROM pgbraid.fragments f JOIN pgbraid.pipelines p ON p.id = f.pipeline_id"
            " WHERE p.name = %s ORDER BY f.bm25_ordinal", (pipeline,))]


def test_fragment_ids_are_random_and_safe_in_json(client, pipeline):
    client.ingest(pipeline, [{"id": str(i), "text": f"note number {i}"} for i in range(40)])
    ids = _fragment_ids(client, pipeline)
    assert len(ids) == 40 and all(1 <= i <= 2**53 - 1 for i in ids)
    assert ids != sorted(ids) and max(ids) - min(ids) > 2**40  # no order, no volume
    hit = client.search(pipeline, "note", type="bm25").hits[0]
    assert hit.fragment_id in ids and json.loads(json.dumps(hit.fragment_id)) == hit.fragment_id


@pytest.mark.parametrize(("collisions", "added"), [(1, 1), (2, 0)])
def test_a_colliding_fragment_id_is_retried_once(client, pipeline, superuser, collisions, added):
    """The id default is replaced by one returning an existing id for its first
    ``collisions`` calls: one collision is retried, a second fails the document."""
    client.ingest(pipeline, [{"id": "first", "text": "an existing fragment"}])
    (taken,) = _fragment_ids(client, pipeline)
    superuser.execute("CREATE SEQUENCE pgbraid.test_collisions")
    superuser.execute("GRANT USAGE ON SEQUENCE pgbraid.test_collisions TO pgbraid_app")
    superuser.execute(psycopg.sql.SQL(
        "CREATE FUNCTION pgbraid.test_colliding_id() RETURNS bigint LANGUAGE sql AS $$"
        " SELECT CASE WHEN nextval('pgbraid.test_collisions') <= {} THEN {}::bigint"
        " ELSE pgbraid.random_fragment_id() END $$").format(
            psycopg.sql.Literal(collisions), psycopg.sql.Literal(taken)))
    superuser.execute("ALTER TABLE pgbraid.fragments ALTER COLUMN id"
                      " SET DEFAULT pgbraid.test_colliding_id()")
    try:
        report = client.ingest(pipeline, [{"id": "second", "text": "a new fragment"}])
    finally:
        superuser.execute("ALTER TABLE pgbraid.fragments ALTER COLUMN id"
                          " SET DEFAULT pgbraid.random_fragment_id()")
        superuser.execute("DROP FUNCTION pgbraid.test_colliding_id()")
        superuser.execute("DROP SEQUENCE pgbraid.test_collisions")
    assert report.added == added and len(report.failed) == 1 - added
    if not added:
        assert "duplicate key" in report.failed[0].message
        assert "fragments_pkey" not in report.failed[0].message  # no PostgreSQL message
    assert len(_fragment_ids(client, pipeline)) == 1 + added
    hits = client.search(pipeline, "fragment", type="bm25").hits
    assert sorted(h.document_id for h in hits) == ["first", "second"][:1 + added]
    index_state(client, pipeline)
