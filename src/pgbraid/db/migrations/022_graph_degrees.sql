-- Graph reads that stay in the index, and precomputed degrees.
--
-- The edge indexes of 021 carry tenant_id too: the tenant policy is a filter on
-- every row, and without the column in the index each edge read visited the heap
-- (a hub's 30k edges: a bitmap heap scan instead of an index-only scan).
DROP INDEX pgbraid.edges_out_heaviest;
DROP INDEX pgbraid.edges_in_heaviest;
CREATE INDEX edges_out_heaviest ON pgbraid.edges (pipeline_id, src, type, weight DESC, dst)
    INCLUDE (tenant_id);
CREATE INDEX edges_in_heaviest ON pgbraid.edges (pipeline_id, dst, type, weight DESC, src)
    INCLUDE (tenant_id);

-- Each vertex's number of edges per edge type and direction, kept by triggers in the
-- same transaction as every write to pgbraid.edges (pgbraid's loads and deletes,
-- cascaded deletes of vertices and pipelines, and SQL of your own). `similar` reads
-- it to find hubs, to order them smallest first and to bound what a candidate
-- sharing only hubs can score without reading the hubs' 100k edges.
--
-- Concurrency: a count changes only by adding a delta under the row's lock
-- (INSERT ... ON CONFLICT DO UPDATE, or UPDATE), never by writing a value read
-- earlier, so two writers cannot lose each other's edges; rows are locked in key
-- order, so two loads touching the same vertices wait for each other, not deadlock.
CREATE TABLE pgbraid.vertex_degrees (
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    vertex       bigint NOT NULL,
    type         text NOT NULL,
    outgoing     boolean NOT NULL,
    edges        bigint NOT NULL CHECK (edges > 0),
    PRIMARY KEY (pipeline_id, vertex, type, outgoing) INCLUDE (edges, tenant_id)
);
-- The vertices of a degree range (a candidate seen in one hub list must be about as
-- small as the seed to matter: similar reads them as a range, not one probe each).
CREATE INDEX vertex_degrees_size ON pgbraid.vertex_degrees (pipeline_id, type, outgoing, edges)
    INCLUDE (vertex, tenant_id);

CREATE FUNCTION pgbraid.edges_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ends_tenant text[] := '{}'; ends_pipeline bigint[] := '{}'; ends_vertex bigint[] := '{}';
    ends_type text[] := '{}'; ends_out boolean[] := '{}'; ends_delta bigint[] := '{}';
    net_tenant text[]; net_pipeline bigint[]; net_vertex bigint[]; net_type text[];
    net_out boolean[]; net_delta bigint[];
BEGIN
    -- Both ends of the statement's edges: +1 for each new row, -1 for each old one.
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        SELECT array_agg(x.tenant_id), array_agg(x.pipeline_id), array_agg(x.vertex),
               array_agg(x.type), array_agg(x.outgoing), array_agg(1::bigint)
          INTO ends_tenant, ends_pipeline, ends_vertex, ends_type, ends_out, ends_delta
          FROM (SELECT n.tenant_id, n.pipeline_id, n.src AS vertex, n.type, true AS outgoing
                  FROM new_rows n
                UNION ALL SELECT n.tenant_id, n.pipeline_id, n.dst, n.type, false FROM new_rows n) x;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        SELECT coalesce(ends_tenant, '{}') || array_agg(x.tenant_id),
               coalesce(ends_pipeline, '{}') || array_agg(x.pipeline_id),
               coalesce(ends_vertex, '{}') || array_agg(x.vertex),
               coalesce(ends_type, '{}') || array_agg(x.type),
               coalesce(ends_out, '{}') || array_agg(x.outgoing),
               coalesce(ends_delta, '{}') || array_agg(-1::bigint)
          INTO ends_tenant, ends_pipeline, ends_vertex, ends_type, ends_out, ends_delta
          FROM (SELECT o.tenant_id, o.pipeline_id, o.src AS vertex, o.type, true AS outgoing
                  FROM old_rows o
                UNION ALL SELECT o.tenant_id, o.pipeline_id, o.dst, o.type, false FROM old_rows o) x;
    END IF;
    -- The net change per row of vertex_degrees, in key order (the order rows are locked in).
    SELECT array_agg(c.tenant_id ORDER BY c.p, c.v, c.t, c.o), array_agg(c.p ORDER BY c.p, c.v, c.t, c.o),
           array_agg(c.v ORDER BY c.p, c.v, c.t, c.o), array_agg(c.t ORDER BY c.p, c.v, c.t, c.o),
           array_agg(c.o ORDER BY c.p, c.v, c.t, c.o), array_agg(c.n ORDER BY c.p, c.v, c.t, c.o)
      INTO net_tenant, net_pipeline, net_vertex, net_type, net_out, net_delta
      FROM (SELECT min(e.tenant_id) AS tenant_id, e.p, e.v, e.t, e.o, sum(e.n) AS n
              FROM unnest(ends_tenant, ends_pipeline, ends_vertex, ends_type, ends_out, ends_delta)
                   AS e(tenant_id, p, v, t, o, n)
             GROUP BY e.p, e.v, e.t, e.o HAVING sum(e.n) <> 0) c;
    IF net_delta IS NULL THEN
        RETURN NULL;
    END IF;
    -- Fewer edges: lock in key order, then subtract (a row already gone, its pipeline
    -- being deleted in this statement, stays gone); a row reaching 0 is deleted.
    PERFORM 1 FROM pgbraid.vertex_degrees g
      JOIN unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
        ON (g.pipeline_id, g.vertex, g.type, g.outgoing) = (d.p, d.v, d.t, d.o)
     WHERE d.n < 0 ORDER BY g.pipeline_id, g.vertex, g.type, g.outgoing FOR UPDATE OF g;
    DELETE FROM pgbraid.vertex_degrees g
     USING unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
     WHERE (g.pipeline_id, g.vertex, g.type, g.outgoing) = (d.p, d.v, d.t, d.o)
       AND d.n < 0 AND g.edges + d.n <= 0;
    UPDATE pgbraid.vertex_degrees g SET edges = g.edges + d.n
      FROM unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
     WHERE (g.pipeline_id, g.vertex, g.type, g.outgoing) = (d.p, d.v, d.t, d.o) AND d.n < 0;
    -- More edges: added under the row's lock, in key order.
    INSERT INTO pgbraid.vertex_degrees AS g (tenant_id, pipeline_id, vertex, type, outgoing, edges)
    SELECT d.tenant, d.p, d.v, d.t, d.o, d.n
      FROM unnest(net_tenant, net_pipeline, net_vertex, net_type, net_out, net_delta) WITH ORDINALITY
           AS d(tenant, p, v, t, o, n, i)
     WHERE d.n > 0 ORDER BY d.i
    ON CONFLICT (pipeline_id, vertex, type, outgoing) DO UPDATE SET edges = g.edges + EXCLUDED.edges;
    RETURN NULL;
END
$$;

CREATE TRIGGER edges_counted_inserted AFTER INSERT ON pgbraid.edges REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.edges_counted();
CREATE TRIGGER edges_counted_updated AFTER UPDATE ON pgbraid.edges
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.edges_counted();
CREATE TRIGGER edges_counted_deleted AFTER DELETE ON pgbraid.edges REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.edges_counted();

INSERT INTO pgbraid.vertex_degrees (tenant_id, pipeline_id, vertex, type, outgoing, edges)
SELECT min(x.tenant_id), x.pipeline_id, x.vertex, x.type, x.outgoing, count(*) FROM (
    SELECT e.tenant_id, e.pipeline_id, e.src AS vertex, e.type, true AS outgoing FROM pgbraid.edges e
    UNION ALL
    SELECT e.tenant_id, e.pipeline_id, e.dst, e.type, false FROM pgbraid.edges e) x
GROUP BY x.pipeline_id, x.vertex, x.type, x.outgoing;

ALTER TABLE pgbraid.vertex_degrees ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.vertex_degrees FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.vertex_degrees
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.vertex_degrees TO pgbraid_app;
