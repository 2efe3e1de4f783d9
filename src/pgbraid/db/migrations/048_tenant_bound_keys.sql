-- Keys that stay within a tenant. PostgreSQL checks foreign keys and unique indexes
-- without row-level security, so a tenant's own SQL (Client.session(), as
-- pgbraid_app under its tenant) could write rows of its own tenant that point at
-- another tenant's pipeline, document, version, fragment, vertex or BM25 partition
-- (the ids are one sequence, so guessable), move its rows onto them with UPDATE, or
-- take ids ahead of a shared sequence: the other tenant's next insert then hit the
-- invisible row (ON CONFLICT DO NOTHING did nothing, a primary key refused it).
--
-- 1. Every foreign key carries tenant_id on both sides, and pipeline_id too where
--    the child has it (always, but for the key to pipelines itself): a row can only
--    point at a parent of its own tenant (and pipeline). Each parent gets the unique
--    key these need, with pipeline_id in it so Citus (which distributes by
--    pipeline_id) accepts it as it is. A table whose pipeline_id had no key of its
--    own (fragments, versions, embeddings, bm25_postings, bm25_partition_stats) is
--    bound through its parent, which is bound in turn; tests/test_tenant_writes.py
--    reads the catalog and holds every table and key to this.
-- 2. Every unique key then holds tenant_id or pipeline_id, or an id the application
--    role cannot choose: pgbraid_app loses INSERT and UPDATE on the id column of
--    every table whose ids come from a sequence (it keeps them on every other
--    column; a migration adding a column to these tables grants it), and UPDATE on
--    fragments.id. Random ids keep INSERT: fragments (011; an encrypted pipeline
--    draws them client-side to seal with) and audit_log (058). This binds sessions
--    as pgbraid_app (the embedded server, and any server with a superuser login); a
--    login that owns the tables (an external server) is not bound by privileges,
--    and can alter its tables anyway. Not on Citus (below).
--    The unique keys led by a parent's id but without pipeline_id (versions
--    (document_id, version), fragments (version_id, ordinal), bm25_dead
--    (partition_id, ordinal)) get pipeline_id as their last column (as Citus has
--    them, first): a row of one's own pipeline naming another tenant's document
--    then meets no unique entry and is refused by its foreign key, the same
--    answer for a document that exists and one that does not.
-- 3. age_graphs.graph is the pipeline's graph name (age.graph_name), so its unique
--    key cannot be taken for another pipeline's.
-- 4. A row naming another tenant's pipeline is refused before any unique index sees
--    it: a restrictive policy on every table with pipeline_id checks, on INSERT and
--    UPDATE, that the pipeline is one the tenant sees. Foreign keys are checked
--    after the row's index entries, so without it a unique key answered first:
--    "duplicate key" for a word, term or document id another tenant's pipeline holds
--    and a foreign-key error otherwise (fuzzy_words answered which words another
--    tenant's documents contain). One primary-key probe of pipelines a row. Not on
--    Citus (below).
--
-- One DO block, one ALTER a change: on a distributed schema Citus sends each DDL
-- statement on to the workers, which refuse a multi-statement string
-- (tests/test_cluster.py upgrades one through every migration).
DO $$
DECLARE
    k record;
    t text;
    columns text;
    citus boolean := EXISTS (SELECT FROM pg_extension WHERE extname = 'citus');
BEGIN
    -- (1) keys to pipelines: (tenant_id, pipeline_id) -> pipelines (tenant_id, id)
    ALTER TABLE pgbraid.pipelines ADD CONSTRAINT pipelines_tenant_id_id_key UNIQUE (tenant_id, id);
    FOR k IN
        SELECT t.relname AS child, c.conname, c.confdeltype
        FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
        JOIN pg_namespace n ON n.oid = t.relnamespace
        WHERE n.nspname = 'pgbraid' AND c.contype = 'f'
          AND c.confrelid = 'pgbraid.pipelines'::regclass
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I DROP CONSTRAINT %I', k.child, k.conname);
        EXECUTE format('ALTER TABLE pgbraid.%I ADD CONSTRAINT %I FOREIGN KEY (tenant_id, pipeline_id)'
                       ' REFERENCES pgbraid.pipelines (tenant_id, id) ON DELETE %s',
                       k.child, k.conname, CASE k.confdeltype WHEN 'c' THEN 'CASCADE' ELSE 'NO ACTION' END);
    END LOOP;

    -- (1) the other parents, each with its (id, pipeline_id, tenant_id) key
    ALTER TABLE pgbraid.documents ADD CONSTRAINT documents_tenant_key UNIQUE (id, pipeline_id, tenant_id);
    ALTER TABLE pgbraid.versions ADD CONSTRAINT versions_tenant_key UNIQUE (id, pipeline_id, tenant_id);
    ALTER TABLE pgbraid.fragments ADD CONSTRAINT fragments_tenant_key UNIQUE (id, pipeline_id, tenant_id);
    ALTER TABLE pgbraid.vertices ADD CONSTRAINT vertices_tenant_key UNIQUE (id, pipeline_id, tenant_id);
    ALTER TABLE pgbraid.bm25_partitions ADD CONSTRAINT bm25_partitions_tenant_key
        UNIQUE (id, pipeline_id, tenant_id);
    ALTER TABLE pgbraid.bm25_segments ADD CONSTRAINT bm25_segments_tenant_key
        UNIQUE (pipeline_id, segment, tenant_id);
    ALTER TABLE pgbraid.versions DROP CONSTRAINT versions_document_id_fkey;
    ALTER TABLE pgbraid.versions ADD CONSTRAINT versions_document_id_fkey FOREIGN KEY (document_id, pipeline_id, tenant_id)
        REFERENCES pgbraid.documents (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.fragments DROP CONSTRAINT fragments_version_id_fkey;
    ALTER TABLE pgbraid.fragments ADD CONSTRAINT fragments_version_id_fkey FOREIGN KEY (version_id, pipeline_id, tenant_id)
        REFERENCES pgbraid.versions (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.edges DROP CONSTRAINT edges_src_fkey;
    ALTER TABLE pgbraid.edges ADD CONSTRAINT edges_src_fkey FOREIGN KEY (src, pipeline_id, tenant_id)
        REFERENCES pgbraid.vertices (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.edges DROP CONSTRAINT edges_dst_fkey;
    ALTER TABLE pgbraid.edges ADD CONSTRAINT edges_dst_fkey FOREIGN KEY (dst, pipeline_id, tenant_id)
        REFERENCES pgbraid.vertices (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.bm25_segments DROP CONSTRAINT bm25_segments_partition_id_fkey;
    ALTER TABLE pgbraid.bm25_segments ADD CONSTRAINT bm25_segments_partition_id_fkey FOREIGN KEY (partition_id, pipeline_id, tenant_id)
        REFERENCES pgbraid.bm25_partitions (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.bm25_partition_stats DROP CONSTRAINT bm25_partition_stats_partition_id_fkey;
    ALTER TABLE pgbraid.bm25_partition_stats ADD CONSTRAINT bm25_partition_stats_partition_id_fkey FOREIGN KEY (partition_id, pipeline_id, tenant_id)
        REFERENCES pgbraid.bm25_partitions (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.bm25_dead DROP CONSTRAINT bm25_dead_partition_id_fkey;
    ALTER TABLE pgbraid.bm25_dead ADD CONSTRAINT bm25_dead_partition_id_fkey FOREIGN KEY (partition_id, pipeline_id, tenant_id)
        REFERENCES pgbraid.bm25_partitions (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.bm25_dead DROP CONSTRAINT bm25_dead_pipeline_id_segment_fkey;
    ALTER TABLE pgbraid.bm25_dead ADD CONSTRAINT bm25_dead_pipeline_id_segment_fkey FOREIGN KEY (pipeline_id, segment, tenant_id)
        REFERENCES pgbraid.bm25_segments (pipeline_id, segment, tenant_id) ON DELETE CASCADE;
    ALTER TABLE pgbraid.bm25_postings DROP CONSTRAINT bm25_postings_pipeline_id_segment_fkey;
    ALTER TABLE pgbraid.bm25_postings ADD CONSTRAINT bm25_postings_pipeline_id_segment_fkey FOREIGN KEY (pipeline_id, segment, tenant_id)
        REFERENCES pgbraid.bm25_segments (pipeline_id, segment, tenant_id) ON DELETE CASCADE;
    IF to_regclass('pgbraid.embeddings') IS NOT NULL THEN
        ALTER TABLE pgbraid.embeddings DROP CONSTRAINT embeddings_fragment_id_fkey;
        ALTER TABLE pgbraid.embeddings ADD CONSTRAINT embeddings_fragment_id_fkey FOREIGN KEY (fragment_id, pipeline_id, tenant_id)
            REFERENCES pgbraid.fragments (id, pipeline_id, tenant_id) ON DELETE CASCADE;
    END IF;

    -- (2) unique keys within the pipeline (same leading columns: the same lookups)
    ALTER TABLE pgbraid.versions DROP CONSTRAINT versions_document_id_version_key;
    ALTER TABLE pgbraid.versions ADD CONSTRAINT versions_document_id_version_key
        UNIQUE (document_id, version, pipeline_id);
    ALTER TABLE pgbraid.fragments DROP CONSTRAINT fragments_version_id_ordinal_key;
    ALTER TABLE pgbraid.fragments ADD CONSTRAINT fragments_version_id_ordinal_key
        UNIQUE (version_id, ordinal, pipeline_id);
    ALTER TABLE pgbraid.bm25_dead DROP CONSTRAINT bm25_dead_pkey;
    ALTER TABLE pgbraid.bm25_dead ADD CONSTRAINT bm25_dead_pkey
        PRIMARY KEY (partition_id, ordinal, pipeline_id);

    -- (3)
    ALTER TABLE pgbraid.age_graphs ADD CONSTRAINT age_graphs_graph_check
        CHECK (graph = 'pgbraid_p' || pipeline_id);

    -- (2) and (4) are not for a Citus coordinator. Citus does not carry column
    -- privileges to the shards (measured: "permission denied for table
    -- pipelines_102013" on every insert through the coordinator), and refuses a
    -- subquery in a policy of a distributed table ("Subqueries are not supported in
    -- policies on distributed tables"). There explicit ids stay open, and the foreign
    -- keys alone refuse a row naming another tenant's pipeline, after the unique
    -- indexes have answered (README: a "duplicate key" can tell its keys).
    IF citus THEN
        RETURN;
    END IF;

    -- (2) ids the application role cannot choose
    FOREACH t IN ARRAY ARRAY['pipelines', 'documents', 'versions', 'fragments', 'vertices',
                             'edges', 'bm25_partitions']
    LOOP
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
        FROM pg_attribute a
        WHERE a.attrelid = format('pgbraid.%I', t)::regclass AND a.attnum > 0
          AND NOT a.attisdropped AND a.attname <> 'id';
        EXECUTE format('REVOKE UPDATE ON pgbraid.%I FROM pgbraid_app', t);
        EXECUTE format('GRANT UPDATE (%s) ON pgbraid.%I TO pgbraid_app', columns, t);
        -- fragments' ids are random (011), and an encrypted pipeline's are drawn
        -- client-side (encryption.py seals each fragment with its id): no sequence
        CONTINUE WHEN t = 'fragments';
        EXECUTE format('REVOKE INSERT ON pgbraid.%I FROM pgbraid_app', t);
        EXECUTE format('GRANT INSERT (%s) ON pgbraid.%I TO pgbraid_app', columns, t);
    END LOOP;

    -- (4) the pipeline is the tenant's, checked before the row reaches any index
    FOR t IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'pipeline_id' AND NOT a.attisdropped
        WHERE n.nspname = 'pgbraid' AND c.relkind IN ('r', 'p') ORDER BY 1
    LOOP
        EXECUTE format('CREATE POLICY pipeline_inserted ON pgbraid.%I AS RESTRICTIVE FOR INSERT'
                       ' WITH CHECK (EXISTS (SELECT FROM pgbraid.pipelines p'
                       ' WHERE p.id = pipeline_id))', t);
        EXECUTE format('CREATE POLICY pipeline_updated ON pgbraid.%I AS RESTRICTIVE FOR UPDATE'
                       ' USING (true) WITH CHECK (EXISTS (SELECT FROM pgbraid.pipelines p'
                       ' WHERE p.id = pipeline_id))', t);
    END LOOP;
END
$$;
