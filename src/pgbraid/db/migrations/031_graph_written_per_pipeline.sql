-- The graph-version trigger (021) bumps graph_versions with one statement per
-- pipeline written, of constant values, reading the transition table only locally.
-- Same effect as before on every server; on a Citus coordinator the trigger runs on
-- the worker holding the shard, where a statement over the transition table joined
-- into a distributed table cannot be planned ("could not find named tuplestore"),
-- while one of constants is routed to the co-located shard of graph_versions.
CREATE OR REPLACE FUNCTION pgbraid.graph_written() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    held record;
    merged_vertex_types text[];
    merged_edge_types text[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        FOR r IN SELECT DISTINCT o.pipeline_id FROM old_rows o LOOP
            UPDATE pgbraid.graph_versions SET version = version + 1
             WHERE pipeline_id = r.pipeline_id;
        END LOOP;
        RETURN NULL;
    END IF;
    FOR r IN SELECT n.pipeline_id, min(n.tenant_id) AS tenant_id,
                    ARRAY(SELECT DISTINCT t FROM unnest(array_agg(n.type)) t ORDER BY 1) AS types
               FROM new_rows n GROUP BY n.pipeline_id LOOP
        INSERT INTO pgbraid.graph_versions (pipeline_id, tenant_id, vertex_types, edge_types)
        VALUES (r.pipeline_id, r.tenant_id,
                CASE WHEN starts_with(TG_TABLE_NAME, 'vertices') THEN r.types ELSE '{}' END,
                CASE WHEN starts_with(TG_TABLE_NAME, 'edges') THEN r.types ELSE '{}' END)
        ON CONFLICT (pipeline_id) DO NOTHING;
        CONTINUE WHEN FOUND;
        SELECT g.vertex_types, g.edge_types INTO held FROM pgbraid.graph_versions g
         WHERE g.pipeline_id = r.pipeline_id FOR UPDATE;
        merged_vertex_types := held.vertex_types;
        merged_edge_types := held.edge_types;
        IF starts_with(TG_TABLE_NAME, 'vertices') THEN  -- on Citus, a shard's name: vertices_102008
            merged_vertex_types := ARRAY(SELECT DISTINCT t FROM unnest(merged_vertex_types || r.types) t ORDER BY 1);
        ELSE
            merged_edge_types := ARRAY(SELECT DISTINCT t FROM unnest(merged_edge_types || r.types) t ORDER BY 1);
        END IF;
        UPDATE pgbraid.graph_versions g SET version = g.version + 1,
               vertex_types = merged_vertex_types, edge_types = merged_edge_types
         WHERE g.pipeline_id = r.pipeline_id;
    END LOOP;
    RETURN NULL;
END
$$;
