-- API keys: a tenant's keys, stored as the SHA-256 digest of the token only
-- (tokens are 256-bit random values, not passwords: a slow hash would add
-- latency to every request and no security). Listing, creating and revoking
-- happen in the tenant's sessions under row-level security like every other
-- table; a revoked key keeps its row, so its id stays known and unused.
CREATE TABLE pgbraid.api_keys (
    id               text PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    digest           bytea NOT NULL UNIQUE CHECK (octet_length(digest) = 32),
    prefix           text NOT NULL,
    pipeline         text NOT NULL,
    permissions      text[] NOT NULL,
    classifications  text[],
    tenant_admin     boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz,
    revoked_at       timestamptz
);
ALTER TABLE pgbraid.api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.api_keys
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT, UPDATE ON pgbraid.api_keys TO pgbraid_app;

-- A request's key is looked up before its tenant is known. The lookup goes
-- through this one function, owned by the role that migrates: it answers for
-- one digest only (the caller must hold the token), so pgbraid_app can look a
-- key up without being able to list any tenant's keys. When the owner is a
-- superuser (the embedded server) it reads past row-level security; when it is
-- not (an external server), FORCE hides every row from it too: migration 044
-- gives it a policy that shows the one row whose digest the lookup names, and
-- replaces this function with one that names it. (This migration first had a
-- policy opened by a placeholder setting in the function's SET clause, which
-- PostgreSQL 15+ refuses to a login that is no superuser without GRANT SET ON
-- PARAMETER, and which any session of the owner could turn on: 044 drops it.)
CREATE FUNCTION pgbraid.api_key_by_digest(key_digest bytea)
RETURNS TABLE (id text, tenant_id text, digest bytea, pipeline text, permissions text[],
               classifications text[], tenant_admin boolean, revoked boolean, expired boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.id, k.tenant_id, k.digest, k.pipeline, k.permissions, k.classifications,
           k.tenant_admin, k.revoked_at IS NOT NULL, k.expires_at IS NOT NULL AND k.expires_at <= now()
    FROM pgbraid.api_keys k WHERE k.digest = key_digest
$$;
REVOKE ALL ON FUNCTION pgbraid.api_key_by_digest(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgbraid.api_key_by_digest(bytea) TO pgbraid_app;
