-- A purpose-built graph per pipeline: typed vertices (optionally describing
-- documents) and typed, weighted, optionally directed edges. Walks read edges
-- by (pipeline, src, type) and (pipeline, dst, type).
CREATE TABLE pgbraid.vertices (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    type         text NOT NULL,
    key          text NOT NULL,
    label        text,
    documents    text[] NOT NULL DEFAULT '{}',
    properties   jsonb NOT NULL DEFAULT '{}',
    UNIQUE (pipeline_id, type, key)
);
CREATE INDEX vertices_key ON pgbraid.vertices (pipeline_id, key);
CREATE INDEX vertices_label ON pgbraid.vertices (pipeline_id, lower(label));

CREATE TABLE pgbraid.edges (
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    src          bigint NOT NULL REFERENCES pgbraid.vertices ON DELETE CASCADE,
    type         text NOT NULL,
    dst          bigint NOT NULL REFERENCES pgbraid.vertices ON DELETE CASCADE,
    weight       float8 NOT NULL DEFAULT 1.0,
    directed     boolean NOT NULL DEFAULT true,
    properties   jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (pipeline_id, src, type, dst),
    CHECK (src <> dst)
);
CREATE INDEX edges_dst ON pgbraid.edges (pipeline_id, dst, type);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['vertices', 'edges']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE pgbraid.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON pgbraid.%I USING (tenant_id = current_setting(''pgbraid.tenant'', true))', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.%I TO pgbraid_app', t);
    END LOOP;
END
$$;
