"""Encryption at rest: AES-256-GCM values under a keyring, opened only where hits are made.

A pipeline created with ``encrypt=True`` stores its fragments' text, titles and
section headings, its versions' title and text, and the metadata fields it
names (``encrypt_metadata``) as sealed values::

    pgbraid:1:<key id>:<base64url(nonce, 12 bytes || ciphertext || GCM tag, 16 bytes)>

with a fresh random nonce per value and, as associated data, the row and field
the value belongs to (``fragment|<fragment id>|<version>|<field>`` or
``version|<document row id>|<version>|<field>``): a ciphertext copied to another
row or field fails its tag. The key id is the first 64 bits of a SHA-256 over
the key: it names the key and reveals nothing of it.

The keys come from the keyring (keyring.py). A key id the keyring lacks is
``KeyUnavailable`` (a wrong or missing key); a tag that does not verify is
``IntegrityFailure``.

A pipeline's current key id lives in ``pipelines.settings``; a writer reads it
in its own transaction (``sealing``), so a rotation's switch reaches every
batch after it (rotation.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from dataclasses import dataclass
from typing import Any

import psycopg
from cryptography.exceptions import InvalidTag

from .errors import IntegrityFailure, InvalidRequest, KeyUnavailable
from .keyring import KEY_FILE, Keyring, key_id  # noqa: F401  (the keyring, by its users' name)

PREFIX = "pgbraid:1:"
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_FRAGMENT_ID = 2**53 - 1  # as pgbraid.random_fragment_id(): safe in JSON


# -- values ---------------------------------------------------------------------

def fragment_aad(fragment_id: int, version: int, field: str) -> bytes:
    return f"fragment|{fragment_id}|{version}|{field}".encode()


def version_aad(document_row: int, version: int, field: str) -> bytes:
    return f"version|{document_row}|{version}|{field}".encode()


def seal(ring: Keyring, kid: str, text: str, aad: bytes) -> str:
    nonce = os.urandom(NONCE_BYTES)
    sealed = ring.cipher(kid).encrypt(nonce, text.encode(), aad)
    return f"{PREFIX}{kid}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"


def unseal(ring: Keyring, value: Any, aad: bytes, where: str) -> str:
    if not isinstance(value, str) or not value.startswith(PREFIX):
        raise IntegrityFailure(f"{where} is not a sealed value", where=where)
    kid, _, data = value[len(PREFIX):].partition(":")
    try:
        raw = base64.urlsafe_b64decode(data.encode())
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) < NONCE_BYTES + TAG_BYTES:
        raise IntegrityFailure(f"{where}: the sealed value is truncated or malformed", where=where)
    cipher = ring.cipher(kid)
    try:
        return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad).decode()
    except InvalidTag:
        raise IntegrityFailure(f"{where}: the sealed value fails its AES-GCM check (tampered, "
                               "truncated, or moved from another row)", where=where) from None


def key_of(value: Any) -> str | None:
    """The key id a sealed value names (None for any other value)."""
    if isinstance(value, str) and value.startswith(PREFIX):
        return value[len(PREFIX):].partition(":")[0]
    return None


def distinct_words(*texts: str | None) -> str:
    """What fuzzy matches on an encrypted pipeline: the distinct lower-cased words, sorted
    (so no phrase of the text survives in order), edge punctuation stripped."""
    words = {w.strip(".,;:!?()[]{}<>\"'`*=#|~").lower() for t in texts if t for w in t.split()}
    words.discard("")
    return " ".join(sorted(words))


# -- pipelines ----------------------------------------------------------------------

def settings_for(ring: Keyring, encrypt: bool, metadata: Any = None) -> dict[str, Any] | None:
    """A new pipeline's encryption settings (its current key is the keyring's), or None."""
    if not encrypt:
        if metadata:
            raise InvalidRequest("encrypt_metadata needs encrypt", field="encrypt_metadata")
        return None
    if isinstance(metadata, str):
        metadata = metadata.split(",")
    fields = list(dict.fromkeys(metadata or ()))
    for name in fields:
        if not isinstance(name, str) or not name or "." in name or len(name) > 200:
            raise InvalidRequest(f"encrypt_metadata holds a top-level field name per entry, "
                                 f"got {name!r}"[:240], field="encrypt_metadata")
    return {"key_id": ring.current(), "metadata": fields}


def encrypted(pipeline: Any) -> bool:
    return "encryption" in (pipeline.settings or {})


def metadata_fields(pipeline: Any) -> tuple[str, ...]:
    return tuple(pipeline.settings.get("encryption", {}).get("metadata", ()))


def ring_of(pipeline: Any) -> Keyring:
    ring = getattr(pipeline, "keyring", None)
    if ring is None:
        raise KeyUnavailable(f"pipeline {pipeline.name!r} is encrypted and no keyring is bound")
    return ring


def check_filters(pipeline: Any, filters: Any) -> None:
    """A metadata filter may not name an encrypted field: its values are sealed."""
    fields = set(metadata_fields(pipeline)) if encrypted(pipeline) else set()
    if not fields or not filters:
        return
    stack = [filters]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("and", "or", "not"):
                    stack.append(value)
                elif isinstance(key, str) and key.split(".")[0] in fields:
                    raise InvalidRequest(f"metadata field {key.split('.')[0]!r} is encrypted on "
                                         "this pipeline: it cannot be filtered", field="filters")


@dataclass(frozen=True)
class Sealing:
    """How one writing transaction seals: the keyring, the pipeline's current key id,
    the metadata fields it seals."""

    ring: Keyring
    key_id: str
    metadata: tuple[str, ...]

    def text(self, value: str | None, aad: bytes) -> str | None:
        return None if value is None else seal(self.ring, self.key_id, value, aad)

    def fields(self, metadata: dict[str, Any], aad) -> dict[str, Any]:
        return {name: (seal(self.ring, self.key_id, json.dumps(value), aad(f"metadata.{name}"))
                       if name in self.metadata else value) for name, value in metadata.items()}


def sealing(conn: psycopg.Connection, pipeline: Any) -> Sealing | None:
    """None for a plain pipeline; else the key id current now (rotation may have moved it)."""
    if not encrypted(pipeline):
        return None
    row = conn.execute("SELECT settings #>> '{encryption,key_id}' FROM pgbraid.pipelines"
                       " WHERE id = %s", (pipeline.id,)).fetchone()
    return Sealing(ring_of(pipeline), row[0], metadata_fields(pipeline))


def seal_version(sealed: Sealing | None, document_row: int, version: int, title: str | None,
                 body: str, metadata: dict[str, Any]) -> tuple[Any, ...]:
    """A version's (title, body, metadata, key id) as stored."""
    if sealed is None:
        return title, body, metadata, None

    def aad(field: str) -> bytes:
        return version_aad(document_row, version, field)
    return (sealed.text(title, aad("title")), sealed.text(body, aad("body")),
            sealed.fields(metadata, aad), sealed.key_id)


