-- warrant postgres backend, schema version 7: row-level security on every tenant table.
--
-- Every statement warrant runs on tenant data filters on `tenant_id = $1` (src/postgres/sql.rs).
-- This is the database's own check behind that predicate: a statement that forgot it, or named
-- the wrong tenant, still reads and writes nothing of another tenant. Each transaction of the
-- backend first enters one tenant (`warrant_enter_tenant`, below); the policy admits the rows of
-- that tenant alone, and a transaction that entered none reads nothing and writes nothing
-- (fail-closed: an unset `warrant.tenant` reads as NULL, one reset at the end of an earlier
-- transaction as '', and neither equals any tenant id).
--
-- Who it binds: every role but superusers and roles with BYPASSRLS. The backend's role owns
-- these tables (it ran the migrations), and an owner is exempt from its tables' policies unless
-- the table FORCEs them, hence FORCE ROW LEVEL SECURITY. So the backend must connect as a role
-- that is neither a superuser nor BYPASSRLS; it warns at start when it is (SECURITY.md).
--
-- Statements that span tenants by design:
-- - the migrations: 0001-0006 ran before this one (on a fresh database they run in the same
--   transaction, before it). A later migration that reads or writes across tenants must lift
--   FORCE on the tables it touches for its own transaction (ALTER TABLE ... NO FORCE ROW LEVEL
--   SECURITY, then FORCE again before it ends: DDL is transactional) or run as a role that
--   bypasses row-level security;
-- - the two database-wide reads of the backend, HIGHEST_EPOCH (/readyz) and ANY_TENANT (start:
--   whether to load the demo corpus): they run in a transaction that entered the database
--   (`warrant_enter_database`), which the policy `database_reads` admits to `warrant_tenants`
--   alone, for SELECT alone (tenant ids, epochs and counts: no document, chunk or reader row);
-- - warrant_meta and warrant_migrations hold no tenant data and have no policy;
-- - foreign keys and ON DELETE CASCADE are checked by PostgreSQL itself, outside the policies.
--
-- Citus (docs/citus.sql): the policies and FORCE are copied to every shard, and the shards'
-- policies are what binds a statement (the coordinator sends each worker the statement without
-- them). A worker's session sees the tenant only through SET LOCAL propagated from the
-- coordinator (`citus.propagate_set_commands = 'local'`); set_config() is not propagated, so the
-- functions below SET LOCAL. The tenant is a parameter: the function quotes it (format's %L);
-- no SQL is built from input outside the server. Citus forbids subqueries in policies on
-- distributed tables, so the setting is read in the expression itself.

-- Enters `tenant` for the rest of the current transaction (the backend calls it right after
-- BEGIN, with the tenant as a bind parameter). Outside a transaction block SET LOCAL has no
-- effect, so a caller that forgot BEGIN reads nothing.
--
-- It also repeats the session's pgvector search settings (hnsw.*, set once per connection by the
-- backend) as SET LOCAL: on Citus the HNSW walk runs on a worker, and a setting reaches the
-- workers only that way (measured: with hnsw.ef_search set to 200 for the session, a walk on a
-- worker returned 39 rows, pgvector's default ef_search 40, and iterative scans were off).
CREATE FUNCTION warrant_enter_tenant(tenant text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    setting text;
    value text;
BEGIN
    IF tenant IS NULL OR tenant = '' THEN
        RAISE EXCEPTION 'warrant_enter_tenant: no tenant';
    END IF;
    PERFORM pg_catalog.set_config('citus.propagate_set_commands', 'local', true);
    EXECUTE pg_catalog.format('SET LOCAL warrant.tenant = %L', tenant);
    FOREACH setting IN ARRAY ARRAY['hnsw.ef_search', 'hnsw.iterative_scan', 'hnsw.max_scan_tuples'] LOOP
        value := pg_catalog.current_setting(setting, true);
        IF value IS NOT NULL AND value <> '' THEN
            EXECUTE pg_catalog.format('SET LOCAL %s = %L', setting, value);
        END IF;
    END LOOP;
END
$$;

-- Enters the database-wide scope of the two database-wide reads for the rest of the current
-- transaction: `warrant_tenants` rows, for SELECT (policy `database_reads`).
CREATE FUNCTION warrant_enter_database() RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    PERFORM pg_catalog.set_config('citus.propagate_set_commands', 'local', true);
    SET LOCAL warrant.scope = 'database';
END
$$;

ALTER TABLE warrant_tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE warrant_tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON warrant_tenants
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));
CREATE POLICY database_reads ON warrant_tenants FOR SELECT
    USING (current_setting('warrant.scope', true) = 'database');

ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE documents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON documents
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE document_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE document_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON document_versions
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON chunks
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE chunk_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE chunk_terms FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON chunk_terms
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE document_readers ENABLE ROW LEVEL SECURITY;
ALTER TABLE document_readers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON document_readers
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE acl_changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE acl_changes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON acl_changes
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE reader_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE reader_documents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON reader_documents
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));

ALTER TABLE lexeme_chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE lexeme_chunks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON lexeme_chunks
    USING (tenant_id = nullif(current_setting('warrant.tenant', true), ''))
    WITH CHECK (tenant_id = nullif(current_setting('warrant.tenant', true), ''));
