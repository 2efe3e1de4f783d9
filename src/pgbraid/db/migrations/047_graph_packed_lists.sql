-- Packed neighbour lists and degrees: what `similar` reads instead of rows.
--
-- Both are cut by vertex id into spans of 4,096 ids, each id stored as its offset in
-- the span (big-endian int2 in a bytea, read with numpy.frombuffer): a vertex's
-- neighbours along one edge type and direction, when it has 64 or more (a hub's 100k
-- in-edges), as a row per span they fall in, in no particular order; every vertex's
-- edge count per type and direction (pgbraid.vertex_degrees) as a row per span of
-- vertices, the offsets and the counts (int4). The rows of edges and vertex_degrees stay
-- the truth: these are patched or rebuilt from them, for the vertices a load or a
-- delete touched, by pgbraid's own writes (graph/packed.py), in the same transaction.
--
-- graph_versions.packed_version is the graph version they reflect: a search uses them
-- only when it equals version in its own snapshot. A write that does not repack (SQL of
-- your own) bumps version alone, so the search reads rows until the next load repacks.
-- Each statement is its own EXECUTE (as in 044): on a Citus coordinator whose schema is
-- distributed, a statement of a multi-statement string reaches the workers as the whole
-- string; the storage is part of CREATE TABLE (Citus refuses ALTER ... SET STORAGE).
-- Uncompressed: a row is read whole, and pglz's decompression cost more than the bytes.
DO $migration$
DECLARE t text;
BEGIN
    EXECUTE 'ALTER TABLE pgbraid.graph_versions ADD COLUMN packed_version bigint';
    EXECUTE $sql$
CREATE TABLE pgbraid.neighbour_lists (
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    vertex       bigint NOT NULL,
    type         text NOT NULL,
    outgoing     boolean NOT NULL,
    span         bigint NOT NULL,
    members      bytea STORAGE EXTERNAL NOT NULL,
    PRIMARY KEY (pipeline_id, vertex, type, outgoing, span)
)$sql$;
    EXECUTE $sql$
CREATE TABLE pgbraid.degree_blocks (
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    type         text NOT NULL,
    outgoing     boolean NOT NULL,
    block        bigint NOT NULL,
    slots        bytea STORAGE EXTERNAL NOT NULL,
    degrees      bytea STORAGE EXTERNAL NOT NULL,
    PRIMARY KEY (pipeline_id, type, outgoing, block)
)$sql$;
    -- The graphs already loaded (what graph/packed.py's full repack writes). A login that
    -- sees no edges here (no superuser: row-level security) packs nothing: those
    -- pipelines read rows until their next load.
    EXECUTE $sql$
INSERT INTO pgbraid.neighbour_lists (tenant_id, pipeline_id, vertex, type, outgoing, span, members)
SELECT min(x.tenant_id), x.pipeline_id, x.vertex, x.type, x.outgoing, x.n / 4096,
       string_agg(int2send((x.n % 4096)::int2), ''::bytea)
FROM (SELECT e.tenant_id, e.pipeline_id, e.src AS vertex, e.type, true AS outgoing, e.dst AS n
        FROM pgbraid.edges e JOIN pgbraid.vertex_degrees g ON g.pipeline_id = e.pipeline_id
         AND g.vertex = e.src AND g.type = e.type AND g.outgoing AND g.edges >= 64
      UNION ALL
      SELECT e.tenant_id, e.pipeline_id, e.dst, e.type, false, e.src
        FROM pgbraid.edges e JOIN pgbraid.vertex_degrees g ON g.pipeline_id = e.pipeline_id
         AND g.vertex = e.dst AND g.type = e.type AND NOT g.outgoing AND g.edges >= 64) x
GROUP BY x.pipeline_id, x.vertex, x.type, x.outgoing, x.n / 4096$sql$;
    EXECUTE $sql$
INSERT INTO pgbraid.degree_blocks (tenant_id, pipeline_id, type, outgoing, block, slots, degrees)
SELECT min(g.tenant_id), g.pipeline_id, g.type, g.outgoing, g.vertex / 4096,
       string_agg(int2send((g.vertex % 4096)::int2), ''::bytea ORDER BY g.vertex),
       string_agg(int4send(least(g.edges, 2147483647)::int4), ''::bytea ORDER BY g.vertex)
FROM pgbraid.vertex_degrees g
GROUP BY g.pipeline_id, g.type, g.outgoing, g.vertex / 4096$sql$;
    EXECUTE 'UPDATE pgbraid.graph_versions SET packed_version = version';
    FOREACH t IN ARRAY ARRAY['neighbour_lists', 'degree_blocks']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE pgbraid.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON pgbraid.%I USING (tenant_id = current_setting(''pgbraid.tenant'', true))', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.%I TO pgbraid_app', t);
    END LOOP;
END
$migration$;
