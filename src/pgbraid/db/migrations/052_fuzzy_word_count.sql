-- fuzzy's word method ranks ties by a fragment's number of distinct words, then its id
-- (strategies/fuzzy_words.py), and reads a subset's fragments in that order: a first
-- page, then only those placed before the k-th best found so far. This index finds that
-- range (cardinality is declared LEAKPROOF where we are superuser, migrations.py, so
-- the range is an index condition under FORCE ROW LEVEL SECURITY; elsewhere it stays a
-- filter, correct and slower). Measured on the 100k bench corpus: "The percursor form"
-- read 982 of the 50,309 fragments holding its words in 70-150 ms instead of 855 ms
-- (docs/benchmarks.md, Fuzzy).
CREATE INDEX fragments_word_count ON pgbraid.fragments (pipeline_id, cardinality(word_set), id)
    WHERE NOT quarantined;
