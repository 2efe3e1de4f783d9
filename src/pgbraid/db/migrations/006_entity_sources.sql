-- Entity sources: existing tables of the user's schema registered for grounding.
CREATE TABLE pgbraid.entity_sources (
    tenant_id      text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    name           text NOT NULL,
    table_schema   text NOT NULL,
    table_name     text NOT NULL,
    key_column     text NOT NULL,
    text_columns   text[] NOT NULL,
    scope_columns  text[] NOT NULL DEFAULT '{}',
    language       regconfig NOT NULL DEFAULT 'english',
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);
ALTER TABLE pgbraid.entity_sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.entity_sources FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.entity_sources
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.entity_sources TO pgbraid_app;
