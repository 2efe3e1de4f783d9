-- BM25 statistics within the reader's scope, and fragment ids that reveal nothing.
--
-- 1. Posting segments are partitioned by (pipeline, classification set): each
--    distinct sorted set of classifications a fragment carries is a partition
--    with its own fragment count, total length and text-search configurations
--    (bm25_partition_stats, one row per configuration, so a configuration whose
--    last fragment expires stops counting) and its own segments and dead list.
--    A query reads only the partitions whose set overlaps the reader's resolved
--    classifications: N, avgdl, df and the configurations are sums over those,
--    so nothing outside the reader's scope moves them.
-- 2. fragments.id is drawn at random in [1, 2^53 - 1] (safe in JSON), from
--    gen_random_uuid's strong random bits: a sequence, or random()'s
--    per-backend PRNG, would let a tenant infer how much others write.
--    Existing fragments keep their ids (clients may hold them).
--
-- Existing pipelines are rebuilt from the forward index (fragments.bm25_terms,
-- bm25_tfs, bm25_length): one segment per partition holding the postings of
-- its current fragments, ordinals unchanged, an empty dead list (measured on
-- 106k fragments, 9.1M postings: see docs/benchmarks.md). The tables' FORCE ROW LEVEL SECURITY
-- is lifted for this transaction so a non-superuser owner sees every tenant.

ALTER TABLE pgbraid.fragments NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.bm25_stats NO FORCE ROW LEVEL SECURITY;

CREATE TABLE pgbraid.bm25_partitions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pipeline_id      bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id        text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    classifications  text[] NOT NULL,  -- distinct, sorted in "C" collation (code points)
    UNIQUE (pipeline_id, classifications)
);

CREATE TABLE pgbraid.bm25_partition_stats (
    partition_id  bigint NOT NULL REFERENCES pgbraid.bm25_partitions ON DELETE CASCADE,
    tenant_id     text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    config        text NOT NULL,
    fragments     bigint NOT NULL,
    total_length  bigint NOT NULL,
    PRIMARY KEY (partition_id, config)
);

DROP TABLE pgbraid.bm25_postings, pgbraid.bm25_dead, pgbraid.bm25_segments;

CREATE TABLE pgbraid.bm25_segments (
    pipeline_id   bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id     text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    partition_id  bigint NOT NULL REFERENCES pgbraid.bm25_partitions ON DELETE CASCADE,
    segment       integer NOT NULL,
    fragments     integer NOT NULL,  -- whose postings it holds (dead ones until dropped)
    tier          integer NOT NULL,
    ordinals      int4multirange NOT NULL,  -- covers them: says which segment a fragment is in
    PRIMARY KEY (pipeline_id, segment)
);
CREATE INDEX bm25_segments_partition ON pgbraid.bm25_segments (partition_id, segment);

-- A query probes (pipeline, term, visible partitions); merges read by segment.
CREATE TABLE pgbraid.bm25_postings (
    pipeline_id   bigint NOT NULL,
    tenant_id     text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    term          text NOT NULL,
    partition_id  bigint NOT NULL,
    segment       integer NOT NULL,
    postings      integer NOT NULL,
    ordinals      bytea NOT NULL,
    tfs           bytea NOT NULL,
    lengths       bytea NOT NULL,
    PRIMARY KEY (pipeline_id, term, partition_id, segment),
    FOREIGN KEY (pipeline_id, segment) REFERENCES pgbraid.bm25_segments ON DELETE CASCADE
);
CREATE INDEX bm25_postings_segment ON pgbraid.bm25_postings (pipeline_id, segment);
ALTER TABLE pgbraid.bm25_postings ALTER COLUMN ordinals SET STORAGE EXTERNAL,
    ALTER COLUMN tfs SET STORAGE EXTERNAL, ALTER COLUMN lengths SET STORAGE EXTERNAL;

-- An expired fragment whose postings are still in a segment (NULL: not yet
-- flushed, within the writing transaction). Merging the segment drops its
-- postings and, by the cascade, the row.
CREATE TABLE pgbraid.bm25_dead (
    pipeline_id   bigint NOT NULL REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id     text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    partition_id  bigint NOT NULL REFERENCES pgbraid.bm25_partitions ON DELETE CASCADE,
    ordinal       integer NOT NULL,
    segment       integer,
    PRIMARY KEY (partition_id, ordinal),
    FOREIGN KEY (pipeline_id, segment) REFERENCES pgbraid.bm25_segments ON DELETE CASCADE
);
CREATE INDEX bm25_dead_segment ON pgbraid.bm25_dead (pipeline_id, segment);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['bm25_partitions', 'bm25_partition_stats', 'bm25_segments',
                             'bm25_postings', 'bm25_dead']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON pgbraid.%I USING (tenant_id = current_setting(''pgbraid.tenant'', true))', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pgbraid.%I TO pgbraid_app', t);
    END LOOP;
END
$$;

ALTER TABLE pgbraid.bm25_stats DROP COLUMN fragments, DROP COLUMN total_length, DROP COLUMN configs;
-- Rebuild: partitions, statistics, one segment per partition. A fragment's partition
-- is found by its classification set (no column to fill: rewriting every fragment
-- row and its GIN indexes took 57 of 82 s on 106k fragments).
INSERT INTO pgbraid.bm25_partitions (pipeline_id, tenant_id, classifications)
SELECT DISTINCT f.pipeline_id, f.tenant_id,
       ARRAY(SELECT c FROM unnest(f.classifications) AS c GROUP BY c ORDER BY c COLLATE "C")
