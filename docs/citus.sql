-- Distributing warrant's PostgreSQL schema over Citus (or any distributed PostgreSQL that shards
-- by a column and co-locates tables sharded the same way).
--
-- Run once, as a superuser of the coordinator, AFTER `warrant db migrate` has created the schema
-- (migrations/*.sql, as warrant's own role: see "Roles" below) and BEFORE any data is written:
--
--   psql "$WARRANT_DATABASE_URL" -f docs/citus.sql
--
-- Why it fits: every tenant table keys on tenant_id first, and every statement warrant runs
-- (src/postgres/sql/) filters on `tenant_id = $1`, so each statement routes to the one shard
-- group holding the tenant: a retrieval's vector search, lexical search and ACL check, and a
-- write's tenant lock, versions, chunks, readers and change log all run on one worker, and a
-- write stays a single-shard-group transaction.
--
-- Tested on a real cluster: Citus 13.2.2 (built from ../shared/vendor by tests/citus.sh), a
-- coordinator and two workers on PostgreSQL 15 with pgvector 0.8.0; `.ci/run` runs it. Each test
-- database is distributed as an operator would: Citus and pgvector created on every node, the
-- workers registered (citus_add_node), `warrant db migrate`'s migrator, then this file
-- (tests/it/citus.rs, `distributed_database`). What each former open point became:
--   * Routing: every tenant statement of src/postgres/sql/ is a single-shard router plan (one
--     task on one worker), checked by EXPLAIN with real parameters in
--     `citus::citus_every_tenant_statement_is_a_single_shard_router_plan`. It found three that
--     were not: the INSERT ... SELECT FROM unnest(...) statements (READER_COUNTS_ADD,
--     LEXEME_COUNTS_ADD, READERS_INSERT) were pulled to the coordinator; they now select beside
--     the tenant's row and are routed. Database-wide statements, listed with their reason in that
--     test: the migrations, warrant_meta, the session settings, the tenant's entry (SET LOCAL,
--     replayed to the workers), HIGHEST_EPOCH (/readyz) and ANY_TENANT (start-up), which read every
--     shard of warrant_tenants, and the ordinal sequence. docs/sql-review.md lists every statement.
--   * pgvector is created on every node by the test set-up (not left to DDL propagation).
--   * The warrant_doc_ordinals sequence, used from the coordinator: every upsert of the tests
--     below takes its ordinals from it.
--   * Foreign keys between the co-located tables: created by this file, exercised by every write.
--   * warrant_search_tokens(tsvector) of the generated column on the workers, and the counts
--     tables of migration 0006: `postgres_lexical_totals_follow_upsert_replace_delete_and_rollback`
--     and `postgres_lexical_shortcuts_give_the_exhaustive_top_k` pass on the cluster.
--   * The rest of tests/it/postgres.rs also runs on the cluster (scope safety, near-duplicates of
--     another tenant, a revoke on one node enforced by another under load, two HTTP nodes, the
--     answer fixtures, BM25 against a naive model), except the three migration tests that roll a
--     single node's schema back with test-only DDL (on the cluster every migration is applied
--     before the tables are distributed).
--   * Row-level security (migration 0007): the policies and FORCE ROW LEVEL SECURITY of the
--     thirteen tenant tables (with migration 0008's review queue) are copied to every shard by create_distributed_table below (the migrations
--     run first), and by Citus's DDL propagation when a cluster distributed at an earlier version
--     migrates forward: `citus::citus_every_shard_of_a_tenant_table_forces_row_level_security`,
--     `citus::citus_row_level_security_reaches_the_shards_of_tables_distributed_before_it`. The
--     shards' policies are what binds a statement (the coordinator sends each worker the statement
--     without its policies), and a worker sees the tenant only through SET LOCAL, which Citus
--     replays to every worker a transaction reaches when citus.propagate_set_commands = 'local':
--     warrant_enter_tenant does both (set_config() is not replayed; with it every write was
--     refused by the workers). The routing test runs under row-level security; the postgres tests
--     on the cluster include an unfiltered statement that reads its own tenant alone and a session
--     without a tenant that reads nothing.
--   * pgvector's session settings (hnsw.ef_search, iterative_scan, max_scan_tuples) were never
--     sent to the workers, which run the HNSW walk: until migration 0007 a walk on the cluster used
--     pgvector's defaults (ef_search 40, no iterative scan) whatever storage.postgres said.
--     warrant_enter_tenant now repeats them as SET LOCAL:
--     `postgres::postgres_the_backends_hnsw_settings_bind_the_walk_where_it_runs` on the cluster.
--   * Roles: warrant's role (neither a superuser nor BYPASSRLS, owner of the schema; it runs
--     `warrant db migrate`) must exist on every node and be able to log in to the workers (the
--     coordinator connects to them as the same role; citus.node_conninfo). Create it on each node,
--     or on the coordinator of a database where Citus is installed and the workers registered,
--     which propagates it. The tests create `warrant_app` on every node.
--   * Growing the cluster while it serves: a worker added (citus_add_node), the shards
--     rebalanced (citus_rebalance_start) and a tenant isolated (isolate_tenant_to_new_shard,
--     'CASCADE'), with two nodes serving retrievals and revokes: `citus::grow::*` and
--     benches/citus_grow.sh. Move shards with shard_transfer_mode => 'block_writes': the
--     logical-replication mode cannot apply rows into tables that FORCE row-level security on
--     PostgreSQL 15, and the move never ends (SECURITY.md). Each node needs worker processes for
--     Citus' background jobs beside one maintenance daemon per database (max_worker_processes;
--     tests/citus.sh sets 256).
-- Not measured: recall and latency of the per-shard HNSW indexes (a tenant is one shard, so a
-- very large tenant is one HNSW index on one worker).

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

-- The review queue (migration 0008), co-located with the tenant row: an item's sources and verdicts
-- reference it (ON DELETE CASCADE inside the shard group). review_items first: the others
-- reference it.
SELECT create_distributed_table('review_tenants', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('review_items', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('review_sources', 'tenant_id', colocate_with => 'warrant_tenants');
SELECT create_distributed_table('review_verdicts', 'tenant_id', colocate_with => 'warrant_tenants');

-- Database-wide facts (embedder identity, lineage) and the migration record: small, read at
-- start, copied to every worker.
SELECT create_reference_table('warrant_meta');
SELECT create_reference_table('warrant_migrations');
