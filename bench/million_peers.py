"""Peers of the million bench: pg_textsearch and bm25s over the same fragments.

pg_textsearch runs in its own embedded server (DIR/pts, built from
../shared/vendor by ``pgbraid.db.extensions.build`` and preloaded there), so
the pgbraid server need not restart while its corpus is being built. Each
size gets a table of (bm25_ordinal, text) rows, the text being exactly what
pgbraid's BM25 tokenizes (title and body through the code-aware expansion),
and a bm25 index with pgbraid's defaults (english, k1 0.9, b 0.4).

bm25s gets pgbraid's own tokens of the same fragments (its forward index),
so its scores are the reference for exactness.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import bm25s
import numpy as np
import psycopg

from pgbraid.db import extensions
from pgbraid.db.server import EmbeddedServer
from pgbraid.ingest.tokens import expand_code

from .common import console

VENDORED = "pg_textsearch-1.4.0.tar.gz"

_ROWS = """
SELECT f.bm25_ordinal, coalesce(f.title, ''), f.body FROM pgbraid.fragments f
WHERE f.pipeline_id = %s AND f.current AND f.classifications && %s::text[]
ORDER BY f.bm25_ordinal
"""
_TOKENS = """
SELECT f.bm25_ordinal, f.bm25_terms, f.bm25_tfs FROM pgbraid.fragments f
WHERE f.pipeline_id = %s AND f.current AND f.classifications && %s::text[]
ORDER BY f.bm25_ordinal
"""


class TextSearch:
    """pg_textsearch over the corpus's fragments, one table and index per size."""

    def __init__(self, folder: Path, vendor: Path) -> None:
        source = vendor / VENDORED
        self.reason = None
        if shutil.which("gcc") is None or shutil.which("make") is None:
            self.reason = "no gcc or make: pg_textsearch cannot be built"
        elif not source.exists():
            self.reason = f"{source} is missing"
        if self.reason:
            return
        extensions.build(source, folder)
        self.server = EmbeddedServer(folder)
        status = self.server.start()
        self.conn = psycopg.connect(status.dsn, autocommit=True)
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")

    def ensure(self, label: str, source: psycopg.Connection, pipeline_id: int,
               classes: list[str], base: tuple[str, list[str]] | None = None) -> int:
        """The table for a size (built from the pgbraid server's rows unless there);
        ``base``: the label and classes of a smaller size's table to start from."""
        table = f"pts_{label}"
        have = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{table}_idx",)).fetchone()[0]
        if have:
            return self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        start = time.perf_counter()
        self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        self.conn.execute(f"CREATE TABLE {table} (ordinal int PRIMARY KEY, content text NOT NULL)")
        if base is not None and self.conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                                  (f"pts_{base[0]}_idx",)).fetchone()[0]:
            self.conn.execute(f"INSERT INTO {table} SELECT * FROM pts_{base[0]}")
            classes = [c for c in classes if c not in base[1]]
        with source.cursor(name=f"rows_{label}") as rows, \
                self.conn.cursor().copy(f"COPY {table} (ordinal, content) FROM STDIN") as copy:
            rows.execute(_ROWS, (pipeline_id, classes))
            for ordinal, title, body in rows:
                copy.write_row((ordinal, expand_code(f"{title}\n{body}")))
        count = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        loaded = time.perf_counter() - start
        self.conn.execute("SET maintenance_work_mem = '1GB'")
        self.conn.execute(f"CREATE INDEX {table}_idx ON {table} USING bm25 (content)"
                          " WITH (text_config = 'english', k1 = 0.9, b = 0.4)")
        self.conn.execute(f"VACUUM ANALYZE {table}")
        console.print(f"  pg_textsearch {table}: {count:,} rows, COPY {loaded:.0f} s, "
                      f"index {time.perf_counter() - start - loaded:.0f} s")
        return count

    def search(self, label: str, text: str, k: int = 10) -> list[tuple[int, float]]:
        table = f"pts_{label}"
        return [(o, -s) for o, s in self.conn.execute(
            f"SELECT ordinal, content <@> to_bm25query(%s, '{table}_idx') AS s FROM {table}"
            " ORDER BY s LIMIT %s", (text, k))]

    def close(self) -> None:
        if not self.reason:
            self.conn.close()


class Reference:
    """bm25s (lucene, k1 0.9, b 0.4) over pgbraid's tokens of the same fragments."""

    def __init__(self, source: psycopg.Connection, pipeline_id: int, classes: list[str]) -> None:
        start = time.perf_counter()
        vocabulary: dict[str, int] = {}
        ids: list[list[int]] = []
        self.ordinals: list[int] = []
        with source.cursor(name="tokens") as rows:
            rows.execute(_TOKENS, (pipeline_id, classes))
            for ordinal, terms, tfs in rows:
                self.ordinals.append(ordinal)
                ids.append([vocabulary.setdefault(t, len(vocabulary))
                            for t, n in zip(terms, tfs) for _ in range(n)])
        self.vocabulary = vocabulary
        self.model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        self.model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocabulary),
                         show_progress=False)
        console.print(f"  bm25s: {len(ids):,} fragments indexed in "
                      f"{time.perf_counter() - start:.0f} s")

    @property
    def fragments(self) -> int:
        return len(self.ordinals)

    def top(self, tokens: list[str], k: int = 10) -> list[tuple[int, float]]:
        known = [self.vocabulary[t] for t in tokens if t in self.vocabulary]
        if not known:
            return []
        scores = self.model.get_scores(known)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [(self.ordinals[i], float(scores[i])) for i in top if scores[i] > 0]


class Answers:
    """bm25s's top 10 for each query text, kept in a file beside the corpus (``--quick``
    reads them instead of indexing 1M fragments again, ~400 s): used only while the
    corpus is the one they were computed on (its fragments in scope, next ordinal and
    next segment)."""

    def __init__(self, path: Path, source: psycopg.Connection, pipeline_id: int,
                 classes: list[str]) -> None:
        self.path = path
        self.fingerprint = list(source.execute(
            "SELECT (SELECT count(*) FROM pgbraid.fragments f WHERE f.pipeline_id = %(p)s"
            "        AND f.current AND f.classifications && %(c)s::text[]),"
            "       b.next_ordinal, b.next_segment FROM pgbraid.bm25_stats b"
            " WHERE b.pipeline_id = %(p)s", {"p": pipeline_id, "c": classes}).fetchone())
        kept = json.loads(path.read_text()) if path.exists() else {}
        self.answers: dict[str, list] = (kept.get("answers", {})
                                         if kept.get("fingerprint") == self.fingerprint else {})
        self.fragments = self.fingerprint[0]

    def missing(self, texts: list[str]) -> list[str]:
        return [t for t in texts if t not in self.answers]

    def fill(self, reference: "Reference", tokens: dict[str, list[str]], texts: list[str]) -> None:
        for text in texts:
            self.answers[text] = [list(pair) for pair in reference.top(tokens[text])]
        self.path.write_text(json.dumps({"fingerprint": self.fingerprint,
                                         "answers": self.answers}))

    def top(self, text: str) -> list[tuple[int, float]]:
        return [tuple(pair) for pair in self.answers[text]]
