-- The key lookup reads one row, the one whose digest it was given, and no policy
-- opens more. Migration 013's policy let the owner read every tenant's key rows
-- whenever pgbraid.key_lookup was on, and any session may turn a placeholder
-- setting on: on an external server, where the request sessions are the owner's
-- (no superuser to drop to pgbraid_app from), such a session could list every
-- tenant's digests, permissions and classifications. Now the owner's policy
-- matches a row only by its digest, which pgbraid.key_digest names (hex): a
-- session that sets it learns a row only if it holds the digest already, which
-- it gets from nowhere but the token. The function sets it for its one query and
-- clears it again. (A superuser owner, as on the embedded server, reads past
-- row-level security anyway; pgbraid_app gets no policy at all.)
-- Each statement is its own EXECUTE: on a Citus coordinator whose schema is already
-- distributed, a statement of a multi-statement string is sent on to the workers as the
-- whole string, which they refuse ("cannot insert multiple commands into a prepared
-- statement"); tests/test_cluster.py upgrades such a schema.
DO $migration$
BEGIN
    EXECUTE 'DROP POLICY IF EXISTS key_lookup ON pgbraid.api_keys';
    EXECUTE $sql$CREATE POLICY key_by_digest ON pgbraid.api_keys FOR SELECT TO CURRENT_USER
        USING (encode(digest, 'hex') = current_setting('pgbraid.key_digest', true))$sql$;
    EXECUTE $sql$
CREATE OR REPLACE FUNCTION pgbraid.api_key_by_digest(key_digest bytea)
RETURNS TABLE (id text, tenant_id text, digest bytea, pipeline text, permissions text[],
               classifications text[], tenant_admin boolean, revoked boolean, expired boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
BEGIN
    PERFORM set_config('pgbraid.key_digest', coalesce(encode(key_digest, 'hex'), ''), true);
    RETURN QUERY
        SELECT k.id, k.tenant_id, k.digest, k.pipeline, k.permissions, k.classifications,
               k.tenant_admin, k.revoked_at IS NOT NULL,
               k.expires_at IS NOT NULL AND k.expires_at <= now()
        FROM pgbraid.api_keys k WHERE k.digest = key_digest;
    PERFORM set_config('pgbraid.key_digest', '', true);
END
$body$$sql$;
    EXECUTE 'REVOKE ALL ON FUNCTION pgbraid.api_key_by_digest(bytea) FROM PUBLIC';
    EXECUTE 'GRANT EXECUTE ON FUNCTION pgbraid.api_key_by_digest(bytea) TO pgbraid_app';
END
$migration$;
