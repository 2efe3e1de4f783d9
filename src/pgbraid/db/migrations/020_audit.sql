-- The audit log: who did what, per tenant, append-only (audit.py writes it).
--
-- Append-only is enforced three times over, so neither the application role
-- nor the role that owns the table (on an external server, the login that
-- migrates) can rewrite history from a session:
--   1. privileges: pgbraid_app holds SELECT and INSERT only;
--   2. row-level security (FORCE, so the owner too) has policies for SELECT and
--      INSERT only, and a command without a policy matches no row;
--   3. a statement trigger refuses UPDATE, DELETE and TRUNCATE (TRUNCATE skips
--      row-level security; triggers fire for the owner and superusers too).
-- Only DDL by the owner (dropping the trigger) could lift it: that is outside
-- anything the application sends.
--
-- The numbering leaves 015-019 to the branches built beside this one.

CREATE TABLE pgbraid.audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    principal  text NOT NULL,
    action     text NOT NULL,
    target     text,
    detail     jsonb NOT NULL DEFAULT '{}',
    count      integer NOT NULL DEFAULT 1 CHECK (count >= 1)
);
CREATE INDEX audit_log_at ON pgbraid.audit_log (tenant_id, at);
CREATE INDEX audit_log_action ON pgbraid.audit_log (tenant_id, action, at);

ALTER TABLE pgbraid.audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON pgbraid.audit_log FOR SELECT
    USING (tenant_id = current_setting('pgbraid.tenant', true));
CREATE POLICY tenant_append ON pgbraid.audit_log FOR INSERT
    WITH CHECK (tenant_id = current_setting('pgbraid.tenant', true));

REVOKE ALL ON pgbraid.audit_log FROM pgbraid_app;
GRANT SELECT, INSERT ON pgbraid.audit_log TO pgbraid_app;

CREATE FUNCTION pgbraid.audit_log_append_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'pgbraid.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON pgbraid.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION pgbraid.audit_log_append_only();

-- The migration record is no tenant's data and nothing the application role
-- needs: 001 granted it every privilege on it (ALL TABLES IN SCHEMA), so a
-- session could have read it, or deleted rows to have migrations run again.
REVOKE ALL ON pgbraid.schema_migrations FROM pgbraid_app;
