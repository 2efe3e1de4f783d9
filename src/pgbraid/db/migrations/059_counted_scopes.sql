-- Pipeline counts (GET /pipelines, pipelines.info) as index-only scans: each
-- index carries the columns the count's scope reads (the tenant's row-level
-- security, classifications, quarantine, the current version), so counting a
-- pipeline reads its index entries, not the versions' and fragments' heap
-- (bodies, tsvectors: 994 of SciFact's 1,052 buffers). fragments_pipeline is
-- widened, not doubled: ingestion maintains the same number of indexes there. It stays
-- whole (not partial on current and not quarantined): a quarantine, a release and the
-- graph find a document's fragments through it, whatever their flags.
-- One DO block: a Citus coordinator runs a migration as one command.
DO $$
BEGIN
    EXECUTE 'DROP INDEX pgbraid.fragments_pipeline';
    EXECUTE 'CREATE INDEX fragments_pipeline ON pgbraid.fragments (pipeline_id, document_id)'
            ' INCLUDE (tenant_id, classifications, current, quarantined)';
    EXECUTE 'CREATE INDEX versions_counted ON pgbraid.versions (pipeline_id, document_id, version)'
            ' INCLUDE (tenant_id, classifications)';
    EXECUTE 'CREATE INDEX documents_counted ON pgbraid.documents (pipeline_id, id)'
            ' INCLUDE (tenant_id, current_version) WHERE NOT quarantined';
END
$$;
