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

The keyring (``Keyring.from_settings``): ``PGBRAID_ENCRYPTION_KEY`` (base64 keys,
comma-separated, the current one first), or a key file (one base64 key a line,
the current one first, mode 0600), ``PGBRAID_ENCRYPTION_KEY_FILE`` or an embedded
server's ``<data dir>/encryption.keys``, created on first use. A file others may
read is refused when the client is built. A key id the keyring lacks re-reads
the file once (another process may have rotated), then is ``KeyUnavailable``;
a tag that does not verify is ``IntegrityFailure``.

A pipeline's current key id lives in ``pipelines.settings``; a writer reads it
in its own transaction (``sealing``), so a rotation's switch reaches every
batch after it (rotation.py).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import IntegrityFailure, InvalidRequest, KeyUnavailable

PREFIX = "pgbraid:1:"
KEY_FILE = "encryption.keys"
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_FRAGMENT_ID = 2**53 - 1  # as pgbraid.random_fragment_id(): safe in JSON
NO_KEY = ("no encryption key is configured: set PGBRAID_ENCRYPTION_KEY (base64 of 32 random "
          "bytes) or PGBRAID_ENCRYPTION_KEY_FILE")


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"pgbraid key id\0" + key).hexdigest()[:16]


def decode_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyUnavailable(f"{where} is not base64") from None
    if len(key) != 32:
        raise KeyUnavailable(f"{where} holds {len(key)} bytes; AES-256 needs 32")
    return key


class Keyring:
    """Keys by id, the current (newest) first; from the environment or a key file."""

    def __init__(self, keys: tuple[bytes, ...] | list[bytes] = (), *, path: Path | None = None,
                 create: bool = False, source: str = "") -> None:
        self.path, self.create, self.source = path, create, source
        self._lock = threading.RLock()
        self._ciphers: dict[str, AESGCM] = {}
        self._order: list[str] = []
        self._install(list(keys))
        if path is not None and path.exists():
            self._load()

    @classmethod
    def from_settings(cls, settings: Any, *, embedded: bool) -> "Keyring":
        if settings.encryption_key:
            parts = settings.encryption_key.split(",")
            keys = [decode_key(p, f"PGBRAID_ENCRYPTION_KEY (key {i})")
                    for i, p in enumerate(parts, 1)]
            return cls(keys, source="PGBRAID_ENCRYPTION_KEY")
        if settings.encryption_key_file:
            path = Path(settings.encryption_key_file).expanduser()
            if not path.is_file():
                raise KeyUnavailable(f"PGBRAID_ENCRYPTION_KEY_FILE {path} does not exist")
            return cls(path=path, source=str(path))
        if embedded:
            path = settings.resolved_data_dir() / KEY_FILE
            return cls(path=path, create=True, source=str(path))
        return cls()

    @property
    def writable(self) -> bool:
        """New keys can be added (a key file), not only used (the environment)."""
        return self.path is not None

    def _install(self, keys: list[bytes]) -> None:
        order = [key_id(k) for k in keys]
        self._ciphers = {kid: AESGCM(k) for kid, k in zip(order, keys)}
        self._order = order

    def _load(self) -> None:
        assert self.path is not None
        mode = os.stat(self.path).st_mode
        if mode & 0o077:
            raise KeyUnavailable(
                f"key file {self.path} has mode {oct(mode & 0o777)}: others may read it; "
                f"run chmod 600 {self.path}", key_file=str(self.path))
        lines = [line.strip() for line in self.path.read_text().splitlines()]
        keys = [decode_key(line, f"key file {self.path} (line {n})")
                for n, line in enumerate(lines, 1) if line and not line.startswith("#")]
        self._install(keys)

    def current(self) -> str:
        """The id of the key new values are sealed with (creating the default file)."""
        with self._lock:
            if not self._order and self.create:
                self.generate()
            if not self._order:
                raise KeyUnavailable(NO_KEY)
            return self._order[0]

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._order)

    def cipher(self, kid: str) -> AESGCM:
        with self._lock:
            if kid not in self._ciphers and self.path is not None and self.path.exists():
                self._load()  # another process may have added it
            found = self._ciphers.get(kid)
        if found is None:
            holder = self.source or "the keyring (none configured)"
            raise KeyUnavailable(f"a value is sealed under key {kid}, which {holder} does not "
                                 "hold: a wrong or missing encryption key", key_id=kid)
        return found

    def generate(self) -> str:
        """Add a new random key as the current one (to the key file, atomically, 0600)."""
        if self.path is None:
            raise KeyUnavailable("the keyring comes from PGBRAID_ENCRYPTION_KEY: put a new key "
                                 "first in it to make it current")
        with self._lock, _file_lock(self.path):
            old = self.path.read_text() if self.path.exists() else ""
            key = os.urandom(32)
            _write_private(self.path, base64.b64encode(key).decode() + "\n" + old)
            self._load()
            return key_id(key)


def _file_lock(path: Path):
    """An exclusive lock beside the key file: two processes adding keys never lose one."""
    class Locked:
        def __enter__(self):
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path.parent / f".{path.name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)

        def __exit__(self, *exc):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
    return Locked()


def _write_private(path: Path, text: str) -> None:
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


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
    the column default), ``key_id`` and ``words`` (fuzzy's distinct words) to each row.
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
                   words=distinct_words(row["title"], row["section"], row["body"]))


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
