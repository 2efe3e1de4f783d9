-- Graph walks at a million edges, and the Apache AGE mirror's bookkeeping.
--
-- Edges ordered heaviest first per vertex and type, covering the other end, so
-- "the cap+1 heaviest edges of v" is an index-only scan that stops early even on a
-- hub with 100k edges, and an in-list (who points at z) needs no heap visit.
-- edges_in_heaviest has edges_dst's columns as its prefix and replaces it.
CREATE INDEX edges_out_heaviest ON pgbraid.edges (pipeline_id, src, type, weight DESC, dst);
CREATE INDEX edges_in_heaviest ON pgbraid.edges (pipeline_id, dst, type, weight DESC, src);
DROP INDEX pgbraid.edges_dst;

-- An edge's own id: its AGE mirror edge is derived from it (graphid = label, id).
ALTER TABLE pgbraid.edges ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX edges_id ON pgbraid.edges (id);

-- Every load and vertex delete bumps its pipeline's graph version (in the same
-- transaction), whether or not AGE is used: a mirror that lags is known stale.
-- The vertex and edge types ever loaded are kept here too: finding them with
-- DISTINCT read every edge of the pipeline on every search (200 ms at 1M edges).
CREATE TABLE pgbraid.graph_versions (
    pipeline_id  bigint PRIMARY KEY REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    version      bigint NOT NULL DEFAULT 1,
    vertex_types text[] NOT NULL DEFAULT '{}',
    edge_types   text[] NOT NULL DEFAULT '{}'
);
INSERT INTO pgbraid.graph_versions (pipeline_id, tenant_id, vertex_types, edge_types)
SELECT p.id, p.tenant_id,
       ARRAY(SELECT DISTINCT v.type FROM pgbraid.vertices v WHERE v.pipeline_id = p.id ORDER BY 1),
       ARRAY(SELECT DISTINCT e.type FROM pgbraid.edges e WHERE e.pipeline_id = p.id ORDER BY 1)
FROM pgbraid.pipelines p
WHERE EXISTS (SELECT 1 FROM pgbraid.vertices v WHERE v.pipeline_id = p.id);

-- The AGE graph mirroring a pipeline (created only with PGBRAID_AGE=1 and AGE
-- installed), and the graph version it holds.
CREATE TABLE pgbraid.age_graphs (
    pipeline_id  bigint PRIMARY KEY REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    graph        text NOT NULL UNIQUE,
    vertex_label integer NOT NULL,
    edge_label   integer NOT NULL,
    version      bigint NOT NULL DEFAULT -1
);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['graph_versions', 'age_graphs']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE pgbraid.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON pgbraid.%I USING (tenant_id = current_setting(''pgbraid.tenant'', true))', t);
    END LOOP;
END
$$;
GRANT SELECT, INSERT, UPDATE ON pgbraid.graph_versions TO pgbraid_app;
GRANT SELECT, INSERT, UPDATE ON pgbraid.age_graphs TO pgbraid_app;
