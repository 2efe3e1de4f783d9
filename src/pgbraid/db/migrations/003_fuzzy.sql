-- fuzzy: trigram indexes over fragment text and titles (pg_trgm, GIN).
-- The title is copied onto each fragment so one index serves title matches.
-- With btree_gin the pipeline is the index's first column, so one pipeline's
-- search never rechecks (and scores) another pipeline's long fragments.

ALTER TABLE pgbraid.fragments ADD COLUMN title text;
UPDATE pgbraid.fragments f SET title = v.title FROM pgbraid.versions v WHERE v.id = f.version_id;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        DROP INDEX pgbraid.fragments_tsv;
        CREATE INDEX fragments_tsv ON pgbraid.fragments USING gin (pipeline_id, tsv)
            WHERE current AND NOT quarantined;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')
       AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        CREATE INDEX fragments_body_trgm ON pgbraid.fragments
            USING gin (pipeline_id, body gin_trgm_ops) WHERE current AND NOT quarantined;
        CREATE INDEX fragments_title_trgm ON pgbraid.fragments
            USING gin (pipeline_id, title gin_trgm_ops) WHERE current AND NOT quarantined;
    ELSIF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX fragments_body_trgm ON pgbraid.fragments
            USING gin (body gin_trgm_ops) WHERE current AND NOT quarantined;
        CREATE INDEX fragments_title_trgm ON pgbraid.fragments
            USING gin (title gin_trgm_ops) WHERE current AND NOT quarantined;
    END IF;
END
$$;
