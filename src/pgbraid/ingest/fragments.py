"""Fragment rows: the text-search analysis of a batch, and writing its rows in bulk.

Analysis (``analyse``) runs every ``to_tsvector`` of a batch in one statement on a
connection of its own, before the batch's write transaction and outside the
pipeline's BM25 lock: the fulltext ``tsvector`` and the BM25 forward index (length,
sorted lexemes, term frequencies) of each piece. So that work runs on a second
core while the previous batch is written, and concurrent ingesting processes do it
side by side; the locked write is left with inserting rows and their indexes.

Rows are written through a temporary table: ``COPY`` into it (COPY FROM is refused
on a table under row-level security), then one ``INSERT ... SELECT`` into
``pgbraid.fragments``, whose policy then checks every row.

``stored_version`` and ``stored_fragments`` are the one step that turns what was
read and analysed into the values stored: sealed by encryption.py when the
pipeline is encrypted (a fragment then gets its random id here, as the sealed
values' associated data names it), as given otherwise. Every write path goes
through them, after analysis, which reads the plain text.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from .. import encryption
from ..pipelines import Pipeline

if TYPE_CHECKING:
    from .prepare import Piece, Prepared

# Per piece, in order: the fulltext tsvector (as text: its input form is exact), and
# BM25's length, lexemes and their frequencies from the code-expanded text, the last
# two also as text (the rows' COPY sends them so: psycopg's array dumper, in Python,
# took a quarter of the writer's CPU). A piece whose BM25 text is its title and body
# unchanged (``_one_pass``) is sent without it (NULL): its BM25 figures are read off
# the fulltext vector, whose title (A) and body (C) parts hold the same lexemes with
# the same counts, so to_tsvector runs once. Unless a lexeme there has 255 positions
# or more: to_tsvector keeps at most 255 a lexeme and `||` 256, so the counts might
# differ, and the text is analysed again.
_ANALYSE = """
SELECT v.tsv::text,
       coalesce(b.length, 0)::int, coalesce(b.terms, '{}'), coalesce(b.tfs, '{}'),
       coalesce(b.terms, '{}')::text, coalesce(b.tfs, '{}')::text
FROM unnest(%(configs)s::regconfig[], %(titles)s::text[], %(sections)s::text[],
            %(bodies)s::text[], %(bm25)s::text[]) WITH ORDINALITY AS x(c, t, s, b, m, n)
CROSS JOIN LATERAL (
    SELECT CASE WHEN %(fulltext)s THEN
           setweight(to_tsvector(x.c, coalesce(x.t, '')), 'A')
           || setweight(to_tsvector(x.c, coalesce(x.s, '')), 'B')
           || setweight(to_tsvector(x.c, x.b), 'C')
    END AS tsv OFFSET 0) v  -- OFFSET 0: computed once, not at each use
CROSS JOIN LATERAL (
    SELECT CASE WHEN x.m IS NULL AND NOT EXISTS (
                    SELECT FROM unnest(v.tsv) u WHERE array_length(u.positions, 1) >= 255)
                THEN v.tsv
                ELSE to_tsvector(x.c, coalesce(x.m, coalesce(x.t, '') || E'\\n' || x.b))
           END AS vector OFFSET 0) w
CROSS JOIN LATERAL (
    SELECT sum(array_length(positions, 1)) AS length,
           array_agg(lexeme ORDER BY lexeme) AS terms,
           array_agg(array_length(positions, 1) ORDER BY lexeme) AS tfs
    FROM unnest(w.vector)) AS b
ORDER BY x.n
"""
# Past this many characters a text may have positions past tsvector's last (16,383),
# which are merged: the two analyses could then count differently.
_ONE_PASS_CHARS = 16_000

COLUMNS = ("id", "pipeline_id", "document_id", "version_id", "ordinal", "section", "body",
           "language", "ts_config", "tsv", "metadata", "classifications", "bm25_ordinal",
           "bm25_length", "bm25_terms", "bm25_tfs", "title", "content_hash", "key_id", "words",
           "quarantined", "word_set")
# The stored value of a plain column (encryption.seal_fragments adds them to a row).
_STORED = {"title": "stored_title", "section": "stored_section", "body": "stored_body",
           "metadata": "stored_metadata"}
_STAGE = "pgbraid_fragments_in"


def stored_version(sealing: encryption.Sealing | None, document_id: int, number: int,
                   title: str | None, body: str, metadata: dict[str, Any]) -> tuple[Any, ...]:
    """Version ``number`` of document row ``document_id``: (title, body, metadata, key id)
    as stored."""
    title, body, metadata, key_id = encryption.seal_version(sealing, document_id, number,
                                                            title, body, metadata)
    return title, body, psycopg.types.json.Jsonb(metadata), key_id


def stored_fragments(sealing: encryption.Sealing | None,
                     rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fragment rows (``row``) with their stored values, ``id`` (None: the column's
    default), ``key_id`` and ``words`` added."""
    for number, group in groupby(rows, key=lambda r: r["version"]):
        encryption.seal_fragments(sealing, number, list(group))
    return rows


