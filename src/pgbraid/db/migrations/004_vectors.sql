-- Vectors: one row per embedded fragment. HNSW indexes are created per
-- pipeline (one per distance strategy) on embedding::vector(dimension), partial
-- on the pipeline and current rows, so pipelines of different dimensions coexist.
-- The embedded text's hash lets a re-ingest reuse an unchanged fragment's vector.

ALTER TABLE pgbraid.fragments ADD COLUMN content_hash text;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        EXECUTE $sql$
            CREATE TABLE pgbraid.embeddings (
                fragment_id  bigint PRIMARY KEY REFERENCES pgbraid.fragments ON DELETE CASCADE,
                tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
                pipeline_id  bigint NOT NULL,
                current      boolean NOT NULL DEFAULT true,
                embedding    vector NOT NULL
            )$sql$;
        ALTER TABLE pgbraid.embeddings ENABLE ROW LEVEL SECURITY;
        ALTER TABLE pgbraid.embeddings FORCE ROW LEVEL SECURITY;
        CREATE POLICY tenant ON pgbraid.embeddings
            USING (tenant_id = current_setting('pgbraid.tenant', true));
        GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.embeddings TO pgbraid_app;
    END IF;
END
$$;
