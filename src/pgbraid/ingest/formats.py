"""CSV, TSV and JSON files of records: each file is read whole, all or nothing.

A CSV/TSV file has a header row naming its columns; a JSON file is an array of
records, or an object holding one (``FieldMap.records`` names it: ``vulnerabilities``
for CISA KEV's ``{"vulnerabilities": [...]}``, a dotted path for deeper ones). Every
record is validated before any is handed on: a file with a malformed row, a record
without its id or text, or a header without the mapped columns yields only its
errors (each naming the file and line, or record), so nothing of it is written.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from ..errors import InvalidRequest
from .readers import FieldMap, ReadError, SourceDocument, document_from_record

CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".tab")
JSON_SUFFIXES = (".json", ".json.gz")
NOTHING_WRITTEN = " (nothing of this file was ingested)"
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # fields as long as a document may be


def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def read_file(path: Path, fields: FieldMap) -> Iterator[SourceDocument | ReadError]:
    """The documents of a CSV/TSV/JSON file, or (when any record is bad) only its errors."""
    name = path.name.lower()
    reader = _csv_records if name.endswith(CSV_SUFFIXES) else _json_records
    documents, errors = [], []
    try:
        for where, record in reader(path, fields):
            try:
                documents.append(document_from_record(record, fields, source=where))
            except InvalidRequest as exc:
                errors.append(ReadError(where, exc.message))
    except _FileError as exc:
        errors.append(ReadError(exc.where, exc.message))
    except UnicodeDecodeError as exc:
        errors.append(ReadError(str(path), f"invalid UTF-8 at byte {exc.start}"))
    except (OSError, EOFError) as exc:
        errors.append(ReadError(str(path), f"cannot read file: {getattr(exc, 'strerror', None) or exc}"))
    if not errors and not documents:
        errors.append(ReadError(str(path), "the file holds no records"))
    if errors:
        yield from _failed(errors)
        return
    yield from documents


def _failed(errors: list[ReadError]) -> Iterator[ReadError]:
    """A failed file's report: one failure a problem, every one (so ``failed`` counts the
    bad records; the CLI's text shows the first 20, as for JSONL), each saying the file
    was not written, rather than one more failure saying it (a file that is no records
    at all is one)."""
    for error in errors:
        yield ReadError(error.source, f"{error.message}{NOTHING_WRITTEN}")


class _FileError(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


def _csv_records(path: Path, fields: FieldMap) -> Iterator[tuple[str, dict[str, Any]]]:
    tab = path.name.lower().endswith((".tsv", ".tsv.gz", ".tab"))
    with _open_text(path) as handle:
        rows = csv.reader(handle, delimiter="\t" if tab else ",", strict=True)
        try:
            header = next(rows, None)
        except csv.Error as exc:
            raise _FileError(f"{path}:1", f"malformed header: {exc}") from exc
        if not header or not any(h.strip() for h in header):
            raise _FileError(f"{path}:1", "no header row (the first row names the columns)")
        header = [h.strip() for h in header]
        _check_header(path, header, fields)
        start = rows.line_num + 1
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as exc:
                raise _FileError(f"{path}:{start}", f"malformed {'TSV' if tab else 'CSV'}: {exc}") from exc
            where = f"{path}:{start}"
            start = rows.line_num + 1
            if not row or row == [""]:
                continue
            if len(row) != len(header):
                raise _FileError(where, f"{len(row)} fields, the header has {len(header)}")
            yield where, dict(zip(header, row))


def _check_header(path: Path, header: list[str], fields: FieldMap) -> None:
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise _FileError(f"{path}:1", f"the header names {', '.join(map(repr, duplicated))} twice")
    wanted = [fields.id, *fields.text_fields]
    missing = [name for name in wanted if name not in header]
    if missing:
        raise _FileError(f"{path}:1", f"no column {', '.join(map(repr, missing))} in the header"
                                      f" (columns: {', '.join(header)})")


def _json_records(path: Path, fields: FieldMap) -> Iterator[tuple[str, dict[str, Any]]]:
    with _open_text(path) as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as exc:
            raise _FileError(f"{path}:{exc.lineno}", f"malformed JSON: {exc.msg}"
                                                     f" (column {exc.colno})") from exc
        except RecursionError as exc:
            raise _FileError(str(path), "the JSON nests too deeply") from exc
    records, label = _records(path, data, fields.records)
    for number, record in enumerate(records, start=1):
        where = f"{path}: {label} record {number}"
        if not isinstance(record, dict):
            raise _FileError(where, "a record must be a JSON object")
        yield where, record


def _records(path: Path, data: Any, key: str | None) -> tuple[list, str]:
    if key is None:
        if isinstance(data, list):
            return data, "array"
        raise _FileError(str(path), _no_array(data))
    value = data
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise _FileError(str(path), f"no array {key!r} in the JSON (--records)")
        value = value[part]
    if not isinstance(value, list):
        raise _FileError(str(path), f"{key!r} in the JSON is not an array (--records)")
    return value, key


def _no_array(data: Any) -> str:
    """Why a JSON file without ``--records`` is no array of records, and the option that
    reads it: the arrays of objects it holds (top level, or one level down)."""
    if not isinstance(data, dict):
        return "the JSON is a single value, not an array of records"
    arrays = _arrays(data) or [f"{k}.{n}" for k, v in data.items() if isinstance(v, dict)
                               for n in _arrays(v)]
    if len(arrays) == 1:
        return (f"the JSON is an object holding its records in an array under {arrays[0]!r}:"
                f" pass --records {arrays[0]}")
    if arrays:
        return ("the JSON is an object, not an array of records: pass --records with one of:"
                f" {', '.join(arrays[:10])}")
    return "the JSON is an object with no array of records in it (--records names one)"


def _arrays(data: dict[str, Any]) -> list[str]:
    """The keys of ``data`` that hold an array of objects (judged by its first item)."""
    return sorted(k for k, v in data.items()
                  if isinstance(v, list) and all(isinstance(x, dict) for x in v[:1]))
