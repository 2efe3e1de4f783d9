-- fuzzy over long text: a dictionary of each pipeline's distinct words.
--
-- fragments.word_set holds the fragment's distinct lower-cased words, sorted (the
-- words of encryption.distinct_words, which encrypted pipelines keep as text in
-- fragments.words), with a GIN index over unquarantined fragments (current or not: as_of
-- searches and a cursor's later pages use it too).
-- fuzzy_words holds every word of the pipeline's stored fragments (current or not:
-- as_of and a quarantine's release bring old ones back), with a trigram index: a
-- query word is expanded to the dictionary words similar to it, and the GIN index
-- finds the fragments in scope holding each. The dictionary never decides what a
-- reader sees: a hit is a fragment in scope that holds the word, and its score
-- depends on its own words only, so words of fragments outside the scope change no
-- value of a response. (An array column, not an expression over fragments.words:
-- under FORCE ROW LEVEL SECURITY a condition calling a function that is not
-- LEAKPROOF, such as string_to_array, cannot use an index.)
--
-- Existing fragments get their words here: the same rule as distinct_words, in SQL
-- (split on whitespace, trim the same punctuation, lower-case, distinct, sorted by
-- code point); sealed ones from fragments.words. FORCE ROW LEVEL SECURITY is lifted
-- for this transaction so a non-superuser owner sees every tenant (as in 011).

ALTER TABLE pgbraid.fragments NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.fragments ADD COLUMN word_set text[];

CREATE TABLE pgbraid.fuzzy_words (
    pipeline_id  bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    word         text NOT NULL,
    PRIMARY KEY (pipeline_id, word)
);
ALTER TABLE pgbraid.fuzzy_words ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.fuzzy_words FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.fuzzy_words
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT ON pgbraid.fuzzy_words TO pgbraid_app;

CREATE FUNCTION pg_temp.distinct_words(texts text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(w ORDER BY w COLLATE "C"), '{}')
    FROM (SELECT DISTINCT lower(btrim(x, '.,;:!?()[]{}<>"''`*=#|~')) AS w
          FROM regexp_split_to_table(texts, '\s+') AS x) s
    WHERE w <> ''
$$;

UPDATE pgbraid.fragments
SET word_set = CASE WHEN key_id IS NULL
                    THEN pg_temp.distinct_words(concat_ws(' ', title, section, body))
                    ELSE string_to_array(coalesce(words, ''), ' ') END;

INSERT INTO pgbraid.fuzzy_words (pipeline_id, tenant_id, word)
SELECT DISTINCT f.pipeline_id, f.tenant_id, w
FROM pgbraid.fragments f CROSS JOIN LATERAL unnest(f.word_set) AS w
ON CONFLICT DO NOTHING;

-- No pipeline column first (btree_gin) here: the planner then preferred the plain
-- word index anyway, filtering the pipeline on the heap.
CREATE INDEX fragments_word_set ON pgbraid.fragments USING gin (word_set)
    WHERE NOT quarantined;

DO $$
DECLARE
    lead text := CASE WHEN EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin')
                      THEN 'pipeline_id, ' ELSE '' END;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE format('CREATE INDEX fuzzy_words_trgm ON pgbraid.fuzzy_words USING gin '
                       '(%s word gin_trgm_ops)', lead);
    END IF;
END
$$;

ALTER TABLE pgbraid.fragments FORCE ROW LEVEL SECURITY;
