-- Merges read and delete postings by segment; without this index each merge
-- (and each cascaded delete of a merged segment) scanned every posting of the
-- pipeline. Measured while building a 100k-fragment pipeline: ingestion fell
-- to ~13 fragments/s as the pipeline grew.
CREATE INDEX bm25_postings_segment ON pgbraid.bm25_postings (pipeline_id, segment);
