-- fuzzy's dictionary index takes new words into a short pending list again (042's choice
-- revisited): writing every new word straight into the trigram GIN (042's
-- fastupdate = off) made a SciFact lexical ingest 1.23x slower (368 against 452
-- fragments/s, paired, three rounds each, load 1.0-1.5; docs/benchmarks.md, Ingestion).
-- The list is capped at 256 kB (32 pages) instead of the default 4 MB, so a search never
-- reads more than that of it (042 measured 193 pages at 8-14 ms a query word against ~1 ms
-- with none), and a bulk ingest merges it when it ends (writes.MERGE_PENDING).
DO $$
BEGIN
    IF to_regclass('pgbraid.fuzzy_words_trgm') IS NOT NULL THEN
        ALTER INDEX pgbraid.fuzzy_words_trgm SET (fastupdate = on, gin_pending_list_limit = 256);
    END IF;
END
$$;
