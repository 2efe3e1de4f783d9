"""What a writer may write: the classification bound of ingestion and deletion.

A principal whose classifications are bounded (an API key naming some) writes
within what it may hold (``held``: its classifications and ``public``, resolved
through their hierarchy):

- a record whose classifications are not all held is refused;
- a document whose current version holds a classification outside ``held`` may
  be neither overwritten, deleted, quarantined nor released (ingest/quarantine.py), and a
  pipeline holding any version outside it may not be deleted; content is compared only with a current
  version that is within ``held`` (so "unchanged" is never said of a version the
  writer could not read, and the answer is the same whatever the text);
- document ids are unique per pipeline, so such a refusal does tell the writer
  that the id exists (never its content or classifications).

Each refused record fails alone, as any failed record does (``on_error``
decides whether the call goes on); the client counts the refusals of a call as
one ``access.denied`` (audit.denied). The unbounded principal (the local process, keys
naming no classification) has no ``WriteBound`` and is not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import psycopg

from .. import audit
from ..errors import Forbidden
from ..scope import Principal, resolve_classifications

REFUSED = "refused: "


@dataclass
class WriteBound:
    held: frozenset[str]
    refused: list[str] = field(default_factory=list)
    """The document ids refused so far in this call (for the audit row)."""

    def check_record(self, document_id: str, classifications: Iterable[str]) -> None:
        beyond = sorted(set(classifications) - self.held)
        if beyond:
            self._refuse(document_id, "this principal may not write classification(s) "
                         + ", ".join(beyond))

    def check_current(self, document_id: str, classifications: Iterable[str]) -> None:
        """The document's current version must be within ``held`` to be replaced or expired."""
        if not set(classifications or ()) <= self.held:
            self._refuse(document_id, f"document {document_id!r} exists with a current version "
                         "outside this principal's classifications: it may not overwrite or "
                         "delete it")

    def check_pipeline(self, conn: psycopg.Connection, pipeline_id: int, name: str) -> None:
        """Deleting a pipeline deletes every version of every document in it: every one must
        be within ``held`` (one that is not is a document this writer may not delete)."""
        if conn.execute("SELECT EXISTS (SELECT 1 FROM pgbraid.versions v"
                        " WHERE v.pipeline_id = %s AND NOT v.classifications <@ %s::text[])",
                        (pipeline_id, sorted(self.held))).fetchone()[0]:
            raise Forbidden(f"{REFUSED}pipeline {name!r} holds versions outside this principal's "
                            "classifications: it may not delete them", pipeline=name)

    def _refuse(self, document_id: str, message: str) -> None:
        self.refused.append(document_id)
        raise Forbidden(REFUSED + message, document_id=document_id)


def bound_for(conn: psycopg.Connection, principal: Principal) -> WriteBound | None:
    """What ``principal`` may write, resolved in the session: None when unbounded."""
    if principal.classifications is None:
        return None
    return WriteBound(frozenset(resolve_classifications(conn, principal.default_classifications)))


def audit_refused(usage: audit.Usage, principal: Principal, bound: WriteBound | None,
                  pipeline: str) -> None:
    """One access.denied count for the records of an ingest call the bound refused."""
    if bound is None or not bound.refused:
        return
    ids = ", ".join(repr(i) for i in bound.refused[:20])
    more = f" and {len(bound.refused) - 20} more" if len(bound.refused) > 20 else ""
    audit.denied(usage, principal, Forbidden(
        f"{len(bound.refused)} document(s) of pipeline {pipeline!r} refused by the writer's "
        f"classifications: {ids}{more}"), "ingest")


def held_of(bound: "WriteBound | None") -> list[str] | None:
    """The SQL parameter for ``%(held)s::text[]``: None when the writer is unbounded."""
    return None if bound is None else sorted(bound.held)
