-- Every pipeline-owned table carries pipeline_id, so that on a Citus coordinator
-- (db/distribute.py) all of them are distributed by it and co-located: versions
-- and bm25_partition_stats were the two that reached their pipeline only through
-- another table. On a plain server the column is a copy the writers fill.
ALTER TABLE pgbraid.versions ADD COLUMN pipeline_id bigint;
UPDATE pgbraid.versions v SET pipeline_id = d.pipeline_id
FROM pgbraid.documents d WHERE d.id = v.document_id;
ALTER TABLE pgbraid.versions ALTER COLUMN pipeline_id SET NOT NULL;

ALTER TABLE pgbraid.bm25_partition_stats ADD COLUMN pipeline_id bigint;
UPDATE pgbraid.bm25_partition_stats s SET pipeline_id = p.pipeline_id
FROM pgbraid.bm25_partitions p WHERE p.id = s.partition_id;
ALTER TABLE pgbraid.bm25_partition_stats ALTER COLUMN pipeline_id SET NOT NULL;
ALTER TABLE pgbraid.bm25_partition_stats DROP CONSTRAINT bm25_partition_stats_pkey,
    ADD PRIMARY KEY (pipeline_id, partition_id, config);
