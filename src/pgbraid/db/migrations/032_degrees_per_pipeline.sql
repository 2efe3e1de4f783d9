-- The degree trigger (022) writes vertex_degrees one pipeline at a time, each
-- statement naming its pipeline: the same counts and lock order on every server; on
-- a Citus coordinator each statement is routed to the pipeline's shard (022's
-- statements over every pipeline's rows failed there: "could not run distributed
-- query with FOR UPDATE/SHARE", so every graph load failed on Citus).
CREATE OR REPLACE FUNCTION pgbraid.edges_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ends_tenant text[] := '{}'; ends_pipeline bigint[] := '{}'; ends_vertex bigint[] := '{}';
    ends_type text[] := '{}'; ends_out boolean[] := '{}'; ends_delta bigint[] := '{}';
    net_tenant text[]; net_pipeline bigint[]; net_vertex bigint[]; net_type text[];
    net_out boolean[]; net_delta bigint[];
    pid bigint;
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
    -- One pipeline at a time, its id a constant of each statement: on a Citus
    -- coordinator each is then routed to the pipeline's shard of vertex_degrees (a
    -- statement over every pipeline's rows cannot lock them: FOR UPDATE needs one
    -- shard). Pipelines in id order, rows in key order within each: the lock order of
    -- 022, so two writers still wait for each other instead of deadlocking.
    FOR pid IN SELECT DISTINCT p FROM unnest(net_pipeline) AS u(p) ORDER BY p LOOP
        -- Fewer edges: lock in key order, then subtract (a row already gone, its
        -- pipeline being deleted in this statement, stays gone); 0 deletes the row.
        PERFORM 1 FROM pgbraid.vertex_degrees g
          JOIN unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
            ON (g.vertex, g.type, g.outgoing) = (d.v, d.t, d.o)
         WHERE g.pipeline_id = pid AND d.p = pid AND d.n < 0
         ORDER BY g.vertex, g.type, g.outgoing FOR UPDATE OF g;
        DELETE FROM pgbraid.vertex_degrees g
         USING unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
         WHERE g.pipeline_id = pid AND d.p = pid
           AND (g.vertex, g.type, g.outgoing) = (d.v, d.t, d.o)
           AND d.n < 0 AND g.edges + d.n <= 0;
        UPDATE pgbraid.vertex_degrees g SET edges = g.edges + d.n
          FROM unnest(net_pipeline, net_vertex, net_type, net_out, net_delta) AS d(p, v, t, o, n)
         WHERE g.pipeline_id = pid AND d.p = pid
           AND (g.vertex, g.type, g.outgoing) = (d.v, d.t, d.o) AND d.n < 0;
        -- More edges: added under the row's lock, in key order.
        INSERT INTO pgbraid.vertex_degrees AS g (tenant_id, pipeline_id, vertex, type, outgoing, edges)
        SELECT d.tenant, pid, d.v, d.t, d.o, d.n
          FROM unnest(net_tenant, net_pipeline, net_vertex, net_type, net_out, net_delta) WITH ORDINALITY
               AS d(tenant, p, v, t, o, n, i)
         WHERE d.p = pid AND d.n > 0 ORDER BY d.i
        ON CONFLICT (pipeline_id, vertex, type, outgoing) DO UPDATE SET edges = g.edges + EXCLUDED.edges;
    END LOOP;
    RETURN NULL;
END
$$;

