"""The Strategy interface every retriever implements.

A strategy is small: SQL at the top of its module, ``params`` (every param it
takes, declared once: strategies/params.py), ``unavailable()`` (a pure check
that sends nothing to PostgreSQL), ``validate()`` for what the declarations
cannot say (one param against another, opt-in gates), and ``run()`` which
takes the request and the scope and returns ranked rows. ``versioned``: it can
search the versions valid at ``as_of`` (the scope says which).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import psycopg

from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import FilterLimits, Scope
from .params import PAGING, Param, declared

# Every strategy returns rows of these columns, best first (all values from the fragment's
# own row: on an encrypted pipeline they are sealed with its id and version, encryption.py).
HIT_COLUMNS = """
    f.id AS fragment_id, d.external_id AS document_id, v.version, f.title, f.body,
    f.metadata, f.classifications, f.language
"""


NO_WORDS = "the query has no words (letters or digits) to search"


def has_words(query: str | None) -> bool:
    """A letter or a digit: something a strategy can match, rank or embed. Without one
    (punctuation, symbols) a strategy answers nothing and says NO_WORDS."""
    return any(char.isalnum() for char in query or "")


@dataclass(frozen=True)
class Row:
    fragment_id: int
    document_id: str
    version: int
    title: str | None
    body: str
    metadata: dict[str, Any]
    classifications: list[str]
    language: str
    score: float
    matched_terms: list[str] | None = None
    mmr_score: float | None = None
    evidence: dict[str, Any] | None = None


@dataclass
class Outcome:
    rows: list[Row]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a strategy may know besides the request.

    ``pgsearch`` / ``textsearch`` / ``age`` are the opt-in settings, known without a
    database; ``extensions`` is filled in once a session is open.
    """

    pgsearch: bool = False
    textsearch: bool = False
    age: bool = False
    extensions: frozenset[str] = frozenset()
    embedder: Callable[[str], Any] | None = None
    """Name -> loaded embedder (the client's cache)."""
    postings: Any = None
    """The client's cache of BM25 posting arrays (a bm25_postings.PostingsCache), or None."""
    languages: Any = None
    """The client's knowledge of monolingual pipelines (a query_language.QueryLanguages), or None."""
    filter_limits: FilterLimits = FilterLimits()
    """How large a request's filter may be (settings)."""
    owner: Callable[[], Any] | None = None
    """A connection as the owner role (a context manager), for the indexes an opted-in
    engine builds on first use; None until a session is open."""
    age_mirror: dict[str, Any] | None = None
    """What preparing the pipeline's Apache AGE mirror did (graph, rebuilt, why), when a
    graph search asked for engine age."""
    opened: "Opening | None" = None
    """The strategy's first statement, sent in the search's first round trip (opening.py)."""
    ends_snapshot: bool = False
    """Nothing runs in the search's snapshot after the strategy: its last statement may
    end it (db.database.run_last)."""


@dataclass
class Opening:
    """A strategy's first statement, built by ``Strategy.opening`` and sent ahead with
    the statement resolving the pipeline (opening.py). ``inputs``: what it was built
    from; the strategy uses its rows only when its own inputs are equal."""

    statement: Any
    params: dict[str, Any]
    inputs: tuple
    binary: bool = False
    cursor: Any = None
    _rows: list | None = None

    def rows(self) -> list:
        """Its rows (read once: a strategy run again, grouping by document, reuses them)."""
        if self._rows is None:
            self._rows = self.cursor.fetchall()
        return self._rows


class Strategy(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    touches_database: ClassVar[bool] = True
    versioned: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = PAGING

    @property
    def declared(self) -> dict[str, Param]:
        return declared(*self.params)

    def param(self, request: SearchRequest, name: str) -> Any:
        """A declared param's checked value, or its documented default."""
        return self.declared[name].value(request.params)

    def validate(self, request: SearchRequest, context: Context) -> None:
        """Raise InvalidRequest for bad params, NotEnabled for a gate that is off. Sends nothing."""

    def opening(self, pipeline: Pipeline, request: SearchRequest, scope: Scope,
                context: Context) -> Opening | None:
        """The first statement ``run`` would send for this request, built without a
        database, or None (opening.py sends it ahead). Pure."""
        return None

    def unavailable(self, pipeline: Pipeline, context: Context) -> str | None:
        """Why this strategy cannot run on this pipeline, or None. Sends nothing."""
        return None

    @abstractmethod
    def run(self, conn: psycopg.Connection, pipeline: Pipeline, request: SearchRequest,
            scope: Scope, k: int, context: Context) -> Outcome: ...
