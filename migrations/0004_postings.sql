-- warrant postgres backend, schema version 4: a postings table for BM25.
--
-- Until this version LEXICAL_SEARCH read every scoped chunk matching a query lexeme through the
-- GIN index and recovered each term frequency from the chunk's own `search` vector (ts_filter,
-- unnest) after an ACL probe per chunk: 2.4-2.8 s at 100,000 chunks for a query holding a term
-- that nearly every chunk contains (BENCHMARKS.md). `chunk_terms` is the inverted index in a
-- plain table, one row per (chunk, lexeme) with what BM25 needs (term frequency, chunk length),
-- clustered by (tenant, lexeme) and covering, so a term's scoped postings are one index-only
-- range scan joined to the caller's readable documents, and no chunk row is read until the top k.
--
-- Rows exist exactly for the chunks table's rows: written by the same transaction as their chunk
-- (src/postgres/sql.rs, POSTINGS_INSERT) and removed with it (ON DELETE CASCADE).

CREATE TABLE chunk_terms (
    tenant_id text NOT NULL,
    lexeme text NOT NULL,
    doc_id text NOT NULL,
    version bigint NOT NULL,
    chunk_ordinal integer NOT NULL,
    -- The lexeme's position count in the chunk's `search` vector (PostgreSQL keeps at most 256).
    frequency integer NOT NULL,
    -- The chunk's analyzed length (chunks.search_tokens), repeated so scoring reads no chunk row.
    tokens integer NOT NULL,
    PRIMARY KEY (tenant_id, lexeme, doc_id, version, chunk_ordinal) INCLUDE (frequency, tokens),
    FOREIGN KEY (tenant_id, doc_id, version, chunk_ordinal)
        REFERENCES chunks (tenant_id, doc_id, version, chunk_ordinal) ON DELETE CASCADE
);
-- What the cascade from a chunk delete looks rows up by.
CREATE INDEX chunk_terms_by_chunk ON chunk_terms (tenant_id, doc_id, version, chunk_ordinal);

-- The GIN index served only the previous lexical statement's match (`search @@ query`).
DROP INDEX chunks_search_gin;

-- Chunks written before this migration.
INSERT INTO chunk_terms (tenant_id, lexeme, doc_id, version, chunk_ordinal, frequency, tokens)
    SELECT c.tenant_id, term.lexeme, c.doc_id, c.version, c.chunk_ordinal,
        coalesce(cardinality(term.positions), 1), c.search_tokens
    FROM chunks c, unnest(c.search) AS term;
