-- The ids of pipelines, documents and versions come from sequences every tenant shares,
-- and 001 granted pgbraid_app USAGE and SELECT on them: any tenant's raw session read
-- `last_value` (or pg_sequences, which shows it to USAGE), how many documents and
-- versions every tenant together had written (polled: when and how much another tenant
-- ingests), and could burn ids with nextval. Every id column is an identity column,
-- whose sequence an INSERT draws from without any privilege on it, and no pgbraid
-- statement names a sequence: pgbraid_app keeps none. Not on a Citus coordinator, where
-- 048's privileges are not either (tests/test_tenant_writes.py).
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
        EXECUTE format('REVOKE ALL ON SEQUENCE pgbraid.%I FROM pgbraid_app', s.relname);
    END LOOP;
END
$$;
