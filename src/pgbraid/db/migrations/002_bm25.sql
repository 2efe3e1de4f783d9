-- BM25: per-fragment term statistics (the forward index), per-pipeline
-- statistics, live document frequencies, and postings stored as segments.
-- Each ingest batch writes one segment: per term, packed arrays of fragment
-- ordinals (int32), term frequencies (uint16) and fragment lengths (uint16).
-- Segments are merged in tiers; fragments that expire go to bm25_dead until a
-- merge drops their postings. All of it changes in the ingest transaction.

ALTER TABLE pgbraid.fragments
    ADD COLUMN bm25_ordinal integer,
    ADD COLUMN bm25_length integer,
    ADD COLUMN bm25_terms text[],
    ADD COLUMN bm25_tfs integer[];

CREATE UNIQUE INDEX fragments_bm25_ordinal ON pgbraid.fragments (pipeline_id, bm25_ordinal);

CREATE TABLE pgbraid.bm25_stats (
    pipeline_id    bigint PRIMARY KEY REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id      text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    fragments      bigint NOT NULL DEFAULT 0,
    total_length   bigint NOT NULL DEFAULT 0,
    next_ordinal   integer NOT NULL DEFAULT 0,
    next_segment   integer NOT NULL DEFAULT 0
);

CREATE TABLE pgbraid.bm25_terms (
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    term         text NOT NULL,
    df           integer NOT NULL,
    PRIMARY KEY (pipeline_id, term)
);

CREATE TABLE pgbraid.bm25_segments (
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    segment      integer NOT NULL,
    fragments    integer NOT NULL,
    tier         integer NOT NULL,
    PRIMARY KEY (pipeline_id, segment)
);

CREATE TABLE pgbraid.bm25_postings (
    pipeline_id  bigint NOT NULL,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    term         text NOT NULL,
    segment      integer NOT NULL,
    postings     integer NOT NULL,
    ordinals     bytea NOT NULL,
    tfs          bytea NOT NULL,
    lengths      bytea NOT NULL,
    PRIMARY KEY (pipeline_id, term, segment),
    FOREIGN KEY (pipeline_id, segment) REFERENCES pgbraid.bm25_segments ON DELETE CASCADE
);
-- Packed arrays barely compress; skip pglz so reads are a plain copy.
ALTER TABLE pgbraid.bm25_postings ALTER COLUMN ordinals SET STORAGE EXTERNAL,
    ALTER COLUMN tfs SET STORAGE EXTERNAL, ALTER COLUMN lengths SET STORAGE EXTERNAL;

CREATE TABLE pgbraid.bm25_dead (
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    ordinal      integer NOT NULL,
    PRIMARY KEY (pipeline_id, ordinal)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgbraid TO pgbraid_app;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['bm25_stats', 'bm25_terms', 'bm25_segments', 'bm25_postings', 'bm25_dead']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE pgbraid.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON pgbraid.%I USING (tenant_id = current_setting(''pgbraid.tenant'', true))', t);
    END LOOP;
END
$$;
