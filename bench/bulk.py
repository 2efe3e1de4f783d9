"""A bulk path into a pipeline for bench corpora: the rows ingestion writes, set-wise.

Ingesting a million fragments one document per savepoint takes hours on this
machine; this writes the same rows with one statement per table and batch:
documents, their first versions (one version time per batch, from the same
clock), fragments with the same SQL expressions as ingest/fragments._ANALYSE
(tsvector, BM25 forward index; fuzzy's words, and ingest/dictionary for them), and
the postings through bm25_index's own Pending / flush / merge_since, so segments,
statistics and merges are those of ingestion. Pieces come from ingest.prepare, as
ingestion makes them.

Only for new documents of a pipeline without an embedder or encryption (what
the lexical bench needs); tests/test_bench_bulk.py checks, on a sample, that it leaves the
same fragments, versions, postings and statistics as ``Client.ingest``.
"""

from __future__ import annotations

from typing import Callable, Iterable

import psycopg
from psycopg.types.json import Jsonb

from pgbraid import encryption
from pgbraid.ingest import bm25_index, clock, dictionary
from pgbraid.ingest.bm25_index import Pending
from pgbraid.ingest.prepare import Prepared, prepare
from pgbraid.ingest.readers import ReadError, items
from pgbraid.pipelines import Pipeline

_DOCUMENTS = """
INSERT INTO pgbraid.documents (pipeline_id, external_id, current_version)
SELECT %(pipeline)s, id, 1 FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n
RETURNING id
"""

_VERSIONS = """
INSERT INTO pgbraid.versions (pipeline_id, document_id, version, title, body, content_hash,
                              metadata, classifications, language, source, valid_from)
SELECT %(pipeline)s, d, 1, t, b, h, m, c::text[], l, s, %(stamp)s
FROM unnest(%(documents)s::bigint[], %(titles)s::text[], %(bodies)s::text[], %(hashes)s::text[],
            %(metadata)s::jsonb[], %(classes)s::text[], %(languages)s::text[], %(sources)s::text[])
     WITH ORDINALITY AS u(d, t, b, h, m, c, l, s, n)
ORDER BY n
RETURNING id
"""

# ingest/fragments._ANALYSE's expressions, one row per element of the arrays.
_FRAGMENTS = """
INSERT INTO pgbraid.fragments
    (pipeline_id, document_id, version_id, ordinal, section, body, language, ts_config,
     tsv, metadata, classifications, bm25_ordinal, bm25_length, bm25_terms, bm25_tfs, title,
     content_hash, word_set)
SELECT %(pipeline)s, u.document, u.version, u.ordinal, u.section, u.body,
       u.config, u.config::regconfig,
       CASE WHEN %(fulltext)s THEN
           setweight(to_tsvector(u.config::regconfig, coalesce(u.title, '')), 'A')
           || setweight(to_tsvector(u.config::regconfig, coalesce(u.section, '')), 'B')
           || setweight(to_tsvector(u.config::regconfig, u.body), 'C')
       END,
       u.metadata, u.classes::text[], u.bm25_ordinal,
       coalesce(b.length, 0), coalesce(b.terms, '{}'), coalesce(b.tfs, '{}'), u.title,
       u.content_hash, string_to_array(u.words, ' ')
FROM unnest(%(documents)s::bigint[], %(versions)s::bigint[], %(ordinals)s::int[],
            %(sections)s::text[], %(bodies)s::text[], %(configs)s::text[], %(titles)s::text[],
            %(classes)s::text[], %(metadata)s::jsonb[], %(bm25_ordinals)s::int[],
            %(bm25_texts)s::text[], %(content_hashes)s::text[], %(words)s::text[])
     WITH ORDINALITY AS u(document, version, ordinal, section, body, config, title, classes,
                          metadata, bm25_ordinal, bm25_text, content_hash, words, n)
CROSS JOIN LATERAL (
    SELECT sum(array_length(positions, 1)) AS length,
           array_agg(lexeme ORDER BY lexeme) AS terms,
           array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
    FROM unnest(to_tsvector(u.config::regconfig, u.bm25_text))) AS b
ORDER BY u.n
RETURNING bm25_ordinal, bm25_length, bm25_terms, bm25_tfs, ts_config::text, classifications
"""


