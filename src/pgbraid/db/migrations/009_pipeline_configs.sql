-- The text-search configurations a pipeline's fragments have used (it only
-- grows). While there is one, a query is tokenized in it without language
-- detection: its index holds no other stems.
ALTER TABLE pgbraid.bm25_stats ADD COLUMN configs text[] NOT NULL DEFAULT '{}';

UPDATE pgbraid.bm25_stats s
SET configs = ARRAY(SELECT DISTINCT f.ts_config::text FROM pgbraid.fragments f
                    WHERE f.pipeline_id = s.pipeline_id ORDER BY 1);
