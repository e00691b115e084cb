-- Distributing warrant's PostgreSQL schema over Citus (or any distributed PostgreSQL that shards
-- by a column and co-locates tables sharded the same way).
--
-- Run once, as a superuser of the coordinator, AFTER `warrant db migrate` has created the schema
-- (migrations/0001_init.sql) and BEFORE any data is written:
--
--   psql "$WARRANT_DATABASE_URL" -f docs/citus.sql
--
-- Why it fits: every tenant table keys on tenant_id first, and every statement warrant runs
-- (src/postgres/sql.rs) filters on `tenant_id = $1`, so each statement routes to the one shard
-- group holding the tenant: a retrieval's vector search, lexical search and ACL check, and a
-- write's tenant lock, versions, chunks, readers and change log all run on one worker, and a
-- write stays a single-shard-group transaction.
--
-- NOT TESTED: this file has never run against a Citus cluster. What has been tested is the same
-- schema and SQL on a single PostgreSQL 15 node with pgvector 0.8.0 (tests/it/postgres.rs).
-- Known points to check on a real cluster:
--   * pgvector must be installed on the coordinator and on every worker (CREATE EXTENSION runs on
--     the workers through Citus' DDL propagation when it runs on the coordinator).
--   * The HNSW index and the postings' (chunk_terms, migration 0004) B-trees are created per shard; recall and latency per shard were not
--     measured. A tenant is one shard, so a very large tenant is one HNSW index on one worker.
--   * The warrant_doc_ordinals sequence is used from the coordinator (Citus supports bigint
--     sequences in distributed transactions); not verified.
--   * Foreign keys between co-located distributed tables that include the distribution column are
--     supported by Citus; the ones in 0001_init.sql all include tenant_id.
--   * Migration 0003 makes `chunks.search_tokens` a generated column over the SQL function
--     warrant_search_tokens(tsvector): the function must exist on every worker (Citus propagates
--     a distributed table's dependencies when it distributes it; not verified). Its chunk-write
--     statements are modifying CTEs that also update the tenant's warrant_tenants row: both carry
--     the same tenant_id, so they route to one shard group.
--   * Migration 0006's counts (reader_documents, lexeme_chunks) are written at the end of every
--     write transaction with the tenant's row, all on tenant_id = $1; the lexical statement that
--     reads them (CTEs, a window max, LATERAL, correlated subqueries) is a single-tenant query
--     Citus should route whole to one worker; not verified.

CREATE EXTENSION IF NOT EXISTS citus;

-- The tenant row: its epoch, locked by every write of the tenant.
SELECT create_distributed_table('warrant_tenants', 'tenant_id');

-- Documents, their versions, chunks (with embeddings), readers and change log, co-located with
-- the tenant row so every join and every transaction stays inside one shard group.
SELECT create_distributed_table('documents', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('document_versions', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('chunks', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('chunk_terms', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('document_readers', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('acl_changes', 'tenant_id', colocate_with => 'warrant_tenants');
-- The counts the lexical statement's shortcuts read (migration 0006), kept by the same writes.
SELECT create_distributed_table('reader_documents', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('lexeme_chunks', 'tenant_id', colocate_with => 'warrant_tenants');

-- Database-wide facts (embedder identity, lineage) and the migration record: small, read at
-- start, copied to every worker.
SELECT create_reference_table('warrant_meta');
SELECT create_reference_table('warrant_migrations');
