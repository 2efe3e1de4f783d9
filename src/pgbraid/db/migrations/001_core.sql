-- Core schema: tenants' pipelines, documents -> versions -> fragments, and
-- hierarchical classifications. Tenant isolation is row-level security with
-- FORCE, checked against the session setting pgbraid.tenant.

CREATE TABLE pgbraid.pipelines (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    name        text NOT NULL,
    fulltext    boolean NOT NULL DEFAULT true,
    language    regconfig NOT NULL DEFAULT 'english',
    embedder    text,
    dimension   integer,
    chunk_size  integer NOT NULL DEFAULT 1000 CHECK (chunk_size BETWEEN 200 AND 20000),
    settings    jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

CREATE TABLE pgbraid.classifications (
    tenant_id  text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    name       text NOT NULL,
    implies    text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE pgbraid.documents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id      bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    external_id      text NOT NULL,
    current_version  integer,
    quarantined      boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (pipeline_id, external_id)
);

CREATE TABLE pgbraid.versions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    document_id      bigint NOT NULL REFERENCES pgbraid.documents ON DELETE CASCADE,
    version          integer NOT NULL,
    title            text,
    body             text NOT NULL,
    content_hash     text NOT NULL,
    metadata         jsonb NOT NULL DEFAULT '{}',
    classifications  text[] NOT NULL,
    language         text,
    source           text,
    valid_from       timestamptz NOT NULL DEFAULT now(),
    valid_to         timestamptz,
    UNIQUE (document_id, version)
);

CREATE TABLE pgbraid.fragments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    pipeline_id      bigint NOT NULL,
    document_id      bigint NOT NULL,
    version_id       bigint NOT NULL REFERENCES pgbraid.versions ON DELETE CASCADE,
    ordinal          integer NOT NULL,
    section          text,
    body             text NOT NULL,
    language         text NOT NULL,
    ts_config        regconfig NOT NULL,
    tsv              tsvector,
    metadata         jsonb NOT NULL DEFAULT '{}',
    classifications  text[] NOT NULL,
    current          boolean NOT NULL DEFAULT true,
    quarantined      boolean NOT NULL DEFAULT false,
    UNIQUE (version_id, ordinal)
);

-- Search paths serve only current, unquarantined fragments: partial indexes
-- whose predicate the scope module always repeats.
CREATE INDEX fragments_tsv ON pgbraid.fragments USING gin (tsv) WHERE current AND NOT quarantined;
CREATE INDEX fragments_metadata ON pgbraid.fragments USING gin (metadata jsonb_path_ops)
    WHERE current AND NOT quarantined;
CREATE INDEX fragments_pipeline ON pgbraid.fragments (pipeline_id, document_id)
    WHERE current AND NOT quarantined;
CREATE INDEX fragments_version ON pgbraid.fragments (version_id);
CREATE INDEX versions_document ON pgbraid.versions (document_id, valid_from);

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgbraid_app') THEN
        CREATE ROLE pgbraid_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA pgbraid TO pgbraid_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgbraid TO pgbraid_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA pgbraid TO pgbraid_app;

ALTER TABLE pgbraid.pipelines ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.pipelines FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.pipelines
    USING (tenant_id = current_setting('pgbraid.tenant', true));

ALTER TABLE pgbraid.classifications ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.classifications FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.classifications
    USING (tenant_id = current_setting('pgbraid.tenant', true));

ALTER TABLE pgbraid.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.documents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.documents
    USING (tenant_id = current_setting('pgbraid.tenant', true));

ALTER TABLE pgbraid.versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.versions
    USING (tenant_id = current_setting('pgbraid.tenant', true));

ALTER TABLE pgbraid.fragments ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.fragments FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.fragments
    USING (tenant_id = current_setting('pgbraid.tenant', true));
