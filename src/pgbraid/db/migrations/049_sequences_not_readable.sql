-- The ids of pipelines, documents and versions come from sequences every tenant shares,
-- and 001 granted pgbraid_app SELECT on them: any tenant's raw session read
-- `last_value`, how many documents and versions every tenant together had written
-- (polled, when and how much another tenant ingests). nextval needs USAGE only, which
-- stays; no pgbraid statement reads a sequence (no currval, no lastval). Not on a Citus
-- coordinator, where 048's privileges are not either (tests/test_tenant_writes.py).
DO $$
DECLARE
    s record;
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    FOR s IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'pgbraid' AND c.relkind = 'S' ORDER BY 1
    LOOP
        EXECUTE format('REVOKE SELECT ON SEQUENCE pgbraid.%I FROM pgbraid_app', s.relname);
    END LOOP;
END
$$;
