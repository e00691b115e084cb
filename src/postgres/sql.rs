//! Every SQL statement of the postgres backend, in one place for review.
//!
//! Invariants: every statement is a constant; every value (tenant, user, groups, document ids,
//! query text, query vector, limits) is a bind parameter (`$n`); no statement is ever built by
//! concatenating input. Every statement on tenant data filters on `tenant_id = $1` (the Citus
//! distribution column), and both retrieval statements carry the caller's ACL check
//! (an `EXISTS` over `document_readers`) inside the same statement, so no row outside the scope ever leaves the
//! database. The only text substituted into SQL is the embedder's dimension in the migration
//! (`@DIMENSION@`, a validated integer from the configuration).

/// Creates the migration bookkeeping table.
pub const CREATE_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS warrant_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())";

/// Serializes migrations across nodes that start at once (transaction-scoped advisory lock).
pub const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_xact_lock(5125324851::bigint)";

/// Migrations already applied.
pub const APPLIED_MIGRATIONS: &str = "SELECT version FROM warrant_migrations ORDER BY version";

/// Records an applied migration: $1 version, $2 name.
pub const RECORD_MIGRATION: &str = "INSERT INTO warrant_migrations (version, name) VALUES ($1, $2)";

/// Reads a meta value: $1 key.
pub const META_GET: &str = "SELECT value FROM warrant_meta WHERE key = $1";

/// Writes a meta value once: $1 key, $2 value.
pub const META_SET: &str = "INSERT INTO warrant_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING";

/// Sets pgvector's HNSW search parameters for the session ($1 ef_search, $2 iterative scan
/// mode, $3 max scan tuples), once per pooled connection.
pub const SESSION_SETTINGS: &str = "SELECT set_config('hnsw.ef_search', $1, false),
    set_config('hnsw.iterative_scan', $2, false),
    set_config('hnsw.max_scan_tuples', $3, false)";

/// Vector search inside the scope: $1 tenant, $2 user, $3 groups, $4 query vector, $5 limit.
/// With `hnsw.iterative_scan` the HNSW scan continues until $5 rows pass the filter (pgvector
/// 0.8); results may be slightly out of order (`relaxed_order`) and are sorted by the caller.
pub const VECTOR_SEARCH: &str = "SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.title, c.body, (1 - (c.embedding <=> $4))::real AS score, c.sentence_vectors
    FROM chunks c
    WHERE c.tenant_id = $1
      AND EXISTS (SELECT 1 FROM document_readers r
        WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
    ORDER BY c.embedding <=> $4
    LIMIT $5";

/// Lexical search inside the scope, ranked by BM25 (Robertson & Zaragoza 2009; k1 1.2, b 0.75,
/// tantivy's formula): $1 tenant, $2 user, $3 groups, $4 query text, $5 limit.
///
/// The query's distinct lexemes (english configuration: stopwords dropped, Snowball stemming)
/// are looked up in `chunk_terms`, the postings table (schema version 4): one index-only range
/// scan per lexeme over (tenant, lexeme), each posting carrying its term frequency and its
/// chunk's analyzed length. `readable` is the caller's readable documents (the ACL, read once
/// per query from `document_readers`, hashed), and a posting counts only when its document is
/// among them, so a term's document frequency is counted inside the caller's scope: documents
/// outside it move no score. The chunk count and average length are the tenant's
/// (`warrant_tenants.lexical_*`, kept by every write transaction, [`TENANT_SET_EPOCH`]). Chunk
/// rows (text) are read for the top $5 only. Same hits and scores as
/// [`LEXICAL_SEARCH_EXHAUSTIVE`] (tested); ties are broken by (document, version, chunk) here.
/// On SciFact BM25 scored nDCG@10 0.689 where `ts_rank` scored 0.590 and the embedded engine's
/// tantivy BM25 0.672 (BENCHMARKS.md, with the analyzer differences that remain).
pub const LEXICAL_SEARCH: &str = "WITH q AS (
        SELECT DISTINCT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', $4))) AS lexeme
    ), totals AS (
        SELECT greatest(t.lexical_chunks, 1)::float8 AS chunks,
            greatest(t.lexical_tokens, 1)::float8 / greatest(t.lexical_chunks, 1)::float8 AS average_tokens
        FROM warrant_tenants t WHERE t.tenant_id = $1
    ), readable AS MATERIALIZED (
        SELECT DISTINCT r.doc_id FROM document_readers r
        WHERE r.tenant_id = $1
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[])))
    ), postings AS MATERIALIZED (
        SELECT p.lexeme, p.doc_id, p.version, p.chunk_ordinal, p.frequency::float8 AS frequency,
            p.tokens::float8 AS tokens
        FROM q JOIN chunk_terms p ON p.tenant_id = $1 AND p.lexeme = q.lexeme
            JOIN readable ON readable.doc_id = p.doc_id
    ), document_frequencies AS (
        SELECT lexeme, count(*)::float8 AS documents FROM postings GROUP BY lexeme
    ), scores AS (
        SELECT p.doc_id, p.version, p.chunk_ordinal, sum(
            ln(1 + (totals.chunks - d.documents + 0.5) / (d.documents + 0.5))
            * p.frequency * (1.2 + 1)
            / (p.frequency + 1.2 * (1 - 0.75 + 0.75 * p.tokens / totals.average_tokens))) AS score
        FROM postings p JOIN document_frequencies d USING (lexeme), totals
        GROUP BY p.doc_id, p.version, p.chunk_ordinal
        ORDER BY score DESC, p.doc_id, p.version, p.chunk_ordinal
        LIMIT $5
    )
    SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.title, c.body, s.score::real AS score, c.sentence_vectors
    FROM scores s JOIN chunks c
        ON c.tenant_id = $1 AND c.doc_id = s.doc_id AND c.version = s.version AND c.chunk_ordinal = s.chunk_ordinal
    ORDER BY s.score DESC, s.doc_id, s.version, s.chunk_ordinal";

