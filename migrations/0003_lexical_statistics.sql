-- warrant postgres backend, schema version 3: what BM25 needs beyond the GIN match.
--
-- BM25 (Robertson & Zaragoza 2009) scores a chunk from its term frequencies, its length, the
-- average length and each term's document frequency. The term frequencies are the position
-- counts in the chunk's own `search` vector and the document frequencies are counted over the
-- candidates of the query inside the caller's scope (src/postgres/sql.rs, LEXICAL_SEARCH); this
-- migration adds the rest:
-- - `chunks.search_tokens`: the chunk's analyzed length (stopwords removed, as the embedded
--   engine counts it), computed once on insert;
-- - `warrant_tenants.lexical_chunks` / `lexical_tokens`: the tenant's chunk count and total
--   length, changed by every write transaction that inserts or deletes chunks, in the same
--   update that advances the tenant's epoch (under the tenant lock every write takes).

-- Analyzed tokens of a full-text vector: the sum of its lexemes' position counts.
CREATE FUNCTION warrant_search_tokens(document tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT coalesce(sum(cardinality(positions)), 0)::integer FROM unnest(document) $$;

-- Same text and configuration as `search` (a generated column cannot read another one).
ALTER TABLE chunks ADD COLUMN search_tokens integer NOT NULL
    GENERATED ALWAYS AS (warrant_search_tokens(to_tsvector('english', title || ' ' || body))) STORED;

ALTER TABLE warrant_tenants
    ADD COLUMN lexical_chunks bigint NOT NULL DEFAULT 0,
    ADD COLUMN lexical_tokens bigint NOT NULL DEFAULT 0;

-- Chunks written before this migration.
UPDATE warrant_tenants t SET lexical_chunks = s.chunks, lexical_tokens = s.tokens
    FROM (SELECT tenant_id, count(*) AS chunks, coalesce(sum(search_tokens), 0) AS tokens
          FROM chunks GROUP BY tenant_id) s
    WHERE s.tenant_id = t.tenant_id;
