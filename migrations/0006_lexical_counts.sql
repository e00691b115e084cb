-- warrant postgres backend, schema version 6: counts that let BM25 skip work it cannot use.
--
-- Until this version LEXICAL_SEARCH read and scored every scoped posting of every query term:
-- 1.2-1.4 s at 100,000 chunks for terms in most chunks (BENCHMARKS.md). Two things made that
-- necessary, and these counts remove both where they can:
-- - A term's document frequency inside the caller's scope was counted from its postings. When
--   the caller reads every live document of the tenant, the scope's frequency is the tenant's,
--   kept here per lexeme (`lexeme_chunks`), and the caller's readable documents need not be
--   read at all. Whether the caller reads everything is decided from two counts kept here as
--   well: the tenant's live documents (`warrant_tenants.live_documents`) and the documents each
--   reader (group or user) is granted (`reader_documents`). Reader rows exist only for live
--   documents (a delete removes them), so a reader whose count equals the live count reads
--   every live document, hence every chunk. Nothing about documents outside a scope reaches a
--   caller through these: a caller uses the tenant's frequencies only when it reads all of it.
-- - Every matching chunk was scored. LEXICAL_SEARCH now scores first the chunks holding a
--   selective term, and only when a chunk holding only common terms could still reach the top k
--   does it score everything (src/postgres/sql.rs).
--
-- Kept by every write transaction, changed once per transaction with the tenant's epoch (under
-- the tenant lock every write takes), like the BM25 totals of schema version 3.

ALTER TABLE warrant_tenants ADD COLUMN live_documents bigint NOT NULL DEFAULT 0;

CREATE TABLE reader_documents (
    tenant_id text NOT NULL,
    kind "char" NOT NULL CHECK (kind IN ('g', 'u')),
    name text NOT NULL,
    documents bigint NOT NULL,
    PRIMARY KEY (tenant_id, kind, name)
);

CREATE TABLE lexeme_chunks (
    tenant_id text NOT NULL,
    lexeme text NOT NULL,
    chunks bigint NOT NULL,
    PRIMARY KEY (tenant_id, lexeme)
);

-- Rows written before this migration.
UPDATE warrant_tenants t SET live_documents = s.documents
    FROM (SELECT tenant_id, count(*) AS documents FROM documents WHERE live_version IS NOT NULL GROUP BY tenant_id) s
    WHERE s.tenant_id = t.tenant_id;
INSERT INTO reader_documents (tenant_id, kind, name, documents)
    SELECT tenant_id, kind, name, count(*) FROM document_readers GROUP BY tenant_id, kind, name;
INSERT INTO lexeme_chunks (tenant_id, lexeme, chunks)
    SELECT tenant_id, lexeme, count(*) FROM chunk_terms GROUP BY tenant_id, lexeme;
