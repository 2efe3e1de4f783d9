"""The keyring of encryption at rest: keys by id, the current one first.

From ``PGBRAID_ENCRYPTION_KEY`` (base64 keys, comma-separated, the current one
first) or a key file (one base64 key a line, the current one first, mode 0600):
``PGBRAID_ENCRYPTION_KEY_FILE``, or an embedded server's
``<data dir>/encryption.keys``, created on first use. A file others may read is
refused when the keyring is built (the client, ``pgbraid serve``). A key id the
keyring lacks re-reads the file once (another process may have rotated). New
keys (rotation) are written beside the file and renamed over it, under a lock
file, so two processes adding keys never lose one.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import KeyUnavailable

KEY_FILE = "encryption.keys"
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
                self._first_key()
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

    def _first_key(self) -> None:
        """The default key file's first key, made once: under the file's lock, read it again
        and generate only if it still holds none. (Two processes that both began with no
        file would otherwise each put a "first" key in it and seal under their own.)"""
        assert self.path is not None
        with _file_lock(self.path):
            if self.path.exists():
                self._load()
            if not self._order:
                self._add_key()

    def generate(self) -> str:
        """Add a new random key as the current one (to the key file, atomically, 0600)."""
        if self.path is None:
            raise KeyUnavailable("the keyring comes from PGBRAID_ENCRYPTION_KEY: put a new key "
                                 "first in it to make it current")
        with self._lock, _file_lock(self.path):
            return self._add_key()

    def _add_key(self) -> str:
        """Put a new key first in the key file (its lock held) and load the file."""
        assert self.path is not None
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
