"""A document given as data — an object of an HTTP ingestion body, or a dict given to
``Client.ingest`` — and the one check of it against the ingestion schema.

A record names only the schema's fields (``id``, ``title``, ``text``, ``metadata``,
``classification``, ``language``, ``embedding``; a ``FieldMap`` may rename them): an
unknown field is refused by name, a wrong type by field: a list of records is
refused whole before anything of it is written, a lazy source's bad record fails
alone (``checked``). What the schema cannot see (NUL in a text,
a vector of the wrong size) fails that record alone when it is read (readers.py).
Files are not records of this kind: their unmapped fields join the metadata
(readers.py, formats.py).
"""

from __future__ import annotations

from os import PathLike
from typing import Annotated, Any, Iterable, Iterator, Sequence

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from ..errors import InvalidRequest
from ..models import invalid, printable, shown
from .readers import FieldMap, ReadError


def _document_id(value: Any) -> Any:
    # Strictly a string or an integer: lax validation stored true and 1.0 as "1".
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError("must be a string or an integer")
    return value


class DocumentIn(BaseModel):
    """One document of the JSONL ingestion format; extra fields belong in ``metadata``."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str | int, BeforeValidator(_document_id)]
    text: str
    title: str | None = None
    metadata: dict[str, Any] | None = None
    classification: list[str] | str | None = None
    language: str | None = None
    embedding: list[float] | None = None


def check_path_id(value: str, field: str = "document_id") -> str:
    """An id that travels in a URL path: no empty, '.' or '..' segment (a path that
    a client or proxy would normalise away is not an id)."""
    if any(part in ("", ".", "..") for part in value.split("/")):
        raise InvalidRequest(f"{field} {shown(value)} has an empty, '.' or '..' path segment",
                             field=field)
    return value


def check_record(where: str, item: Any, fields: FieldMap = FieldMap()) -> DocumentIn:
    """``item`` validated against the schema (its fields renamed by ``fields``), or an
    InvalidRequest naming ``where`` and the record's own name of the field."""
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where}: a document is a JSON object", field="body")
    names = _names(fields)
    texts = fields.text_fields if len(fields.text_fields) > 1 else ()
    for key in item:
        if key not in names and key not in texts:
            raise InvalidRequest(f"{where}: unknown field {shown(key)} (extra fields belong in "
                                 f"{fields.metadata})", field=printable(str(key), 100))
    view = {names[key]: value for key, value in item.items() if key in names}
    for name in texts:  # several text fields: each a string or absent
        if item.get(name) is not None and not isinstance(item[name], str):
            raise InvalidRequest(f"{where}: {name}: Input should be a valid string", field=name)
        if item.get(name) is not None:
            view.setdefault("text", item[name])
    try:
        document = DocumentIn.model_validate(view)
        check_path_id(str(document.id), fields.id)
    except ValidationError as exc:
        error = invalid(exc.errors())
        path = error.details["field"]
        head, dot, tail = path.partition(".")
        named = ", ".join(texts) if texts and head == "text" else next(
            (name for name, to in names.items() if to == head), head)
        located = f"{named}{dot}{tail}"
        raise InvalidRequest(f"{where}: {located}: {error.message.removeprefix(path + ': ')}",
                             field=located) from None
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {exc.message}", field=fields.id) from None
    return document


def _names(fields: FieldMap) -> dict[str, str]:
    """The record's name of each schema field -> the schema's name."""
    renamed = {fields.id: "id", fields.title: "title", fields.metadata: "metadata",
               fields.classification: "classification", fields.language: "language",
               "embedding": "embedding"}
    if len(fields.text_fields) == 1:
        renamed[fields.text_fields[0]] = "text"
    return renamed


def checked(source: Iterable[Any], fields: FieldMap = FieldMap()) -> Iterable[Any]:
    """``Client.ingest``'s source of records and paths. A list (any sequence) is checked
    whole before anything is written: one bad record refuses the call. A lazy source (a
    generator, a file's reader) is streamed, never held whole in memory: each record is
    checked as it is read, and a bad one fails alone in the report (a ReadError naming it
    and its field), as a bad line of a JSONL file does."""
    if isinstance(source, (str, bytes, PathLike, dict)):
        raise InvalidRequest("ingest takes a list of records (dicts) or paths, not one "
                             f"{type(source).__name__}: wrap it in a list", field="source")
    if isinstance(source, Sequence):
        for number, item in enumerate(source, start=1):
            _check_item(number, item, fields)
        return source
    return _streamed(source, fields)


def _streamed(source: Iterable[Any], fields: FieldMap) -> Iterator[Any]:
    for number, item in enumerate(source, start=1):
        try:
            _check_item(number, item, fields)
        except InvalidRequest as exc:
            where = f"record {number}"
            yield ReadError(where, exc.message.removeprefix(f"{where}: "))
            continue
        yield item


def _check_item(number: int, item: Any, fields: FieldMap) -> None:
    if isinstance(item, dict):
        check_record(f"record {number}", item, fields)
    elif not isinstance(item, (str, PathLike)):
        raise InvalidRequest(f"record {number}: a document is a dict (or a path to a file "
                             f"or folder), not {type(item).__name__}", field="source")
