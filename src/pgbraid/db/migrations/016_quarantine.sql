-- Quarantine: a document withheld from every search until it is released.
--
-- documents.quarantined and fragments.quarantined (every version's fragments)
-- existed from migration 001 and every scope already excluded them; nothing set
-- them. ingest/quarantine.py now does, with why and when (shown to the readers
-- who may release it). Quarantined fragments leave the BM25 statistics like an
-- expiry does, and their vectors leave the HNSW indexes (embeddings.current is
-- false for them: the indexes are partial on it).
ALTER TABLE pgbraid.documents ADD COLUMN quarantine_reason text,
                              ADD COLUMN quarantined_at timestamptz;
