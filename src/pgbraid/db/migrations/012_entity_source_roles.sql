-- Entity sources are read by a NOLOGIN role per tenant that holds SELECT on
-- exactly its registered tables (granted by sources.provision, not here), so a
-- table may belong to one tenant only: two tenants' roles reading one table
-- would make each see the other's rows.
--
-- The claim is its own table with a primary key on the table's name. Row-level
-- security hides other tenants' claims, but a unique index sees every row, so
-- INSERT ... ON CONFLICT DO NOTHING followed by a read of one's own claim
-- tells "ours" from "another tenant's" without any SECURITY DEFINER function
-- (which, on an external server whose owner is subject to FORCE RLS, could
-- not see other tenants' rows either). Concurrent claims serialise on the key.
CREATE TABLE pgbraid.entity_source_tables (
    table_schema  text NOT NULL,
    table_name    text NOT NULL,
    tenant_id     text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    PRIMARY KEY (table_schema, table_name)
);
ALTER TABLE pgbraid.entity_source_tables ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.entity_source_tables FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.entity_source_tables
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT, DELETE ON pgbraid.entity_source_tables TO pgbraid_app;

-- Sources registered before these checks over what they now refuse: pgbraid's
-- and PostgreSQL's own schemas, and relations that are not ordinary or
-- partitioned tables (views, materialized views and foreign tables read with
-- their owner's rights). A source whose table no longer exists is kept.
DELETE FROM pgbraid.entity_sources e
WHERE e.table_schema IN ('pgbraid', 'information_schema')
   OR e.table_schema LIKE 'pg\_%'
   OR EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = e.table_schema AND c.relname = e.table_name
                AND c.relkind NOT IN ('r', 'p'));

-- One tenant per table: the earliest registration keeps it.
WITH owner AS (
    SELECT DISTINCT ON (table_schema, table_name) table_schema, table_name, tenant_id
    FROM pgbraid.entity_sources ORDER BY table_schema, table_name, created_at, tenant_id)
DELETE FROM pgbraid.entity_sources e USING owner o
WHERE e.table_schema = o.table_schema AND e.table_name = o.table_name
  AND e.tenant_id <> o.tenant_id;

INSERT INTO pgbraid.entity_source_tables (table_schema, table_name, tenant_id)
SELECT DISTINCT table_schema, table_name, tenant_id FROM pgbraid.entity_sources;
