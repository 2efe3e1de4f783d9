-- The body trigram index holds short fragments only (names, codes, short chunks: at most
-- 256 bytes of text). It served one thing, fuzzy's text method (`body %> query`), and
-- cost a SciFact batch 0.40 of its 0.85 server CPU-ms a fragment (docs/benchmarks.md,
-- Ingestion, 2026-12-02), nearly all of it for long text, where the index barely
-- narrows anything: a short query's trigrams occur in most long fragments, and each
-- candidate is rescored over its whole text. The text method now finds long fragments
-- through fragments_body_long, the long ones in scope, and rescores them as before
-- (strategies/fuzzy.py, SHORT_BODY_BYTES: the same bound, written the same way, so the
-- planner proves each index's predicate); a pipeline of names has none, so that arm
-- costs it nothing. Its second column lets "does the scope hold long text" read the index
-- in an order nothing else gives (the longest first, LIMIT 1): asked as a plain EXISTS, the
-- planner guessed a third of a pipeline of names long and seq-scanned fragments to find
-- none (15-30 ms a query on the bench server; 0.01-0.04 ms through this index). octet_length reads a TOASTed value's size without detoasting it.
DO $$
DECLARE
    lead text := CASE WHEN EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin')
                      THEN 'pipeline_id, ' ELSE '' END;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        DROP INDEX IF EXISTS pgbraid.fragments_body_trgm;
        EXECUTE format('CREATE INDEX fragments_body_trgm ON pgbraid.fragments USING gin '
                       '(%s body gin_trgm_ops) WHERE current AND NOT quarantined '
                       'AND key_id IS NULL AND octet_length(body) <= 256', lead);
        CREATE INDEX fragments_body_long ON pgbraid.fragments (pipeline_id, octet_length(body))
            WHERE current AND NOT quarantined AND key_id IS NULL AND octet_length(body) > 256;
    END IF;
END
$$;
