-- What a pipeline delete could not drop after its commit (housekeeping.py): its HNSW
-- indexes (DROP INDEX waits for every search of pgbraid.embeddings) and its Apache AGE
-- mirror (a schema). The pipeline is gone either way; the next pipeline delete of the
-- tenant drops what is listed here, and a row goes when its objects are gone.
-- Written and read by the login role only (the tenant set, for row-level security on
-- an external server): pgbraid_app may read its tenant's rows, never write one, so a
-- tenant's own SQL cannot list another tenant's live pipeline for dropping.
CREATE TABLE pgbraid.leftovers (
    tenant_id text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    deleted   bigint NOT NULL,   -- the deleted pipeline's id (not "pipeline_id": see distribute.py)
    kind      text NOT NULL CHECK (kind IN ('vector_indexes', 'graph_mirror')),
    graph     text,
    left_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, deleted, kind)
);
ALTER TABLE pgbraid.leftovers ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.leftovers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.leftovers
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT ON pgbraid.leftovers TO pgbraid_app;
