-- fuzzy's dictionary index writes straight into the index, not into GIN's pending list.
--
-- With fastupdate (GIN's default) new words wait in a pending list that every trigram
-- search reads through whole until a vacuum merges it: after an ingest of 9,596 new words
-- the list was 193 pages, and a query word's index scan took 8-14 ms instead of
-- 0.7-1.5 ms (the 100k bench's dictionary, the same words looked up before and after
-- gin_clean_pending_list). The dictionary takes only words it has not seen, so writing
-- them into the index directly costs an ingest little. The list already there is merged.
DO $$
BEGIN
    IF to_regclass('pgbraid.fuzzy_words_trgm') IS NOT NULL THEN
        ALTER INDEX pgbraid.fuzzy_words_trgm SET (fastupdate = off);
        PERFORM gin_clean_pending_list('pgbraid.fuzzy_words_trgm'::regclass);
    END IF;
END
$$;
