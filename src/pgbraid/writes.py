"""What a Client writes: pipelines (create, delete), ingestion, document deletion,
quarantine and release, key rotation, each audited. A base of ``client.Client``
(which holds ``_db``, ``principal``, ``keyring``, ``settings``, ``_usage``,
``_session``, ``embedder`` and ``pipeline``); kept apart so each file stays short."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from . import (audit, embedders, encryption, housekeeping, live as live_fetch, pipelines,
               rotation)
from .errors import NotEnabled
from .ingest import guard, quarantine, records
from .ingest.batches import IngestReport, ingest
from .ingest.readers import FieldMap, items
from .ingest.writer import delete_document
from .models import PipelineInfo
from .strategies.vector import store as vectors

ANALYZE_AFTER = 1_000
# ... and a tenth of the fragments the statistics last counted (autovacuum's default
# share): a bulk load into a big table leaves its statistics representative.
ANALYZE_SHARE = 0.1
# The GIN indexes an ingest feeds (fulltext, trigram, word sets, fuzzy's dictionary) take
# new entries into a pending list that every search through them reads whole, and the
# planner prices in, until a vacuum merges it. After a bulk load every list is merged at
# once, so searches right after it do not pay for it (measured: docs/benchmarks.md, Fuzzy).
MERGE_PENDING = """
SELECT count(gin_clean_pending_list(i.indexrelid)) FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE a.amname = 'gin'
  AND i.indrelid IN ('pgbraid.fragments'::regclass, 'pgbraid.fuzzy_words'::regclass)
