-- Audit retention: the one path by which a row leaves pgbraid.audit_log
-- (audit.purge calls it; `pgbraid audit purge`, POST /audit/purge).
--
-- 020 refuses UPDATE, DELETE and TRUNCATE to every role with a statement
-- trigger, so the log grew forever. pgbraid.audit_purge(bound, who) removes the
-- rows of the session's tenant (pgbraid.tenant) older than ``bound``, never a
-- row at or after it, never an earlier purge's record, never another tenant's
-- row, and writes its own record (`audit.purged`: how many, before which time)
-- in the same transaction: both commit or neither.
--
-- How the trigger lets it through, and only it: the function disables the
-- trigger, deletes and enables it again, in its own transaction. That is DDL,
-- which 020 already names as the only way to lift the trigger, done here by one
-- function (SECURITY DEFINER, owned by the role that migrates, search_path
-- pinned, no dynamic SQL) and never visible to another session: ALTER TABLE
-- takes a SHARE ROW EXCLUSIVE lock, so no other session writes to the log (an
-- ad-hoc DELETE waits, then meets the trigger again) until it commits, with the
-- trigger enabled. Readers are not blocked; writers of audit rows wait for the
-- purge. A flag the trigger would read (a setting) was not an option: on an
-- external server every session runs as the table's owner, and any session can
-- set a setting, so the trigger could not tell this function's DELETE from an
-- ad-hoc one.
--
-- Row-level security is forced on the owner too, so it gets a DELETE policy
-- for the session's tenant; pgbraid_app gets neither the privilege nor a policy,
-- nor EXECUTE on the function: on the embedded server (sessions as pgbraid_app)
-- only the owner's own connection can call it; on an external server, where
-- sessions run as the owner, pgbraid calls it for the local process only (the
-- operator): no API key may purge (tenancy.py says why).

CREATE POLICY tenant_purge ON pgbraid.audit_log FOR DELETE TO CURRENT_USER
    USING (tenant_id = current_setting('pgbraid.tenant', true));

CREATE FUNCTION pgbraid.audit_purge(bound timestamptz, who text) RETURNS bigint
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
    INSERT INTO pgbraid.audit_log (tenant_id, principal, action, detail)
        VALUES (tenant, who, 'audit.purged',
                jsonb_build_object('removed', removed, 'before', bound));
    RETURN removed;
END
$$;
REVOKE ALL ON FUNCTION pgbraid.audit_purge(timestamptz, text) FROM PUBLIC;
