"""Extensions the embedded wheel lacks, built from source into the data dir.

``build(source, data_dir)`` compiles a PGXS extension (a folder or a .tar.gz)
against the wheel's own ``pg_config`` with ``CFLAGS="-O2 -fPIC"`` (the wheel's
``--cflags`` carry a warning option Debian's gcc 12 rejects), installs it into a
staging folder (``make install DESTDIR=...``) and copies its control and SQL
files and its libraries into ``<data_dir>/extensions/{share/extension,lib}`` —
never into site-packages, which another checkout or venv may share.

The embedded server loads from there (PostgreSQL 18): ``extension_control_path``
and ``dynamic_library_path`` name the folder, ``shared_preload_libraries`` lists
the builds that need it (pg_textsearch, citus), all given on the server's
command line by ``server_settings()``; changing the preload list takes a restart.
AGE needs no preload: its library is loaded into the sessions that use it.

A source with a ``configure`` script (citus) is configured first. Builds are
cached by the source's digest: building the same source again returns the
manifest entry (``cached: true``) unless ``force``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import InvalidRequest, NotEnabled
from .server import bin_dir

CFLAGS = "-O2 -fPIC"
PRELOAD = {"pg_textsearch": "shared", "citus": "shared", "age": "session"}
"""How a library must be loaded: ``shared`` (shared_preload_libraries, a restart),
``session`` (into each session that uses it, by the code that uses it)."""
CONFIGURE_ARGS = {"citus": ["--without-libcurl", "--without-lz4", "--without-zstd"]}
"""Options for a source's ``configure`` besides PG_CONFIG (the libraries the wheel lacks)."""
MANIFEST = "built.json"
LOG_TAIL = 2_000


@dataclass(frozen=True)
class Built:
    name: str
    version: str
    extensions: list[str]
    """Every control file the build installed (citus: citus, citus_columnar)."""
    libraries: list[str]
    preload: str | None
    source: str
    digest: str
    seconds: float
    built_at: float
    cached: bool = False
    restart_required: bool = False
    files: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def root(data_dir: Path) -> Path:
    return Path(data_dir) / "extensions"


def control_dir(data_dir: Path) -> Path:
    return root(data_dir) / "share" / "extension"


def library_dir(data_dir: Path) -> Path:
    return root(data_dir) / "lib"


def pg_config() -> Path:
    return bin_dir() / "pg_config"


# -- reading what is there ------------------------------------------------------------

def installed(data_dir: Path) -> list[Built]:
    """The builds installed into the data dir's extension folder, by name."""
    path = root(data_dir) / MANIFEST
    try:
        entries = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [Built(**entry) for _, entry in sorted(entries.items())]


def server_settings(data_dir: Path) -> dict[str, str]:
    """The settings the embedded server starts with so it loads from the data dir."""
    # PostgreSQL 18 appends "extension" to each element of extension_control_path.
    settings = {"extension_control_path": f"$system:{control_dir(data_dir).parent}",
                "dynamic_library_path": f"$libdir:{library_dir(data_dir)}"}
    preload = sorted(b.name for b in installed(data_dir) if b.preload == "shared"
                     and f"{b.name}.so" in b.libraries)
    if preload:
        settings["shared_preload_libraries"] = ",".join(preload)
    return settings


def server_options(data_dir: Path) -> str:
    """``server_settings`` as postgres command-line options (pg_ctl runs them through sh)."""
    for folder in (control_dir(data_dir), library_dir(data_dir)):
        folder.mkdir(parents=True, exist_ok=True)
    return " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in server_settings(data_dir).items())


def in_database(conn) -> dict[str, dict[str, str | None]]:
    """Extensions the server can create (``available``) and those created (``installed``)."""
    rows = conn.execute("SELECT name, default_version, installed_version"
                        " FROM pg_available_extensions ORDER BY name").fetchall()
    return {name: {"available": default, "installed": current} for name, default, current in rows}


def listing(data_dir: Path | None, conn=None) -> list[dict[str, Any]]:
    """One row per extension: built here (version, preload), available to / created in
    the database (when a connection is given)."""
    rows: dict[str, dict[str, Any]] = {}
    for b in installed(data_dir) if data_dir else []:
        for name in b.extensions:
            rows[name] = {"name": name, "built": b.version if name == b.name else "yes",
                          "preload": b.preload if name == b.name else None, "source": b.source,
                          "available": None, "installed": None}
    for name, state in (in_database(conn) if conn is not None else {}).items():
        row = rows.setdefault(name, {"name": name, "built": None, "preload": None,
                                     "source": None, "available": None, "installed": None})
        row.update(state)
    return [rows[name] for name in sorted(rows)]


# -- building ---------------------------------------------------------------------------

def build(source: Path | str, data_dir: Path, *, force: bool = False, jobs: int = 2,
          timeout: float = 1800.0) -> Built:
    """Build and install one PGXS extension into the data dir (see the module docstring)."""
    source = Path(source).expanduser().resolve()
    if not source.exists():
        raise InvalidRequest(f"extension source {source} does not exist", field="source")
    if not (source.is_dir() or source.name.endswith((".tar.gz", ".tgz"))):
        raise InvalidRequest(f"extension source {source} is neither a folder nor a .tar.gz",
                             field="source")
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise NotEnabled(f"building extensions needs {' and '.join(missing)} on PATH",
                         missing=missing)
    digest = _digest(source)
    with _locked(root(data_dir)):
        if not force:
            for b in installed(data_dir):
                if b.digest == digest and all((root(data_dir) / f).exists() for f in b.files):
                    return _with(b, data_dir, cached=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=root(data_dir)) as work:
            built = _compile(source, Path(work), data_dir, digest, jobs, timeout)
        entries = {b.name: b.as_dict() for b in installed(data_dir)}
        entries[built.name] = {k: v for k, v in built.as_dict().items()
                               if k not in ("cached", "restart_required")}
        (root(data_dir) / MANIFEST).write_text(json.dumps(entries, indent=2))
        return _with(built, data_dir)