FROM pgbraid.fragments f WHERE f.bm25_ordinal IS NOT NULL;

CREATE TEMPORARY TABLE live ON COMMIT DROP AS
SELECT f.pipeline_id, f.tenant_id, p.id AS bm25_partition, f.bm25_ordinal, f.bm25_length,
       f.bm25_terms, f.bm25_tfs, f.ts_config::text AS config
FROM pgbraid.fragments f
JOIN pgbraid.bm25_partitions p
  ON p.pipeline_id = f.pipeline_id
 AND p.classifications = ARRAY(SELECT c FROM unnest(f.classifications) AS c GROUP BY c
                               ORDER BY c COLLATE "C")
WHERE f.current AND NOT f.quarantined AND f.bm25_ordinal IS NOT NULL;

INSERT INTO pgbraid.bm25_partition_stats (partition_id, tenant_id, config, fragments, total_length)
SELECT bm25_partition, min(tenant_id), config, count(*), sum(bm25_length)
FROM live GROUP BY bm25_partition, config;

CREATE TEMPORARY TABLE rebuilt ON COMMIT DROP AS
SELECT p.id AS partition_id, p.pipeline_id, p.tenant_id,
       (s.next_segment + row_number() OVER (PARTITION BY p.pipeline_id ORDER BY p.id) - 1)::int
           AS segment,
       (SELECT count(*) FROM live l WHERE l.bm25_partition = p.id)::int AS fragments
FROM pgbraid.bm25_partitions p JOIN pgbraid.bm25_stats s ON s.pipeline_id = p.pipeline_id
WHERE EXISTS (SELECT 1 FROM live l WHERE l.bm25_partition = p.id);

UPDATE pgbraid.bm25_stats s SET next_segment = r.last + 1
FROM (SELECT pipeline_id, max(segment) AS last FROM rebuilt GROUP BY pipeline_id) r
WHERE r.pipeline_id = s.pipeline_id;

-- A segment's tier as bm25_index.tier_of computes it (TIER_BASE 64, MERGE_FACTOR 8).
INSERT INTO pgbraid.bm25_segments
    (pipeline_id, tenant_id, partition_id, segment, fragments, tier, ordinals)
SELECT r.pipeline_id, r.tenant_id, r.partition_id, r.segment, r.fragments,
       CASE WHEN r.fragments > 64 THEN floor(ln(r.fragments / 64.0) / ln(8.0))::int + 1 ELSE 0 END,
       (SELECT range_agg(int4range(l.bm25_ordinal, l.bm25_ordinal, '[]')) FROM live l
        WHERE l.bm25_partition = r.partition_id)
FROM rebuilt r;

-- Packed little-endian arrays, as bm25_index writes them: int32 ordinals, uint16 tf and length.
CREATE FUNCTION pg_temp.le4(x integer) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT set_byte(set_byte(set_byte(set_byte('\x00000000'::bytea, 0, x & 255), 1, (x >> 8) & 255),
                             2, (x >> 16) & 255), 3, (x >> 24) & 255)
$$;
CREATE FUNCTION pg_temp.le2(x integer) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT set_byte(set_byte('\x0000'::bytea, 0, least(x, 65535) & 255), 1, (least(x, 65535) >> 8) & 255)
$$;

INSERT INTO pgbraid.bm25_postings
    (pipeline_id, tenant_id, term, partition_id, segment, postings, ordinals, tfs, lengths)
SELECT r.pipeline_id, r.tenant_id, t.term, r.partition_id, r.segment, count(*),
       string_agg(pg_temp.le4(l.bm25_ordinal), ''::bytea ORDER BY l.bm25_ordinal),
       string_agg(pg_temp.le2(t.tf), ''::bytea ORDER BY l.bm25_ordinal),
       string_agg(pg_temp.le2(l.bm25_length), ''::bytea ORDER BY l.bm25_ordinal)
FROM rebuilt r
JOIN live l ON l.bm25_partition = r.partition_id
CROSS JOIN LATERAL unnest(l.bm25_terms, l.bm25_tfs) AS t(term, tf)
GROUP BY r.pipeline_id, r.tenant_id, t.term, r.partition_id, r.segment;

-- Random fragment ids: the low 53 bits of a version-4 UUID's second half (all random).
CREATE FUNCTION pgbraid.random_fragment_id() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT 1 + (('x' || substr(translate(gen_random_uuid()::text, '-', ''), 17, 16))::bit(64)::bigint
                & 9007199254740991) % 9007199254740991
$$;
ALTER TABLE pgbraid.fragments ALTER COLUMN id DROP IDENTITY IF EXISTS;
ALTER TABLE pgbraid.fragments ALTER COLUMN id SET DEFAULT pgbraid.random_fragment_id();

ALTER TABLE pgbraid.fragments FORCE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.bm25_stats FORCE ROW LEVEL SECURITY;
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['bm25_partitions', 'bm25_partition_stats', 'bm25_segments',
                             'bm25_postings', 'bm25_dead']
    LOOP
        EXECUTE format('ALTER TABLE pgbraid.%I FORCE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;
