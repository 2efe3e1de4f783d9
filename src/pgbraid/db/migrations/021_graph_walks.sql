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

-- Every write to a pipeline's vertices or edges bumps its graph version (triggers:
-- in the same transaction, also for writes in SQL of your own and for cascaded
-- deletes), whether or not AGE is used: a mirror that lags is known stale. The
-- vertex and edge types ever written are kept here too: finding them with DISTINCT
-- read every edge of the pipeline on every search (200 ms at 1M edges).
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

CREATE FUNCTION pgbraid.graph_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE pgbraid.graph_versions g SET version = g.version + 1
         WHERE g.pipeline_id IN (SELECT DISTINCT o.pipeline_id FROM old_rows o);
    ELSE
        INSERT INTO pgbraid.graph_versions AS g (pipeline_id, tenant_id, vertex_types, edge_types)
        SELECT n.pipeline_id, min(n.tenant_id),
               CASE WHEN TG_TABLE_NAME = 'vertices' THEN array_agg(DISTINCT n.type) ELSE '{}' END,
               CASE WHEN TG_TABLE_NAME = 'edges' THEN array_agg(DISTINCT n.type) ELSE '{}' END
          FROM new_rows n GROUP BY n.pipeline_id
        ON CONFLICT (pipeline_id) DO UPDATE SET version = g.version + 1,
           vertex_types = ARRAY(SELECT DISTINCT unnest(g.vertex_types || EXCLUDED.vertex_types) ORDER BY 1),
           edge_types = ARRAY(SELECT DISTINCT unnest(g.edge_types || EXCLUDED.edge_types) ORDER BY 1);
    END IF;
    RETURN NULL;
END
$$;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['vertices', 'edges']
    LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON pgbraid.%I REFERENCING NEW TABLE AS new_rows'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.graph_written()', t || '_inserted', t);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON pgbraid.%I REFERENCING NEW TABLE AS new_rows'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.graph_written()', t || '_updated', t);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON pgbraid.%I REFERENCING OLD TABLE AS old_rows'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.graph_written()', t || '_deleted', t);
    END LOOP;
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