def _compile(source: Path, work: Path, data_dir: Path, digest: str, jobs: int,
             timeout: float) -> Built:
    started = time.monotonic()
    tree = _unpack(source, work / "src")
    log = work / "build.log"
    make = ["make", f"PG_CONFIG={pg_config()}", f"CFLAGS={CFLAGS}"]
    if (tree / "configure").exists():
        extra = next((args for name, args in CONFIGURE_ARGS.items() if tree.name.startswith(name)), [])
        _run(["./configure", f"PG_CONFIG={pg_config()}", *extra], tree, log, timeout)
    _run([*make, f"-j{jobs}"], tree, log, timeout)
    stage = work / "stage"
    _run([*make, "install", f"DESTDIR={stage}"], tree, log, timeout)
    files = _collect(stage, data_dir)
    controls = sorted(Path(f).stem for f in files if f.endswith(".control"))
    if not controls:
        raise InvalidRequest(f"{source} installed no .control file: not a PostgreSQL extension",
                             field="source")
    name = max(controls, key=lambda c: (tree.name.startswith(c) or source.name.startswith(c), len(c)))
    libraries = sorted(Path(f).name for f in files if f.startswith("lib/") and f.endswith(".so"))
    return Built(name=name, version=_default_version(control_dir(data_dir) / f"{name}.control"),
                 extensions=controls, libraries=libraries, preload=PRELOAD.get(name),
                 source=str(source), digest=digest, seconds=round(time.monotonic() - started, 1),
                 built_at=time.time(), files=files)


def _unpack(source: Path, target: Path) -> Path:
    """The source tree (a copy: a build never writes into the caller's folder)."""
    if source.is_dir():
        shutil.copytree(source, target / source.name, symlinks=True,
                        ignore=shutil.ignore_patterns("*.o", "*.so", "*.bc", ".git"))
    else:
        try:
            with tarfile.open(source) as archive:
                archive.extractall(target, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise InvalidRequest(f"cannot unpack {source}: {exc}", field="source") from None
    entries = [p for p in target.iterdir()]
    tree = entries[0] if len(entries) == 1 and entries[0].is_dir() else target
    if not (tree / "Makefile").exists() and not (tree / "configure").exists():
        raise InvalidRequest(f"{source} has no Makefile (or configure) at its top: not a PGXS "
                             "extension source", field="source")
    return tree


def _collect(stage: Path, data_dir: Path) -> list[str]:
    """Copy the staged control/SQL files and libraries into the data dir's folders."""
    sharedir = _pg_config_value("--sharedir")
    pkglibdir = _pg_config_value("--pkglibdir")
    copied = []
    for staged, target, prefix in ((stage / sharedir.lstrip("/") / "extension", control_dir(data_dir),
                                    "share/extension"),
                                   (stage / pkglibdir.lstrip("/"), library_dir(data_dir), "lib")):
        if not staged.is_dir():
            continue
        for path in sorted(p for p in staged.rglob("*") if p.is_file()):
            relative = path.relative_to(staged)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)
            os.chmod(target / relative, 0o755 if path.suffix == ".so" else 0o644)
            copied.append(f"{prefix}/{relative}")
    return copied


def _run(args: list[str], cwd: Path, log: Path, timeout: float) -> None:
    with open(log, "a") as handle:
        handle.write(f"$ {shlex.join(args)}\n")
        handle.flush()
        try:
            result = subprocess.run(args, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise InvalidRequest(f"{args[0]} took longer than {timeout:g} s") from None
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-LOG_TAIL:]
        raise InvalidRequest(f"{shlex.join(args[:2])} failed (exit {result.returncode}): {tail}",
                             field="source")


def _pg_config_value(option: str) -> str:
    return subprocess.run([str(pg_config()), option], capture_output=True, text=True,
                          check=True).stdout.strip()


def _default_version(control: Path) -> str:
    try:
        for line in control.read_text().splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "default_version":
                return value.strip().strip("'\"")
    except FileNotFoundError:
        pass
    return ""


def _digest(source: Path) -> str:
    """The content digest of an archive, or of a folder's files (names, sizes, mtimes)."""
    h = hashlib.sha256()
    if source.is_file():
        with open(source, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.suffix not in (".o", ".so", ".bc") and ".git" not in path.parts:
            stat = path.stat()
            h.update(f"{path.relative_to(source)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _with(built: Built, data_dir: Path, *, cached: bool = False) -> Built:
    """The entry, saying whether the running embedded server must restart to load it."""
    cluster = Path(data_dir) / "cluster"
    restart = False
    if (cluster / "postmaster.pid").exists() and (cluster / "postmaster.opts").exists():
        opts = (cluster / "postmaster.opts").read_text()
        found = re.search(r"shared_preload_libraries=([^\"' ]*)", opts)
        preloaded = found.group(1).split(",") if found else []
        restart = str(control_dir(data_dir).parent) not in opts or (
            built.preload == "shared" and built.name not in preloaded)
    return Built(**{**built.as_dict(), "cached": cached, "restart_required": restart})


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