def prepared(pipeline: Pipeline, records: Iterable[dict]) -> list[Prepared]:
    """Records in the JSONL ingestion format (id, title, text, classification, language)."""
    out = []
    for doc in items(records):
        if isinstance(doc, ReadError):
            raise ValueError(f"{doc.source}: {doc.message}")
        out.append(prepare(doc, pipeline))
    return out


def load(session: Callable, pipeline: Pipeline, batches: Iterable[list[Prepared]], *,
         first_segment: int | None = None, partitions: Iterable[int] = ()) -> int:
    """Write batches of prepared new documents as one ingest call; returns the fragments.

    A call interrupted (each batch commits alone) is resumed by passing the segment
    it began at and the partitions it wrote: its merges then are those of one call."""
    if pipeline.embedder or encryption.encrypted(pipeline):
        raise ValueError("the bulk path writes no embeddings and seals nothing: use a pipeline "
                         "without embedder or encryption")
    with session() as conn:
        bm25_index.lock(conn, pipeline.id)
        bm25_index.ensure_stats(conn, pipeline.id)
        first = bm25_index.next_segment(conn, pipeline.id) if first_segment is None \
            else first_segment
    written, partitions = 0, set(partitions)
    for batch in batches:
        with session() as conn:
            bm25_index.lock(conn, pipeline.id)
            count, parts = _write(conn, pipeline, batch, first)
            written += count
            partitions |= parts
    if partitions:
        with session() as conn:
            bm25_index.merge_since(conn, pipeline.id, first, partitions)
    return written


def _write(conn: psycopg.Connection, pipeline: Pipeline, batch: list[Prepared],
           first_segment: int) -> tuple[int, set[int]]:
    keys = {bm25_index.partition_key(p.classifications) for p in batch}
    partition_of = bm25_index.partitions(conn, pipeline.id, keys)
    stamp = clock.stamp(conn, pipeline.id)
    documents = [r[0] for r in conn.execute(
        _DOCUMENTS, {"pipeline": pipeline.id, "ids": [p.doc.id for p in batch]}).fetchall()]
    classes = [_array(p.classifications) for p in batch]
    versions = [r[0] for r in conn.execute(_VERSIONS, {
        "pipeline": pipeline.id, "stamp": stamp, "documents": documents, "titles": [p.doc.title for p in batch],
        "bodies": [p.doc.text for p in batch], "hashes": [p.digest for p in batch],
        "classes": classes, "metadata": [Jsonb(p.doc.metadata) for p in batch],
        "sources": [p.doc.source for p in batch],
        "languages": [p.pieces[0].config if p.pieces else pipeline.language for p in batch]}
    ).fetchall()]
    rows: dict[str, list] = {name: [] for name in (
        "documents", "versions", "ordinals", "sections", "bodies", "configs", "titles", "classes",
        "metadata", "bm25_ordinals", "bm25_texts", "content_hashes", "words")}
    base = bm25_index.reserve_ordinals(conn, pipeline.id, sum(len(p.pieces) for p in batch))
    for p, document, version, cls in zip(batch, documents, versions, classes):
        for ordinal, piece in enumerate(p.pieces):
            for name, value in (("documents", document), ("versions", version),
                                ("ordinals", ordinal), ("sections", piece.section),
                                ("bodies", piece.text), ("configs", piece.config),
                                ("titles", p.doc.title), ("classes", cls),
                                ("metadata", Jsonb(p.doc.metadata)),
                                ("bm25_ordinals", base), ("bm25_texts", piece.bm25_text),
                                ("content_hashes", piece.content_hash),
                                ("words", piece.words)):
                rows[name].append(value)
            base += 1
    pending = Pending()
    cursor = conn.execute(_FRAGMENTS, {"pipeline": pipeline.id, "fulltext": pipeline.fulltext,
                                       **rows})
    dictionary.add(conn, pipeline.id, {w for words in rows["words"] for w in words.split()})
    for ordinal, length, terms, tfs, config, held in cursor.fetchall():
        pending.add(ordinal, length, terms, tfs, config=config,
                    partition=partition_of[bm25_index.partition_key(tuple(held))])
    return len(pending), bm25_index.flush(conn, pipeline.id, pending, first_segment)


def _array(values: tuple[str, ...]) -> str:
    """A text[] literal (unnest cannot take an array of arrays of different lengths)."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                          for v in values) + "}"
