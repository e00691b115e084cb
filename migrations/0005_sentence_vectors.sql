-- warrant postgres backend, schema version 5: each chunk's sentence vectors.
--
-- With a semantic embedder (MiniLM) the embedded engine embeds every chunk's sentences once at
-- ingestion and keeps them with the chunk, so validating an answer embeds only its claims
-- (BENCHMARKS.md: validation 53-63 ms -> 0.2 ms at the median). Until this version a
-- PostgreSQL node embedded the cited chunks' sentences at every validation instead.
--
-- The column holds the same encoding as the embedded store: bincode 2 (standard configuration)
-- of warrant's `SentenceVectors` (8-bit vectors with a scale, keyed by a digest of the
-- sentence). NULL when none were made (a non-semantic embedder, `verifier.sentence_vectors =
-- false`, or a chunk written before this version): the verifier then embeds that chunk's
-- sentences as before. Written with the chunk in the same statement (src/postgres/sql.rs,
-- CHUNK_INSERT).

ALTER TABLE chunks ADD COLUMN sentence_vectors bytea;
