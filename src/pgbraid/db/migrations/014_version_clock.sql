-- Version times in commit order, per pipeline.
--
-- A version's valid_from, and its predecessor's valid_to, were the writing
-- transaction's now(): its start, which can precede the commit of a writer that
-- committed before it. A reader that takes a time from its snapshot and searches
-- as of that time later (the second page of a search) could then see a version
-- its snapshot did not. Now every writing transaction takes one time from this
-- row (ingest/clock.py): after waiting for the row's previous writer to commit,
-- and always later than the time before. So writers of a pipeline are stamped in
-- commit order, and a time no later than the last committed one separates what a
-- snapshot saw from what came after (see paging.py).
CREATE TABLE pgbraid.version_clocks (
    pipeline_id  bigint PRIMARY KEY REFERENCES pgbraid.pipelines ON DELETE CASCADE,
    tenant_id    text NOT NULL DEFAULT current_setting('pgbraid.tenant'),
    stamped      timestamptz NOT NULL
);
ALTER TABLE pgbraid.version_clocks ENABLE ROW LEVEL SECURITY;
ALTER TABLE pgbraid.version_clocks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pgbraid.version_clocks
    USING (tenant_id = current_setting('pgbraid.tenant', true));
GRANT SELECT, INSERT, UPDATE ON pgbraid.version_clocks TO pgbraid_app;

-- The latest version time a reader can see (paging.py): read from the top of
-- this index down to the first version of the pipeline in the reader's scope.
CREATE INDEX versions_changed ON pgbraid.versions ((greatest(valid_from, valid_to)) DESC);
