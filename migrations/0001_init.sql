-- warrant postgres backend, schema version 1.
--
-- Every table but warrant_meta / warrant_migrations keys on tenant_id first: it is the Citus
-- distribution column (docs/citus.sql distributes and co-locates these tables by it), and every
-- statement warrant runs filters on it, so a statement routes to one shard group.
-- `@DIMENSION@` is replaced by the embedder's dimension (an integer validated in Rust, never
-- request input) before this file runs.

-- pgvector is not a trusted extension: only a superuser creates it. Where one already did (a
-- role that is not a superuser runs the migrations: SECURITY.md), nothing is asked of it (on Citus
-- even CREATE EXTENSION IF NOT EXISTS is propagated to the workers, and refused there to a role
-- that does not own the extension).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        CREATE EXTENSION vector;
    END IF;
END
$$;

-- Database-wide facts: embedder name/dimension (refuse to mix vector spaces), lineage id.
CREATE TABLE warrant_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

-- One row per tenant: its ACL epoch. Every write of a tenant locks this row first
-- (SELECT ... FOR UPDATE), which serializes a tenant's writes across all warrant nodes.
CREATE TABLE warrant_tenants (
    tenant_id text PRIMARY KEY,
    acl_epoch bigint NOT NULL DEFAULT 0
);

-- Global document-version ordinals (the `doc_ordinal` of chunks; u32 in warrant).
CREATE SEQUENCE warrant_doc_ordinals AS bigint MINVALUE 1 MAXVALUE 4294967295;

-- A document's head: its live version (NULL once deleted) and the highest version ever written.
CREATE TABLE documents (
    tenant_id text NOT NULL,
    doc_id text NOT NULL,
    live_version bigint,
    last_version bigint NOT NULL,
    PRIMARY KEY (tenant_id, doc_id)
);

-- Every version ever written (history; chunks exist only for the live version).
CREATE TABLE document_versions (
    tenant_id text NOT NULL,
    doc_id text NOT NULL,
    version bigint NOT NULL,
    doc_ordinal bigint NOT NULL,
    title text NOT NULL,
    acl_epoch bigint NOT NULL,
    PRIMARY KEY (tenant_id, doc_id, version),
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents (tenant_id, doc_id)
);

-- Chunks of live versions with provenance, full-text vector and embedding.
CREATE TABLE chunks (
    tenant_id text NOT NULL,
    doc_id text NOT NULL,
    version bigint NOT NULL,
    chunk_ordinal integer NOT NULL,
    chunk_id bytea NOT NULL,
    doc_ordinal bigint NOT NULL,
    start_char integer NOT NULL,
    end_char integer NOT NULL,
    title text NOT NULL,
    body text NOT NULL,
    search tsvector GENERATED ALWAYS AS (to_tsvector('english', title || ' ' || body)) STORED,
    embedding vector(@DIMENSION@) NOT NULL,
    PRIMARY KEY (tenant_id, doc_id, version, chunk_ordinal),
    FOREIGN KEY (tenant_id, doc_id, version) REFERENCES document_versions (tenant_id, doc_id, version)
);
CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)
    WITH (m = 16, ef_construction = 100);
CREATE INDEX chunks_search_gin ON chunks USING gin (search);

-- Readers of a document: kind 'g' (group) or 'u' (user).
CREATE TABLE document_readers (
    tenant_id text NOT NULL,
    doc_id text NOT NULL,
    kind "char" NOT NULL CHECK (kind IN ('g', 'u')),
    name text NOT NULL,
    PRIMARY KEY (tenant_id, doc_id, kind, name),
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents (tenant_id, doc_id)
);

-- The change log: one row per document change, in the tenant's epoch order, with the
-- database's lineage (a fresh database is a new history).
CREATE TABLE acl_changes (
    tenant_id text NOT NULL,
    epoch bigint NOT NULL,
    position integer NOT NULL,
    lineage uuid NOT NULL,
    kind text NOT NULL CHECK (kind IN ('upsert', 'delete', 'grant', 'revoke')),
    doc_id text NOT NULL,
    version bigint,
    groups text[],
    users text[],
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, epoch, position)
);