def seal_fragment(sealed: Sealing, fragment_id: int, version: int, title: str | None,
                  section: str | None, body: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """One fragment's title, section, body and metadata as stored."""
    def aad(field: str) -> bytes:
        return fragment_aad(fragment_id, version, field)
    return {"title": sealed.text(title, aad("title")),
            "section": sealed.text(section, aad("section")),
            "body": sealed.text(body, aad("body")), "metadata": sealed.fields(metadata, aad)}


def seal_fragments(sealed: Sealing | None, version: int, rows: list[dict[str, Any]]) -> None:
    """The one function that turns a writer's fragment rows into stored values: adds
    ``stored_title``, ``stored_section``, ``stored_body``, ``stored_metadata``, ``id`` (None:
    the column default), ``key_id`` and ``words`` (fuzzy's distinct words, the row's
    ``word_set``: ``distinct_words`` of its title, section and body) to each row.
    The plaintext keys stay for what is derived in SQL (tsvector, BM25 terms)."""
    for row in rows:
        if sealed is None:
            row.update(stored_title=row["title"], stored_section=row["section"],
                       stored_body=row["body"], stored_metadata=row["metadata"], id=None,
                       key_id=None, words=None)
            continue
        fragment = 1 + secrets.randbelow(MAX_FRAGMENT_ID)
        metadata = row["metadata"]
        plain = metadata.obj if isinstance(metadata, psycopg.types.json.Jsonb) else metadata
        stored = seal_fragment(sealed, fragment, version, row["title"], row["section"],
                               row["body"], plain)
        row.update(id=fragment, key_id=sealed.key_id, stored_title=stored["title"],
                   stored_section=stored["section"], stored_body=stored["body"],
                   stored_metadata=psycopg.types.json.Jsonb(stored["metadata"]),
                   words=row["word_set"])


# -- reading --------------------------------------------------------------------------

def _open_fields(ring: Keyring, fields: tuple[str, ...], metadata: dict[str, Any], aad,
                 where: str) -> dict[str, Any]:
    return {name: (json.loads(unseal(ring, value, aad(f"metadata.{name}"), f"{where} metadata "
                                     f"field {name!r}")) if name in fields else value)
            for name, value in (metadata or {}).items()}


def open_fragment(pipeline: Any, fragment_id: int, version: int, values: dict[str, Any]
                  ) -> dict[str, Any]:
    """A fragment's stored ``title`` / ``section`` / ``body`` / ``metadata`` (those given)
    opened; a plain pipeline's come back as they are."""
    return _open(pipeline, lambda field: fragment_aad(fragment_id, version, field),
                 f"fragment {fragment_id}", values)


def open_version(pipeline: Any, document_row: int, version: int, values: dict[str, Any]
                 ) -> dict[str, Any]:
    """A version's stored ``title`` / ``body`` / ``metadata`` (those given) opened."""
    return _open(pipeline, lambda field: version_aad(document_row, version, field),
                 f"version {version} of a document", values)


def _open(pipeline: Any, aad, where: str, values: dict[str, Any]) -> dict[str, Any]:
    if not encrypted(pipeline):
        return values
    ring, fields = ring_of(pipeline), metadata_fields(pipeline)
    def opened(name: str, value: Any) -> Any:
        if name == "metadata":
            return _open_fields(ring, fields, value, aad, where)
        return None if value is None else unseal(ring, value, aad(name), f"{where} {name}")
    return {name: opened(name, value) for name, value in values.items()}
