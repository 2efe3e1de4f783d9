-- Encryption at rest (encryption.py). An encrypted pipeline's fragments and versions
-- hold sealed values in title, section, body and the chosen metadata fields; key_id
-- names the key that sealed the row (rotation finds the rows still under an old
-- one), and fragments.words holds the distinct words fuzzy matches instead of the
-- text. The text trigram indexes skip sealed rows (their trigrams are noise); the
-- words index holds only theirs.

ALTER TABLE pgbraid.fragments ADD COLUMN key_id text, ADD COLUMN words text;
ALTER TABLE pgbraid.versions ADD COLUMN key_id text;

CREATE INDEX fragments_key ON pgbraid.fragments (pipeline_id, id) WHERE key_id IS NOT NULL;
CREATE INDEX versions_key ON pgbraid.versions (id) WHERE key_id IS NOT NULL;

DO $$
DECLARE
    lead text := CASE WHEN EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin')
                      THEN 'pipeline_id, ' ELSE '' END;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        DROP INDEX IF EXISTS pgbraid.fragments_body_trgm;
        DROP INDEX IF EXISTS pgbraid.fragments_title_trgm;
        EXECUTE format('CREATE INDEX fragments_body_trgm ON pgbraid.fragments USING gin '
                       '(%s body gin_trgm_ops) WHERE current AND NOT quarantined '
                       'AND key_id IS NULL', lead);
        EXECUTE format('CREATE INDEX fragments_title_trgm ON pgbraid.fragments USING gin '
                       '(%s title gin_trgm_ops) WHERE current AND NOT quarantined '
                       'AND key_id IS NULL', lead);
        EXECUTE format('CREATE INDEX fragments_words_trgm ON pgbraid.fragments USING gin '
                       '(%s words gin_trgm_ops) WHERE current AND NOT quarantined '
                       'AND words IS NOT NULL', lead);
    END IF;
END
$$;