"""
# After a smaller ingest, fulltext's list alone: a few hundred pending fragments made the
# statement fulltext sends scan the table instead of fragments_tsv. Merging every list
# after each small ingest cost 34-40 % more server CPU a call, this one 0.6-7 %
# (paired, docs/benchmarks.md, Ingestion). After the call's batches commit: no lock is held.
MERGE_FULLTEXT = "SELECT gin_clean_pending_list('pgbraid.fragments_tsv'::regclass)"



class Writes:
    """Mixed into Client."""

    # -- pipelines ------------------------------------------------------------

    def create_pipeline(self, name: str, *, embedder: str = "minilm", encrypt: bool = False,
                        encrypt_metadata: Iterable[str] | None = None, live: Any = None,
                        **options: Any) -> PipelineInfo:
        """Create a pipeline; ``embedder`` is minilm (default), e5-multilingual, openai or none;
        ``encrypt``: text, titles and ``encrypt_metadata`` fields sealed (encryption.py);
        ``live``: a live source (live.LiveSource or its dict)."""
        self.principal.require_tenant_admin("creating a pipeline")
        # Admin on the new name too, before it is looked up: an admin bounded to other
        # pipelines would otherwise learn which names exist (409) and make unreadable ones.
        self.principal.require(name, "admin")
        options["encryption"] = encryption.settings_for(self.keyring, encrypt, encrypt_metadata)
        chosen = embedders.validate_name(embedder)
        source = live_fetch.parse(live) if live is not None else None
        dimension = None
        if chosen:
            self._db.open()
            if "vector" not in self._db.extensions:
                raise NotEnabled("pgvector is not installed on this server: create the pipeline "
                                 "with embedder 'none'", strategy="similarity")
            dimension = embedders.DIMENSIONS.get(chosen) or self.embedder(chosen).dimension
        with self._session() as conn:
            pipeline = pipelines.create(conn, name, embedder=chosen, dimension=dimension, **options)
            if source is not None:
                pipelines.set_setting(conn, name, "live", source.model_dump(mode="json"))
            audit.record(conn, self.principal, "pipeline.create", name,
                         {"embedder": chosen, **options})  # as validated: JSON types
        if chosen:
            try:
                with self._db.admin() as conn:  # index DDL needs the table owner
                    vectors.create_indexes(conn, pipeline.id, dimension)
            except Exception:
                self.delete_pipeline(name)
                raise
        return self.pipeline(name)

    def delete_pipeline(self, name: str) -> dict[str, Any]:
        """Delete a pipeline and everything in it: ``{"deleted", "warnings"}``. Its HNSW
        indexes and Apache AGE mirror are dropped after the commit; what cannot be dropped
        then is a warning, not an error (housekeeping.py): the pipeline is gone, and the
        tenant's next pipeline delete drops what was left."""
        self.principal.require(name, "admin")
        with self._session() as conn:
            pipeline = pipelines.get(conn, name)
            bound = guard.bound_for(conn, self.principal)
            if bound is not None:
                bound.check_pipeline(conn, pipeline.id, name)
            mirror = conn.execute("SELECT graph FROM pgbraid.age_graphs WHERE pipeline_id = %s",
                                  (pipeline.id,)).fetchone()
            pipelines.delete(conn, name)
            audit.record(conn, self.principal, "pipeline.delete", name)
        left = [housekeeping.Leftover(pipeline.id, "vector_indexes")] if pipeline.embedder else []
        if mirror is not None:  # its Apache AGE mirror holds the pipeline's graph: it goes too
            left.append(housekeeping.Leftover(pipeline.id, "graph_mirror", mirror[0]))
        warnings = housekeeping.drop_deleted(self._db, self.tenant, name, left,
                                             self.settings.housekeeping_lock_timeout_ms)
        return {"deleted": name, "warnings": warnings}

    # -- ingestion ------------------------------------------------------------

    def ingest(self, pipeline: str, source: Iterable[Path | str] | Iterable[dict[str, Any]], *,
               fields: FieldMap = FieldMap(), on_error: Literal["continue", "stop"] = "continue",
               progress: Callable[[IngestReport], None] | None = None) -> IngestReport:
        """Ingest files/folders (paths) or records (dicts in the JSONL format), checked
        against the record schema (ingest/records.py): in a list, one with an unknown
        field or a wrong type refuses the call and nothing of it is written; from a
        generator, it fails alone in the report."""
        self.principal.require(pipeline, "write")
        source = records.checked(source, fields)
        with self._session() as conn:
            target = dataclasses.replace(pipelines.get(conn, pipeline), keyring=self.keyring,
                                         bound=guard.bound_for(conn, self.principal))
        embedder = self.embedder(target.embedder) if target.embedder else None
        try:
            report = ingest(self._session, target, live_fetch.reserved(items(source, fields)),
                            embedder=embedder, on_error=on_error, progress=progress,
                            after=lambda done: self._after_writing(done.fragments))
        except BaseException as exc:  # batches before the error are written: say so
            audit.record_quietly(self._db, self.principal, "document.ingest", pipeline,
                                 {"error": type(exc).__name__})
            raise
        finally:
            guard.audit_refused(self._usage, self.principal, target.bound, pipeline)
        audit.record(self._db, self.principal, "document.ingest", pipeline, {
            "added": report.added, "updated": report.updated, "unchanged": report.unchanged,
            "failed": len(report.failed)})
        report.lsn = self._commit_lsn()
        return report

    def _after_writing(self, fragments: int) -> list[housekeeping.StepWarning]:
        """Merge GIN pending lists (fulltext's, or after a bulk load all of them and fresh
        planner statistics too), so searches right after it plan well. After the commit:
        a failure (a lock another session holds) is a warning, not the call's error."""
        def merge(conn: Any) -> None:
            if fragments < ANALYZE_AFTER:
                conn.execute(MERGE_FULLTEXT)
                return
            conn.execute(MERGE_PENDING)
            counted = conn.execute("SELECT reltuples FROM pg_class"
                                   " WHERE oid = 'pgbraid.fragments'::regclass").fetchone()[0]
            if fragments >= ANALYZE_SHARE * max(counted, 0):
                conn.execute("ANALYZE pgbraid.fragments, pgbraid.versions,"
                             " pgbraid.documents, pgbraid.bm25_postings")

        return housekeeping.attempt(
            self._db, self.settings.housekeeping_lock_timeout_ms, "merge_pending_lists",
            "the ingest is committed, but merging its GIN pending lists (and, after a bulk "
            "load, refreshing planner statistics) did not finish: searches may read the "
            "lists until the next ingest or autovacuum merges them", merge)

    def delete_document(self, pipeline: str, document_id: str) -> dict[str, Any]:
        """Expire a document's current version; its history stays readable."""
        self.principal.require(pipeline, "write")
        with self._session() as conn:
            target = dataclasses.replace(pipelines.get(conn, pipeline),
                                         bound=guard.bound_for(conn, self.principal))
            version = delete_document(conn, target, document_id)
            audit.record(conn, self.principal, "document.delete", f"{pipeline}/{document_id}",
                         {"expired_version": version})
        return {"document_id": document_id, "expired_version": version, "lsn": self._commit_lsn()}

    def _commit_lsn(self) -> str:
        """The primary's WAL position after this call's commits: a search with it as
        ``min_lsn`` reads them on any replica (db/replicas.py)."""
        with self._db.admin() as conn:
            return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

    def quarantine_document(self, pipeline: str, document_id: str, *,
                            reason: str | None = None) -> dict[str, Any]:
        """Withhold a document from every search until released (write); idempotent."""
        return self._quarantine(pipeline, document_id, True, reason)

    def release_document(self, pipeline: str, document_id: str) -> dict[str, Any]:
        """Lift a quarantine: the document searches exactly as before it (write)."""
        return self._quarantine(pipeline, document_id, False, None)

    def _quarantine(self, pipeline: str, document_id: str, quarantined: bool,
                    reason: str | None) -> dict[str, Any]:
        """Every quarantine change, both ways (ingest/quarantine.py), audited with it."""
        self.principal.require(pipeline, "write")
        reason = quarantine.check(document_id, quarantined, reason)
        with self._session() as conn:
            state = quarantine.change(conn, pipelines.get(conn, pipeline), document_id,
                                      quarantined=quarantined, reason=reason,
                                      bound=self.principal.classifications)
            if state["changed"]:
                audit.record(conn, self.principal,
                             "document.quarantine" if quarantined else "document.release",
                             f"{pipeline}/{document_id}", {"reason": reason} if reason else None)
        return {**state, "lsn": self._commit_lsn()}

    def rotate_encryption(self, pipeline: str, *, batch_size: int = rotation.BATCH,
                          pause: float = 0.0,
                          progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Re-seal an encrypted pipeline under a new current key, in batches (rotation.py);
        run again after an interruption to finish."""
        self.principal.require(pipeline, "admin")
        done = rotation.rotate(self._db, self.tenant, pipeline, self.keyring,
                               batch_size=batch_size, pause=pause, progress=progress)
        audit.record(self._db, self.principal, "encryption.rotate", pipeline,
                     {k: done[k] for k in ("key_id", "fragments", "versions", "resumed")})
        return done