def analyse(conn: psycopg.Connection, pipeline: Pipeline, batch: list["Prepared"]) -> None:
    """Fill each piece's ``tsv`` and ``bm25`` (length, terms, tfs) in one statement."""
    pieces = [(p, piece) for p in batch for piece in p.pieces]
    if not pieces:
        return
    params = {
        "fulltext": pipeline.fulltext,
        "configs": [piece.config for _, piece in pieces],
        "titles": [p.doc.title for p, _ in pieces],
        "sections": [piece.section for _, piece in pieces],
        "bodies": [piece.text for _, piece in pieces],
        "bm25": [None if _one_pass(pipeline, p, piece) else piece.bm25_text
                 for p, piece in pieces],
    }
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(_ANALYSE, params).fetchall()
    for (_, piece), (tsv, length, terms, tfs, *forward) in zip(pieces, rows):
        piece.tsv = tsv
        piece.bm25 = (length, terms, tfs)
        piece.forward = tuple(forward)


def _one_pass(pipeline: Pipeline, prepared: "Prepared", piece: "Piece") -> bool:
    """Whether BM25's figures can be read off the piece's fulltext vector: its BM25 text
    is the title and body as they are (the code expansion changed nothing), there is no
    section (weight B, not in BM25's text), and nothing can join a word of the title to
    one of the body (a tag, ``<...>``, is the parser's one token that spans whitespace)."""
    title = prepared.doc.title or ""
    return (pipeline.fulltext and piece.section is None and "<" not in title
            and len(piece.bm25_text) < _ONE_PASS_CHARS
            and piece.bm25_text == f"{title}\n{piece.text}")


def row(pipeline: Pipeline, prepared: "Prepared", owners: tuple[int, int, int], ordinal: int,
        bm25_ordinal: int, *, quarantined: bool = False) -> dict[str, Any]:
    """The row of piece ``ordinal`` of (document row, version row, version number), of a
    ``quarantined`` document or not."""
    doc, piece = prepared.doc, prepared.pieces[ordinal]
    length = piece.bm25[0]
    terms, tfs = piece.forward
    return {"pipeline_id": pipeline.id, "document_id": owners[0], "version_id": owners[1],
            "version": owners[2], "ordinal": ordinal, "section": piece.section,
            "body": piece.text, "language": piece.config, "ts_config": piece.config,
            "tsv": piece.tsv, "metadata": doc.metadata,
            "classifications": list(prepared.classifications), "bm25_ordinal": bm25_ordinal,
            "bm25_length": length, "bm25_terms": terms, "bm25_tfs": tfs, "title": doc.title,
            "content_hash": piece.content_hash, "quarantined": quarantined,
            "word_set": piece.words}


def insert(conn: psycopg.Connection, sealing: encryption.Sealing | None,
           rows: list[dict[str, Any]]) -> list[int]:
    """Insert fragment rows (``row``), as stored; their ids, in the rows' order. Rows
    without an id (a plain pipeline's) get the column's default. (Their words join the
    fuzzy dictionary at the end of the batch: ingest/dictionary.py.)"""
    stored = stored_fragments(sealing, rows)
    columns = [c for c in COLUMNS if c != "id" or any(r["id"] is not None for r in stored)]
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    values = sql.SQL(", ").join(
        sql.SQL("string_to_array({}, ' ')").format(sql.Identifier("s", c)) if c == "word_set"
        else sql.Identifier("s", c) for c in columns)
    stage = sql.Identifier(_STAGE)
    conn.execute(sql.SQL(
        "CREATE TEMPORARY TABLE {} ON COMMIT DROP AS"
        " SELECT {} FROM pgbraid.fragments WITH NO DATA").format(stage, names))
    # psycopg's array dumper runs in Python: a text per row is a fraction of its cost
    # (word_set goes space-separated, as its words hold no whitespace, split in SQL).
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN word_set TYPE text").format(stage))
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(stage, names)) as copy:
            for row in stored:
                copy.write_row([_dumpable(name, row[_STORED.get(name, name)])
                                for name in columns])
        # FROM the pipeline's bm25_stats row: see bm25_index.ensure_stats (Citus).
        cur.execute(sql.SQL(
            "INSERT INTO pgbraid.fragments ({names}) SELECT {values} FROM pgbraid.bm25_stats anchor"
            " JOIN {stage} s ON s.pipeline_id = anchor.pipeline_id WHERE anchor.pipeline_id = %s"
            " RETURNING id, version_id, ordinal").format(names=names, values=values, stage=stage),
            (rows[0]["pipeline_id"],))
        ids = {(version, ordinal): fragment for fragment, version, ordinal in cur.fetchall()}
        cur.execute(sql.SQL("DROP TABLE {}").format(stage))
    return [ids[(row["version_id"], row["ordinal"])] for row in rows]


def _dumpable(name: str, value: Any) -> Any:
    return psycopg.types.json.Jsonb(value) if name == "metadata" and isinstance(value, dict) else value
