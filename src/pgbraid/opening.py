"""A search's first round trip: the snapshot, the pipeline, and the strategy's first statement.

A search began with four round trips before its strategy sent anything of its
own (BEGIN, the tenant's settings, the pipeline and classifications resolved,
then bm25's terms and statistics), and on a loaded machine each one waits to
be scheduled on both sides (docs/benchmarks.md: BEGIN alone took 0.1-27 ms).
Here they are one pipeline (db/database.py ``snapshot``): BEGIN and the
tenant's settings, the resolving statement, and, when this process resolved
the same request before, the strategy's first statement (``Strategy.opening``)
built from what the request resolved to then.

That statement's rows are used only when the resolving statement, read in the
same snapshot right after, gives the same pipeline (every setting) and the
same resolved classifications: its inputs are then exactly those the strategy
would build it from now, and it ran after the tenant's settings, in the
snapshot, like any statement of the search. Otherwise its rows are never read
and the strategy sends its own, so what a stale guess read (another scope, a
recreated pipeline) reaches no response and no trace.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any

import psycopg
from psycopg.rows import dict_row

from . import pipelines, planner, strategies
from .errors import Forbidden
from .models import DEFAULT_CLASSIFICATION, SearchRequest
from .pipelines import Pipeline
from .scope import Principal, Scope
from .strategies.base import Context, Opening

GUESSES = 1024

Key = tuple[str, str, tuple[str, ...], tuple[str, ...] | None]


class Guesses:
    """What (tenant, pipeline, asked classifications, bound) last resolved to, in this
    process: a small LRU, thread-safe."""

    def __init__(self, size: int = GUESSES) -> None:
        self._size = size
        self._entries: OrderedDict[Key, tuple[Pipeline, tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key) -> tuple[Pipeline, tuple[str, ...]] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Key, value: tuple[Pipeline, tuple[str, ...]]) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def check_bound(asked: tuple[str, ...], bound: tuple[str, ...] | None) -> None:
    """Asking for more than the principal may hold is Forbidden."""
    if bound is not None:
        beyond = sorted(set(asked) - set(bound) - {DEFAULT_CLASSIFICATION})
        if beyond:
            raise Forbidden(f"this principal may not hold {', '.join(beyond)}",
                            classification=beyond)


def scope_of(pipeline: Pipeline, held: tuple[str, ...], request: SearchRequest,
             as_of: Any) -> tuple[SearchRequest, Scope]:
    """The request holding its resolved classifications, and its scope."""
    request = request.model_copy(update={"classification": held})
    return request, Scope(pipeline.id, held, request.filters, as_of=as_of)


@dataclasses.dataclass
class First:
    """One search's first round trip: what it sends, then what it read."""

    principal: Principal
    name: str
    asked: SearchRequest
    plan: planner.Plan
    as_of: Any
    """The page's time (None: current versions); a cursor's pinned time is never guessed."""
    context: Context
    guesses: Guesses
    _key: Key = dataclasses.field(init=False)
    _guess: tuple[Pipeline, tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        held = self.asked.classification or self.principal.default_classifications
        self._key = (self.principal.tenant, self.name, tuple(held),
                     self.principal.classifications)

    def send(self, conn: psycopg.Connection) -> tuple[psycopg.Cursor, Opening | None]:
        """Queue the resolving statement and, on a known request, the strategy's first
        (``Database.snapshot`` sends them in its pipeline)."""
        _, _, held, bound = self._key
        resolving = conn.cursor(row_factory=dict_row)
        resolving.execute(*pipelines.resolving(self.name, held, bound))
        early = None
        if not self.plan.fused:
            self._guess = self.guesses.get(self._key)
        if self._guess is not None:
            pipeline, classifications = self._guess
            request, scope = scope_of(pipeline, classifications, self.asked, self.as_of)
            strategy = strategies.get(self.plan.legs[0].strategy)
            early = strategy.opening(pipeline, planner.single_request(request), scope,
                                     self.context)
            if early is not None:
                early.cursor = conn.cursor(binary=early.binary)
                early.cursor.execute(early.statement, early.params)
        return resolving, early

    def receive(self, sent: tuple[psycopg.Cursor, Opening | None]
                ) -> tuple[Pipeline, tuple[str, ...], Opening | None]:
        """The pipeline and held classifications, and the strategy's first statement when
        it was built from exactly these (else None: its rows stay unread)."""
        resolving, early = sent
        _, _, asked, bound = self._key
        pipeline, held, limit = pipelines.resolved(resolving.fetchone(), self.name, bound)
        check_bound(asked, limit)
        if self._guess != (pipeline, held):
            early = None
        self.guesses.put(self._key, (pipeline, held))
        return pipeline, held, early
