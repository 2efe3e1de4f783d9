"""Read .txt/.md/.rst files, JSONL (optionally gzipped), CSV/TSV and JSON into documents.

Each item read is a ``SourceDocument``, a ``ReadError`` naming the file and line
(so one bad line or file is reported without stopping the others), or a
``Skipped`` file of a folder that is no format we read. CSV, TSV and JSON files
are read by formats.py, each file all or nothing.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..models import check_json, check_text, parse_classifications, shown, validate_document_id
from ..strategies.vector.store import check_vector
from ..errors import InvalidRequest

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
MAX_DOCUMENT_CHARS = 5_000_000


@dataclass(frozen=True)
class FieldMap:
    """Which record fields are what. ``text`` may name several fields, comma-separated
    (joined as paragraphs); ``records`` names the array of records in a JSON object
    (a dotted path); ``index_id`` makes the id searchable (it leads the title)."""

    id: str = "id"
    title: str = "title"
    text: str = "text"
    metadata: str = "metadata"
    classification: str = "classification"
    language: str = "language"
    records: str | None = None
    index_id: bool = False

    def __post_init__(self) -> None:
        for name in ("id", "title", "text", "metadata", "classification", "language"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidRequest(f"the {name} field must be named", field=name)
        if not self.text_fields:
            raise InvalidRequest("name at least one text field", field="text")
        if self.records is not None and (not isinstance(self.records, str)
                                         or not all(self.records.split("."))):
            raise InvalidRequest("records must name a JSON key (a.b for a nested one)",
                                 field="records")

    @property
    def text_fields(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.text.split(",") if name.strip())


@dataclass(frozen=True)
class SourceDocument:
    id: str
    text: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    classifications: tuple[str, ...] | None = None
    language: str | None = None
    source: str | None = None
    embedding: list[float] | None = None
    """A vector supplied with the document (field ``embedding``); checked against the pipeline."""


@dataclass(frozen=True)
class ReadError:
    source: str
    message: str


@dataclass(frozen=True)
class Skipped:
    """A file in a folder that was not read, and why."""

    source: str
    reason: str


FORMATS = ".txt, .md, .rst, .jsonl[.gz], .csv[.gz], .tsv[.gz] or .json[.gz]"


def supported(path: Path) -> bool:
    from .formats import CSV_SUFFIXES, JSON_SUFFIXES

    name = path.name.lower()
    return name.endswith(TEXT_SUFFIXES + JSONL_SUFFIXES + CSV_SUFFIXES + JSON_SUFFIXES)


def expand(paths: list[Path]) -> Iterator[tuple[Path, Path] | ReadError | Skipped]:
    """(file, root) pairs for files and folders; folders are walked in sorted order, and
    the files in them that are no format we read are reported as skipped."""
    for path in paths:
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                hidden = any(part.startswith(".") for part in child.relative_to(path).parts)
                if hidden:
                    yield Skipped(str(child), "hidden file")
                elif supported(child):
                    yield child, path
                else:
                    yield Skipped(str(child), f"not a format we read ({FORMATS})")
        elif path.is_file():
            if supported(path):
                yield path, path.parent
            else:
                yield ReadError(str(path), f"unsupported file type (use {FORMATS})")
        else:
            yield ReadError(str(path), "no such file or folder")


def items(source: Iterable[Any], fields: FieldMap = FieldMap()) -> Iterator[SourceDocument | ReadError]:
    """Records (dicts in the JSONL format, checked by records.checked) and paths (files,
    folders), read in turn; a record that cannot be stored is a ReadError, not raised."""
    paths: list[Path] = []
    for item in source:
        if isinstance(item, ReadError):  # records.checked: a streamed record refused
            yield item
        elif isinstance(item, dict):
            where = f"record {shown(item.get(fields.id))}"
            try:
                yield document_from_record(item, fields, source=where)
            except InvalidRequest as exc:
                yield ReadError(where, exc.message)
        else:
            paths.append(Path(item))
    if paths:
        yield from read(paths, fields)


def read(paths: list[Path], fields: FieldMap = FieldMap()
         ) -> Iterator[SourceDocument | ReadError | Skipped]:
    from .formats import CSV_SUFFIXES, JSON_SUFFIXES, read_file

    for item in expand(paths):
        if isinstance(item, (ReadError, Skipped)):
            yield item
            continue
        path, root = item
        if path.name.lower().endswith(JSONL_SUFFIXES):
            yield from read_jsonl(path, fields)
        elif path.name.lower().endswith(CSV_SUFFIXES + JSON_SUFFIXES):
            yield from read_file(path, fields)
        else:
            yield read_text_file(path, root)


def read_text_file(path: Path, root: Path) -> SourceDocument | ReadError:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return ReadError(str(path), f"cannot read file: {exc.strerror or exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ReadError(str(path), f"invalid UTF-8 at byte {exc.start}")
    if "\x00" in text:
        return ReadError(str(path), "file contains NUL bytes")
    if not text.strip():
        return ReadError(str(path), "file is empty")
    doc_id = path.relative_to(root).as_posix()
    return SourceDocument(id=doc_id, text=text.removeprefix("\ufeff"), title=_first_title(text),
                          metadata={"path": doc_id, "format": path.suffix.lstrip(".").lower()},
                          source=str(path))


def _first_title(text: str) -> str | None:
    from .chunking import split_blocks

    for block in split_blocks(text[:20_000]):
        if block.heading:
            return block.text[:300]
    return None


def read_jsonl(path: Path, fields: FieldMap) -> Iterator[SourceDocument | ReadError]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        handle = opener(path, "rb")
        with handle:
            for number, raw in enumerate(handle, start=1):
                where = f"{path}:{number}"
                if not raw.strip():
                    continue
                yield _parse_line(raw, where, fields)
    except (OSError, EOFError) as exc:
        yield ReadError(str(path), f"cannot read file: {getattr(exc, 'strerror', None) or exc}")


def _parse_line(raw: bytes, where: str, fields: FieldMap) -> SourceDocument | ReadError:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ReadError(where, f"invalid UTF-8 at byte {exc.start}")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return ReadError(where, f"malformed JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return ReadError(where, "the JSON nests too deeply")
    if not isinstance(record, dict):
        return ReadError(where, "a line must be a JSON object")
    try:
        return document_from_record(record, fields, source=where)
    except InvalidRequest as exc:
        return ReadError(where, exc.message)


def document_from_record(record: dict[str, Any], fields: FieldMap = FieldMap(), *,
                         source: str | None = None) -> SourceDocument:
    """Validate one record; unmapped top-level fields join the metadata (a file's record:
    a record given as data has none, records.py refused them by name)."""
    doc_id = record.get(fields.id)
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id.strip():
        hint = ""
        if fields.id not in record and (ids := [k for k in record if "id" in str(k).lower()]):
            hint = f" (the record has {', '.join(map(repr, ids[:3]))}: --id-field names it)"
        raise InvalidRequest(f"missing or empty id field {fields.id!r}{hint}", field=fields.id)
    validate_document_id(doc_id, fields.id)
    text = _text(record, fields)
    title = record.get(fields.title)
    if title is not None and not isinstance(title, str):
        raise InvalidRequest(f"title field {fields.title!r} must be a string", field=fields.title)
    if fields.index_id:
        title = f"{doc_id}: {title}" if title and title.strip() else doc_id
    if title is not None:
        check_text(title.replace("\x00", ""), "title", fields.title)
    metadata = record.get(fields.metadata) or {}
    if not isinstance(metadata, dict):
        raise InvalidRequest(f"metadata field {fields.metadata!r} must be an object")
    known = {fields.id, fields.title, *fields.text_fields, fields.metadata,
             fields.classification, fields.language, "embedding"}
    extra = {k: v for k, v in record.items() if k not in known}
    check_json({**extra, **metadata}, "metadata")
    classification = record.get(fields.classification)
    language = record.get(fields.language)
    if language is not None and (not isinstance(language, str) or len(language) > 64):
        raise InvalidRequest(f"language field {fields.language!r} must be a language name")
    return SourceDocument(
        id=doc_id,
        text=text,
        title=title.replace("\x00", "") if title else None,
        metadata={**extra, **metadata},
        classifications=None if classification is None else parse_classifications(classification),
        language=language,
        source=source,
        embedding=_embedding(record.get("embedding")),
    )


def _text(record: dict[str, Any], fields: FieldMap) -> str:
    """The record's text: its text fields that are not empty, as paragraphs."""
    names = fields.text_fields
    for name in names:
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"text field {name!r} must be a string", field=name)
    parts = [record[name].strip() for name in names if (record.get(name) or "").strip()]
    if not parts:
        shown_names = ", ".join(map(repr, names))
        raise InvalidRequest(f"missing or empty text field{'s' if len(names) > 1 else ''}"
                             f" {shown_names}", field=names[0])
    text = record[names[0]] if len(names) == 1 else "\n\n".join(parts)  # one: exactly as given
    check_text(text, "text", names[0])
    if len(text) > MAX_DOCUMENT_CHARS:
        raise InvalidRequest(f"text is longer than {MAX_DOCUMENT_CHARS} characters")
    return text


def _embedding(value: Any) -> list[float] | None:
    if value is None:
        return None
    check_vector(value, None, "embedding", nonzero=True)  # its dimension: when it is written
    return [float(v) for v in value]
