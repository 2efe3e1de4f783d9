"""Turn a source document into fragments ready to write: chunks, languages, hashes.

Pure Python (no database), so it can run ahead of the writer; the embedding
of a batch overlaps the writing of the previous one (see writer.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from ..encryption import distinct_words
from ..errors import InvalidRequest
from ..models import DEFAULT_CLASSIFICATION
from ..pipelines import Pipeline
from .chunking import Chunk, chunk
from .language import config_for, detect_many
from .readers import SourceDocument
from .tokens import expand_code

DETECT_CHARS = 400  # ~60 words: as sure as 4,000 characters on SciFact, CISI, Godot, ESET


@dataclass
class Piece:
    text: str
    section: str | None
    config: str
    bm25_text: str
    content_hash: str
    """Hash of the text that is embedded: a piece with the same hash reuses its vector."""
    tsv: str | None = None
    """Its fulltext tsvector, and BM25 (length, terms, tfs): filled by fragments.analyse."""
    bm25: tuple[int, list[str], list[int]] = (0, [], [])
    forward: tuple[str, str] = ("{}", "{}")
    """BM25's terms and tfs as PostgreSQL array literals (fragments.analyse)."""
    words: str = ""
    """fuzzy's words of the piece (``fragments.word_set``; encryption.distinct_words)."""


@dataclass
class Prepared:
    doc: SourceDocument
    classifications: tuple[str, ...]
    digest: str
    pieces: list[Piece]
    vectors: np.ndarray | None = None
    needs_embedding: list[int] = field(default_factory=list)

    def embedding_inputs(self) -> list[str]:
        return [embedding_text(self.doc.title, self.pieces[i].text) for i in self.needs_embedding]


def embedding_text(title: str | None, text: str) -> str:
    return f"{title}\n{text}" if title else text


def content_hash(doc: SourceDocument, classifications: tuple[str, ...]) -> str:
    canonical = json.dumps([doc.title, doc.text, doc.metadata, list(classifications), doc.language,
                            doc.embedding], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def prepare(doc: SourceDocument, pipeline: Pipeline, detected: str | None = None) -> Prepared:
    """The document's fragments; ``detected``: its language as ``detect_languages`` found
    it (detected here when not given)."""
    classifications = doc.classifications or (DEFAULT_CLASSIFICATION,)
    doc_config = _document_config(doc, pipeline, detected)
    # A supplied vector describes the whole text: such a document is one fragment.
    chunks = ([Chunk(doc.text, None)] if doc.embedding is not None
              else chunk(doc.text, target=pipeline.chunk_size))
    pieces = []
    for piece in chunks:
        embedded = embedding_text(doc.title, piece.text)
        pieces.append(Piece(piece.text, piece.section, doc_config,
                            expand_code(f"{doc.title or ''}\n{piece.text}"),
                            hashlib.sha256(embedded.encode()).hexdigest(),
                            words=distinct_words(doc.title, piece.section, piece.text)))
    return Prepared(doc, classifications, content_hash(doc, classifications), pieces)


def detect_languages(docs: list[SourceDocument], pipeline: Pipeline) -> list[str | None]:
    """The configuration detected for each document that names no language (None for
    those that do), the batch in one pass of the model (language.detect_many).

    Once per document, on its opening: its fragments share its language. (Per fragment
    it took 40% of lexical ingestion's Python time on SciFact; the model's cost grows
    with the text up to its 4,000-character window.)"""
    todo = [i for i, doc in enumerate(docs) if not doc.language]
    found: list[str | None] = [None] * len(docs)
    texts = [docs[i].text[:DETECT_CHARS] for i in todo]
    for i, config in zip(todo, detect_many(texts, default=pipeline.language, min_confidence=0.5)):
        found[i] = config
    return found


def _document_config(doc: SourceDocument, pipeline: Pipeline, detected: str | None) -> str:
    if doc.language:
        config = config_for(doc.language)
        if config is None:
            raise InvalidRequest(f"unknown language {doc.language!r}", field="language")
        return config
    return detected or detect_languages([doc], pipeline)[0]
