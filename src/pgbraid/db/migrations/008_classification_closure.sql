-- Each classification's transitive closure (itself and everything it implies,
-- directly or not), stored so that resolving what a reader holds is one flat
-- lookup instead of a recursive query planned on every search.
-- define_classification recomputes every closure of the tenant, under a
-- per-tenant lock, in the same transaction as the change.
ALTER TABLE pgbraid.classifications ADD COLUMN closure text[] NOT NULL DEFAULT '{}';

WITH RECURSIVE r(tenant_id, root, name) AS (
    SELECT tenant_id, name, name FROM pgbraid.classifications
    UNION
    SELECT r.tenant_id, r.root, unnest(c.implies)
    FROM pgbraid.classifications c JOIN r ON c.tenant_id = r.tenant_id AND c.name = r.name)
UPDATE pgbraid.classifications c SET closure = s.closure
FROM (SELECT tenant_id, root, array_agg(DISTINCT name ORDER BY name) AS closure
      FROM r GROUP BY tenant_id, root) s
WHERE c.tenant_id = s.tenant_id AND c.name = s.root;
