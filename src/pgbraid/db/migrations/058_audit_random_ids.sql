-- Audit ids at random, as fragment ids are (011): the identity sequence of
-- pgbraid.audit_log is shared by every tenant, so the gap between two ids a tenant
-- reads counted how many events all the other tenants wrote in between (keys
-- made, ingests, refusals). audit.record now draws each id from
-- pgbraid.random_fragment_id() with OVERRIDING SYSTEM VALUE; so does the purge's
-- own record, here. The identity itself stays: Citus cannot drop one from a
-- reference table ("alter table command is currently unsupported"), and every
-- writer overrides it. Existing rows keep their ids.
CREATE OR REPLACE FUNCTION pgbraid.audit_purge(bound timestamptz, who text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tenant text := current_setting('pgbraid.tenant', true);
    removed bigint;
BEGIN
    IF tenant IS NULL OR tenant = '' THEN
        RAISE EXCEPTION 'audit purge: no tenant (pgbraid.tenant) is set'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF bound IS NULL OR bound > now() THEN
        RAISE EXCEPTION 'audit purge: the bound must be a time no later than now'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF who IS NULL OR who = '' THEN
        RAISE EXCEPTION 'audit purge: who purges must be named'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    ALTER TABLE pgbraid.audit_log DISABLE TRIGGER append_only;
    DELETE FROM pgbraid.audit_log
        WHERE tenant_id = tenant AND at < bound AND action <> 'audit.purged';
    GET DIAGNOSTICS removed = ROW_COUNT;
    ALTER TABLE pgbraid.audit_log ENABLE TRIGGER append_only;
    INSERT INTO pgbraid.audit_log (id, tenant_id, principal, action, detail)
        OVERRIDING SYSTEM VALUE
        VALUES (pgbraid.random_fragment_id(), tenant, who, 'audit.purged',
                jsonb_build_object('removed', removed, 'before', bound));
    RETURN removed;
END
$$;
