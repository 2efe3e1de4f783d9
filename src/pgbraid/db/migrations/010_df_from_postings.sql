-- A term's document frequency is its postings in the current segments minus
-- those of dead fragments (bm25_topk works it out from the lists a query reads
-- anyway), so the per-term counter table, updated by every ingest and expiry,
-- is no longer needed.
DROP TABLE pgbraid.bm25_terms;