/// The lexical statement of schema versions 1-3, kept as the reference [`LEXICAL_SEARCH`] is
/// tested against (same hits, same scores): BM25 over the GIN match, each term frequency
/// recovered from the chunk's own `search` vector. $1 tenant, $2 user, $3 groups, $4 query text,
/// $5 limit. Exhaustive in the rows it reads: 2.4-3.2 s at 100,000 chunks when the query's
/// terms are in most chunks, against 1.2-1.4 s for [`LEXICAL_SEARCH`] (BENCHMARKS.md).
///
/// The query's distinct lexemes (english configuration: stopwords dropped, Snowball stemming)
/// are OR-ed; `matched` is every chunk inside the scope that holds one of them (GIN match plus
/// the ACL `EXISTS`), with only its query lexemes kept (`setweight` marks them, `ts_filter`
/// keeps them). A term's frequency is its position count in the chunk; its document frequency
/// is the number of matched chunks holding it, which is exactly its document frequency inside
/// the caller's scope (every chunk of the scope holding the term is matched), so documents
/// outside the scope move no score through it. The chunk count and average length are the
/// tenant's (`warrant_tenants.lexical_*`, kept by every write transaction, [`TENANT_SET_EPOCH`]).
/// On SciFact it scored nDCG@10 0.689 where `ts_rank` scored 0.590 and the embedded engine's
/// tantivy BM25 0.672 (BENCHMARKS.md, with the analyzer differences that remain).
pub const LEXICAL_SEARCH_EXHAUSTIVE: &str = "WITH q AS (
        SELECT array_agg(lexeme) AS lexemes,
            string_agg('''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery AS query
        FROM unnest(tsvector_to_array(to_tsvector('english', $4))) AS lexeme
    ), totals AS (
        SELECT greatest(t.lexical_chunks, 1)::float8 AS chunks,
            greatest(t.lexical_tokens, 1)::float8 / greatest(t.lexical_chunks, 1)::float8 AS average_tokens
        FROM warrant_tenants t WHERE t.tenant_id = $1
    ), matched AS MATERIALIZED (
        SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal, c.start_char, c.end_char,
            c.title, c.body, c.sentence_vectors, c.search_tokens, ts_filter(setweight(c.search, 'A', q.lexemes), '{a}') AS terms
        FROM chunks c, q
        WHERE c.tenant_id = $1
          AND q.query IS NOT NULL
          AND c.search @@ q.query
          AND EXISTS (SELECT 1 FROM document_readers r
            WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
              AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
    ), frequencies AS (
        SELECT m.chunk_id, m.search_tokens, term.lexeme, cardinality(term.positions)::float8 AS frequency
        FROM matched m, unnest(m.terms) AS term
    ), document_frequencies AS (
        SELECT lexeme, count(*)::float8 AS documents FROM frequencies GROUP BY lexeme
    ), scores AS (
        SELECT f.chunk_id, sum(
            ln(1 + (totals.chunks - d.documents + 0.5) / (d.documents + 0.5))
            * f.frequency * (1.2 + 1)
            / (f.frequency + 1.2 * (1 - 0.75 + 0.75 * f.search_tokens / totals.average_tokens))) AS score
        FROM frequencies f JOIN document_frequencies d USING (lexeme), totals
        GROUP BY f.chunk_id
    )
    SELECT m.chunk_id, m.doc_id, m.version, m.chunk_ordinal, m.doc_ordinal,
        m.start_char, m.end_char, m.title, m.body, s.score::real AS score, m.sentence_vectors
    FROM matched m JOIN scores s USING (chunk_id)
    ORDER BY s.score DESC, m.chunk_id
    LIMIT $5";

/// The live, readable document versions among some documents, and the tenant's epoch: $1 tenant,
/// $2 user, $3 groups, $4 document ids. The answer pipeline asks it of the sources it may cite,
/// at validation and once more before it answers, so a revoke any node committed in between is
/// enforced (a chunk is authorized when its `doc_ordinal` is among those returned).
pub const READABLE_VERSIONS: &str =
    "SELECT coalesce((SELECT t.acl_epoch FROM warrant_tenants t WHERE t.tenant_id = $1), 0),
    array(SELECT v.doc_ordinal FROM documents d
        JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.version = d.live_version
        WHERE d.tenant_id = $1 AND d.doc_id = ANY($4::text[])
          AND EXISTS (SELECT 1 FROM document_readers r
            WHERE r.tenant_id = $1 AND r.doc_id = d.doc_id
              AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[])))))";

/// A readable document's live version with its chunks in document order, and the tenant's epoch:
/// $1 tenant, $2 user, $3 groups, $4 document id. No row: absent, deleted or not readable.
pub const DOCUMENT_READ: &str = "SELECT v.version, v.title, c.chunk_id, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.body,
        coalesce((SELECT t.acl_epoch FROM warrant_tenants t WHERE t.tenant_id = $1), 0), c.sentence_vectors
    FROM documents d
    JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.version = d.live_version
    JOIN chunks c ON c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id AND c.version = d.live_version
    WHERE d.tenant_id = $1 AND d.doc_id = $4
      AND EXISTS (SELECT 1 FROM document_readers r
        WHERE r.tenant_id = $1 AND r.doc_id = d.doc_id
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
    ORDER BY c.start_char, c.chunk_ordinal";

/// The highest tenant epoch (readiness; no tenant data).
pub const HIGHEST_EPOCH: &str = "SELECT coalesce(max(acl_epoch), 0)::bigint FROM warrant_tenants";

/// Whether the database holds any document (the demo corpus is loaded only into an empty one).
pub const ANY_DOCUMENT: &str = "SELECT EXISTS (SELECT 1 FROM documents)";

/// Creates the tenant row if absent: $1 tenant.
pub const TENANT_ENSURE: &str =
    "INSERT INTO warrant_tenants (tenant_id) VALUES ($1) ON CONFLICT (tenant_id) DO NOTHING";

/// Locks the tenant row (serializes the tenant's writes on every node): $1 tenant.
pub const TENANT_LOCK: &str = "SELECT acl_epoch FROM warrant_tenants WHERE tenant_id = $1 FOR UPDATE";

/// Reads the tenant's epoch without locking: $1 tenant.
pub const TENANT_EPOCH: &str = "SELECT acl_epoch FROM warrant_tenants WHERE tenant_id = $1";

/// Advances the tenant's epoch and applies the transaction's change to its BM25 totals (the
/// chunks [`CHUNK_INSERT`] and [`CHUNKS_DELETE`] returned), once at the end of every write
/// transaction: $1 tenant, $2 new epoch, $3 chunks added (negative: removed), $4 tokens added.
/// One update of the tenant row per transaction: updating it per chunk made loading SciFact
/// 35 % slower per chunk (BENCHMARKS.md).
pub const TENANT_SET_EPOCH: &str = "UPDATE warrant_tenants SET acl_epoch = $2,
        lexical_chunks = lexical_chunks + $3, lexical_tokens = lexical_tokens + $4
    WHERE tenant_id = $1";

/// A document's head: $1 tenant, $2 doc id.
pub const DOCUMENT_HEAD: &str = "SELECT live_version, last_version FROM documents WHERE tenant_id = $1 AND doc_id = $2";

/// Makes $3 the live version: $1 tenant, $2 doc id, $3 version.
pub const DOCUMENT_UPSERT_HEAD: &str = "INSERT INTO documents (tenant_id, doc_id, live_version, last_version)
    VALUES ($1, $2, $3, $3)
    ON CONFLICT (tenant_id, doc_id) DO UPDATE SET live_version = $3, last_version = $3";

/// Marks the document deleted: $1 tenant, $2 doc id.
pub const DOCUMENT_DELETE_HEAD: &str = "UPDATE documents SET live_version = NULL WHERE tenant_id = $1 AND doc_id = $2";

/// Allocates a document-version ordinal.
pub const NEXT_DOC_ORDINAL: &str = "SELECT nextval('warrant_doc_ordinals')";

/// Records a version: $1 tenant, $2 doc id, $3 version, $4 doc ordinal, $5 title, $6 epoch.
pub const VERSION_INSERT: &str =
    "INSERT INTO document_versions (tenant_id, doc_id, version, doc_ordinal, title, acl_epoch)
    VALUES ($1, $2, $3, $4, $5, $6)";

/// Drops every chunk of a document (the previous live version), returning each one's analyzed
/// length for the tenant's BM25 totals ([`TENANT_SET_EPOCH`]): $1 tenant, $2 doc id.
pub const CHUNKS_DELETE: &str = "DELETE FROM chunks WHERE tenant_id = $1 AND doc_id = $2 RETURNING search_tokens";

/// Inserts a chunk, returning its analyzed length for the tenant's BM25 totals
/// ([`TENANT_SET_EPOCH`]): $1 tenant, $2 doc id, $3 version, $4 chunk ordinal, $5 chunk id,
/// $6 doc ordinal, $7 start, $8 end, $9 title, $10 text, $11 embedding, $12 sentence vectors
/// (encoded, or NULL).
pub const CHUNK_INSERT: &str = "INSERT INTO chunks (tenant_id, doc_id, version, chunk_ordinal, chunk_id, doc_ordinal,
        start_char, end_char, title, body, embedding, sentence_vectors)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    RETURNING search_tokens";

/// Writes the postings of a document version's chunks (inserted just before, same transaction)
/// from their `search` vectors: $1 tenant, $2 doc id, $3 version. They go with their chunks
/// (`ON DELETE CASCADE`).
pub const POSTINGS_INSERT: &str =
    "INSERT INTO chunk_terms (tenant_id, lexeme, doc_id, version, chunk_ordinal, frequency, tokens)
    SELECT c.tenant_id, term.lexeme, c.doc_id, c.version, c.chunk_ordinal,
        coalesce(cardinality(term.positions), 1), c.search_tokens
    FROM chunks c, unnest(c.search) AS term
    WHERE c.tenant_id = $1 AND c.doc_id = $2 AND c.version = $3";

/// The tenant's postings recounted ($1 tenant): postings, and postings whose chunk is gone or
/// whose frequency or length disagrees with the chunk's `search` vector (must be 0).
pub const POSTINGS_CHECK: &str = "SELECT
        (SELECT count(*) FROM chunk_terms p WHERE p.tenant_id = $1),
        (SELECT count(*) FROM (
            (SELECT p.lexeme, p.doc_id, p.version, p.chunk_ordinal, p.frequency, p.tokens
                FROM chunk_terms p WHERE p.tenant_id = $1
             EXCEPT ALL
             SELECT term.lexeme, c.doc_id, c.version, c.chunk_ordinal,
                coalesce(cardinality(term.positions), 1), c.search_tokens
                FROM chunks c, unnest(c.search) AS term WHERE c.tenant_id = $1)
            UNION ALL
            (SELECT term.lexeme, c.doc_id, c.version, c.chunk_ordinal,
                coalesce(cardinality(term.positions), 1), c.search_tokens
                FROM chunks c, unnest(c.search) AS term WHERE c.tenant_id = $1
             EXCEPT ALL
             SELECT p.lexeme, p.doc_id, p.version, p.chunk_ordinal, p.frequency, p.tokens
                FROM chunk_terms p WHERE p.tenant_id = $1)) AS differences)";

/// The tenant's BM25 totals as kept ($1 tenant): chunk count and analyzed tokens.
pub const LEXICAL_TOTALS: &str = "SELECT lexical_chunks, lexical_tokens FROM warrant_tenants WHERE tenant_id = $1";

/// The tenant's BM25 totals recounted from its chunks ($1 tenant), to check [`LEXICAL_TOTALS`].
pub const LEXICAL_TOTALS_RECOUNTED: &str =
    "SELECT count(*), coalesce(sum(search_tokens), 0)::bigint FROM chunks WHERE tenant_id = $1";

/// Drops every reader of a document: $1 tenant, $2 doc id.
pub const READERS_DELETE_ALL: &str = "DELETE FROM document_readers WHERE tenant_id = $1 AND doc_id = $2";

/// Removes readers of one kind: $1 tenant, $2 doc id, $3 kind ('g' or 'u'), $4 names.
pub const READERS_DELETE: &str = "DELETE FROM document_readers
    WHERE tenant_id = $1 AND doc_id = $2 AND kind = $3::\"char\" AND name = ANY($4::text[])";

/// Adds readers of one kind (existing ones are kept): $1 tenant, $2 doc id, $3 kind, $4 names.
pub const READERS_INSERT: &str = "INSERT INTO document_readers (tenant_id, doc_id, kind, name)
    SELECT $1, $2, $3::\"char\", name FROM unnest($4::text[]) AS name
    ON CONFLICT DO NOTHING";

/// Appends to the change log: $1 tenant, $2 epoch, $3 position, $4 lineage (text uuid), $5 kind,
/// $6 doc id, $7 version, $8 groups, $9 users.
pub const CHANGE_INSERT: &str =
    "INSERT INTO acl_changes (tenant_id, epoch, position, lineage, kind, doc_id, version, groups, users)
    VALUES ($1, $2, $3, $4::text::uuid, $5, $6, $7, $8, $9)";

#[cfg(test)]
mod tests {
    use super::*;

    /// What a statement on tenant data reads for a principal, and so which checks it must carry.
    #[derive(Clone, Copy, PartialEq)]
    enum Reads {
        /// A search: the ACL and a bound on the rows (`LIMIT $5`).
        Search,
        /// Documents or chunks for one principal: the ACL.
        ForPrincipal,
        /// Nothing for a principal (writes, totals).
        Nothing,
    }
    use Reads::{ForPrincipal, Nothing, Search};

    /// Every statement on tenant data, with what it reads.
    const TENANT_STATEMENTS: &[(&str, Reads)] = &[
        (VECTOR_SEARCH, Search),
        (LEXICAL_SEARCH, Search),
        (LEXICAL_SEARCH_EXHAUSTIVE, Search),
        (POSTINGS_INSERT, Nothing),
        (POSTINGS_CHECK, Nothing),
        (READABLE_VERSIONS, ForPrincipal),
        (DOCUMENT_READ, ForPrincipal),
        (TENANT_ENSURE, Nothing),
        (TENANT_LOCK, Nothing),
        (TENANT_EPOCH, Nothing),
        (TENANT_SET_EPOCH, Nothing),
        (DOCUMENT_HEAD, Nothing),
        (DOCUMENT_UPSERT_HEAD, Nothing),
        (DOCUMENT_DELETE_HEAD, Nothing),
        (VERSION_INSERT, Nothing),
        (CHUNKS_DELETE, Nothing),
        (CHUNK_INSERT, Nothing),
        (READERS_DELETE_ALL, Nothing),
        (READERS_DELETE, Nothing),
        (READERS_INSERT, Nothing),
        (CHANGE_INSERT, Nothing),
        (LEXICAL_TOTALS, Nothing),
        (LEXICAL_TOTALS_RECOUNTED, Nothing),
    ];

    #[test]
    fn every_tenant_statement_is_bound_to_the_tenant_and_retrieval_carries_the_acl() {
        for (statement, reads) in TENANT_STATEMENTS {
            let bound = statement.contains("tenant_id = $1") || statement.contains("VALUES ($1");
            let inserts_from_select = statement.contains("SELECT $1,");
            assert!(bound || inserts_from_select, "not bound to the tenant: {statement}");
            if *reads != Nothing {
                assert!(statement.contains("r.tenant_id = $1"), "ACL not in the tenant: {statement}");
                assert!(statement.contains("r.name = $2") && statement.contains("ANY($3::text[])"), "{statement}");
            }
            if *reads == Search {
                assert!(statement.contains("LIMIT $5"), "unbounded: {statement}");
            }
        }
    }

    #[test]
    fn every_chunk_write_returns_what_the_lexical_totals_need() {
        for (statement, _) in TENANT_STATEMENTS {
            if statement.contains("INSERT INTO chunks") || statement.contains("DELETE FROM chunks") {
                assert!(statement.ends_with("RETURNING search_tokens"), "{statement}");
            }
        }
        assert!(TENANT_SET_EPOCH.contains("lexical_chunks = lexical_chunks + $3"));
        assert!(TENANT_SET_EPOCH.contains("lexical_tokens = lexical_tokens + $4"));
    }

    #[test]
    fn lexical_search_scores_bm25_inside_the_scope_with_tantivys_parameters() {
        // The postings are filtered by the caller's readable documents before any statistic is
        // counted over them, and chunk rows are read for the top $5 only.
        let readable = LEXICAL_SEARCH.find("readable AS MATERIALIZED").expect("the scope");
        let postings = LEXICAL_SEARCH.find("postings AS MATERIALIZED").expect("scoped postings");
        let frequencies = LEXICAL_SEARCH.find("document_frequencies AS").expect("document frequencies");
        assert!(readable < postings && postings < frequencies);
        assert!(LEXICAL_SEARCH.contains("JOIN readable ON readable.doc_id = p.doc_id"), "postings inside the scope");
        assert!(LEXICAL_SEARCH.contains("FROM postings GROUP BY lexeme"), "statistics over the scoped postings");
        assert!(
            LEXICAL_SEARCH.find("LIMIT $5").expect("bounded") < LEXICAL_SEARCH.find("JOIN chunks c").expect("text")
        );
        for statement in [LEXICAL_SEARCH, LEXICAL_SEARCH_EXHAUSTIVE] {
            // k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
            assert!(statement.contains("(1.2 + 1)") && statement.contains("1.2 * (1 - 0.75 + 0.75 *"));
            assert!(statement.contains("ln(1 + (totals.chunks - d.documents + 0.5) / (d.documents + 0.5))"));
            assert!(statement.contains("to_tsvector('english', $4)"), "the query is analyzed like the chunks");
        }
        let matched = LEXICAL_SEARCH_EXHAUSTIVE.find("matched AS MATERIALIZED").expect("candidate set");
        let acl = LEXICAL_SEARCH_EXHAUSTIVE.find("EXISTS (SELECT 1 FROM document_readers r").expect("acl");
        assert!(matched < acl && acl < LEXICAL_SEARCH_EXHAUSTIVE.find("frequencies AS").expect("frequencies"));
    }

    #[test]
    fn no_statement_has_a_placeholder_for_text_substitution() {
        for (statement, _) in TENANT_STATEMENTS {
            for marker in ["{}", "@DIMENSION@", "%s"] {
                assert!(!statement.contains(marker), "{marker} in {statement}");
            }
        }
    }
}
