-- warrant postgres backend, schema version 9: each chunk's part of its document's layout map
-- (issue 49): the pages and heading paths of a document extracted from a file (PDF, DOCX, HTML,
-- Markdown), restricted to the chunk, so citations and retrieved chunks carry their `location`
-- as on the embedded engine. bincode of `domain::Layout` (src/postgres/mod.rs); NULL for a
-- document uploaded as text, and for every chunk written before this migration.
--
-- One statement: Citus propagates it to every shard of a distributed `chunks`, and row-level
-- security (0007) is unchanged (the policy reads `tenant_id` alone).
ALTER TABLE chunks ADD COLUMN layout bytea;
