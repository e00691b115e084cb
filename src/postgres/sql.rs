//! Every SQL statement of the postgres backend, in one place for review (`docs/sql-review.md`
//! lists each with its tenant predicate, ACL check, plan on Citus and row-level security).
//!
//! Invariants: every statement is a constant; every value (tenant, user, groups, document ids,
//! query text, query vector, limits) is a bind parameter (`$n`); no statement is ever built by
//! concatenating input. Every statement on tenant data filters on `tenant_id = $1` (the Citus
//! distribution column), and both retrieval statements carry the caller's ACL check
//! (an `EXISTS` over `document_readers`) inside the same statement, so no row outside the scope ever leaves the
//! database. Behind the predicate, row-level security (migration 0007): every statement on tenant
//! data runs in a transaction that first entered its tenant ([`ENTER_TENANT`]), and the tables'
//! policies admit that tenant's rows alone, so a statement that forgot its predicate still reads
//! nothing of another tenant. The only text substituted into SQL is the embedder's dimension in
//! the migration (`@DIMENSION@`, a validated integer from the configuration).

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
/// mode, $3 max scan tuples), once per pooled connection; and plans every execution of a
/// statement for its parameters (`force_custom_plan`: the reads reuse prepared statements, and
/// a generic plan would choose between the HNSW walk and the exact path without knowing the
/// scope).
pub const SESSION_SETTINGS: &str = "SELECT set_config('hnsw.ef_search', $1, false),
    set_config('hnsw.iterative_scan', $2, false),
    set_config('hnsw.max_scan_tuples', $3, false),
    set_config('plan_cache_mode', 'force_custom_plan', false)";

/// Enters a tenant for the rest of the transaction: $1 tenant. Row-level security (migration
/// 0007) then admits that tenant's rows alone. The function SET LOCALs `warrant.tenant` (quoted
/// by the server), which Citus propagates to the workers' shards, and with it the session's
/// pgvector settings ([`SESSION_SETTINGS`]), which Citus sends the workers no other way.
pub const ENTER_TENANT: &str = "SELECT warrant_enter_tenant($1)";

/// Enters the database-wide scope for the rest of the transaction: [`HIGHEST_EPOCH`] and
/// [`ANY_TENANT`] read `warrant_tenants` through it, [`REVIEW_TENANTS`] `review_tenants`, and
/// nothing else admits it (policies `database_reads`: SELECT on those two tables only,
/// migrations 0007 and 0008; tenant ids, epochs and counts, no document text).
pub const ENTER_DATABASE: &str = "SELECT warrant_enter_database()";

/// Whether the session's role escapes row-level security (a superuser, or BYPASSRLS): the
/// backend warns at start when it does.
pub const ROLE_BYPASSES_ROW_SECURITY: &str =
    "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user";

/// Vector search inside the scope: $1 tenant, $2 user, $3 groups, $4 query vector, $5 limit,
/// $6 the most chunks a scope may hold to be read exactly (`storage.postgres.exact_scan_chunks`).
/// Returns the chunk columns, the score, and whether the HNSW index was walked (`walked`,
/// column 12).
///
/// Two ways, one taken per query (the other's one-time filter is false):
/// - a small scope is read exactly, whatever the planner estimates: its readable documents
///   first, their chunks by key, every distance computed, the top $5 sorted (as
///   [`VECTOR_SEARCH_EXACT`]). The scope's size comes from the kept counts (`reach`): the
///   documents its readers are granted (`reader_documents`, summed: at least the scope) times
///   the tenant's chunks per document. Under a scope of 0.1 % of 100,000 chunks a walk (where
///   the planner takes it: forced in the measurement) kept 0.929 of the top 10 in 447 ms at the
///   median, where the exact read keeps all of them in 8 ms (a loaded 2-core machine;
///   BENCHMARKS.md "Sparse scopes");
/// - any other scope walks the HNSW index: with `hnsw.iterative_scan` the walk continues until
///   $5 rows pass the filter (pgvector 0.8) or `hnsw.max_scan_tuples` tuples were visited;
///   results may be slightly out of order (`relaxed_order`) and are sorted by the caller. A walk
///   that comes back short is answered by [`VECTOR_SEARCH_EXACT`] ([`crate::postgres`]).
pub const VECTOR_SEARCH: &str = "WITH reach AS MATERIALIZED (
        SELECT coalesce(sum(d.documents), 0)::float8 * greatest(t.lexical_chunks, 1)::float8
            / greatest(t.live_documents, 1)::float8 <= $6 AS small
        FROM warrant_tenants t
            LEFT JOIN reader_documents d ON d.tenant_id = t.tenant_id
                AND ((d.kind = 'u' AND d.name = $2) OR (d.kind = 'g' AND d.name = ANY($3::text[])))
        WHERE t.tenant_id = $1
        GROUP BY t.lexical_chunks, t.live_documents
    ), walked AS (
        SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal, c.start_char, c.end_char,
            c.title, c.body, (1 - (c.embedding <=> $4))::real AS score, c.sentence_vectors, c.layout, true AS walked
        FROM chunks c
        WHERE c.tenant_id = $1
          AND NOT coalesce((SELECT small FROM reach), true)
          AND EXISTS (SELECT 1 FROM document_readers r
            WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
              AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
        ORDER BY c.embedding <=> $4
        LIMIT $5
    ), exact AS (
        SELECT s.chunk_id, s.doc_id, s.version, s.chunk_ordinal, s.doc_ordinal, s.start_char, s.end_char,
            s.title, s.body, (1 - s.distance)::real AS score, s.sentence_vectors, s.layout, false AS walked
        FROM (SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal, c.start_char, c.end_char,
                c.title, c.body, c.embedding <=> $4 AS distance, c.sentence_vectors, c.layout
            FROM chunks c
            WHERE c.tenant_id = $1
              AND coalesce((SELECT small FROM reach), true)
              AND EXISTS (SELECT 1 FROM document_readers r
                WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
                  AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
            OFFSET 0) s
        ORDER BY s.distance, s.doc_id, s.version, s.chunk_ordinal
        LIMIT $5
    )
    SELECT * FROM walked
    UNION ALL
    SELECT * FROM exact";

/// The exact nearest chunks inside the scope, for a scope the HNSW walk of [`VECTOR_SEARCH`]
/// could not fill: $1 tenant, $2 user, $3 groups, $4 query vector, $5 limit. The iterative scan
/// stops after `hnsw.max_scan_tuples` tuples; under a scope larger than `exact_scan_chunks` but
/// sparse in a large tenant (30 chunks of a scope of 5,000 in 10 million are ~60,000 tuples
/// away) it stops with fewer than $5 rows, and the backend runs this statement instead
/// ([`crate::postgres`]). The `OFFSET 0` subquery computes every scoped chunk's distance (the
/// readable documents first, their chunks by key, when the scope is small) and keeps the planner
/// from ordering by the HNSW index; the top $5 are sorted by distance, ties by (document,
/// version, chunk).
pub const VECTOR_SEARCH_EXACT: &str = "SELECT s.chunk_id, s.doc_id, s.version, s.chunk_ordinal, s.doc_ordinal,
        s.start_char, s.end_char, s.title, s.body, (1 - s.distance)::real AS score, s.sentence_vectors, s.layout
    FROM (SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal, c.start_char, c.end_char,
            c.title, c.body, c.embedding <=> $4 AS distance, c.sentence_vectors, c.layout
        FROM chunks c
        WHERE c.tenant_id = $1
          AND EXISTS (SELECT 1 FROM document_readers r
            WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
              AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
        OFFSET 0) s
    ORDER BY s.distance, s.doc_id, s.version, s.chunk_ordinal
    LIMIT $5";

/// Lexical search inside the scope, ranked by BM25 (Robertson & Zaragoza 2009; k1 1.2, b 0.75,
/// tantivy's formula): $1 tenant, $2 user, $3 groups, $4 query text, $5 limit. Returns the
/// chunk columns, the score, and whether the top $5 came from the selective terms' chunks alone
/// (`pruned`, column 12).
///
/// The query's distinct lexemes (english configuration: stopwords dropped, Snowball stemming)
/// are looked up in `chunk_terms`, the postings table (schema version 4): one index-only range
/// scan per lexeme over (tenant, lexeme), each posting carrying its term frequency and its
/// chunk's analyzed length. The chunk count and average length are the tenant's
/// (`warrant_tenants.lexical_*`); a term's document frequency is counted inside the caller's
/// scope, so documents outside it move no score:
/// - a caller granted every live document of the tenant (`everything`: one of its readers'
///   `reader_documents` count equals `warrant_tenants.live_documents`; schema version 6) has the
///   tenant's frequencies, kept per lexeme in `lexeme_chunks`, and its readable documents are not
///   read;
/// - any other caller's postings are those whose document is among its readable documents (the
///   ACL, read once per query from `document_readers`, hashed), counted per lexeme (`scoped`).
///
/// Then MaxScore (Turtle & Flood 1995). Terms in more than a quarter of the tenant's chunks are
/// `common`, except the rarest term. A common term's score in a chunk is strictly below its
/// bound, idf x (k1 + 1) (the term frequency factor is below k1 + 1), and `reach.bound` sums
/// the common terms' bounds. The chunks holding a selective term get their selective terms'
/// score (`partial`); `reach.floor` is the $5-th best of those (0 with fewer), so the top $5
/// scores at least that much, and only chunks whose partial score plus the bound reaches the
/// floor (`near`) can be in it. Their common terms' postings are looked up by key when they are
/// few (`lookup`: chunks x common terms x 10 <= the common terms' postings), else the common
/// terms' postings are scanned and summed with the near chunks' partial scores in one aggregate
/// that keeps the groups holding a near chunk (no join or membership test whose plan would hang
/// on the planner's estimate of `near`); the best $5 are `candidates`. A chunk holding only common terms scores below the bound, so when the
/// bound is at most the $5-th candidate's score (`exact`) the candidates are the answer.
/// Otherwise every posting is scored (`scored`), as schema versions 4-5 did. Chunk rows (text)
/// are read for the top $5 only, and each is checked against the ACL once more on its way out.
/// Same hits and scores as [`LEXICAL_SEARCH_EXHAUSTIVE`] (tested, both ways, up to the
/// rounding of sums taken in another order); ties are broken by
/// (document, version, chunk) here. On SciFact BM25 scored nDCG@10 0.689 where `ts_rank` scored
/// 0.590 and the embedded engine's tantivy BM25 0.672 (BENCHMARKS.md, with the analyzer
/// differences that remain).
pub const LEXICAL_SEARCH: &str = "WITH q AS (
        SELECT DISTINCT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', $4))) AS lexeme
    ), totals AS MATERIALIZED (
        SELECT greatest(t.lexical_chunks, 1)::float8 AS chunks,
            greatest(t.lexical_tokens, 1)::float8 / greatest(t.lexical_chunks, 1)::float8 AS average_tokens,
            EXISTS (SELECT 1 FROM reader_documents d
                WHERE d.tenant_id = $1 AND d.documents = t.live_documents
                  AND ((d.kind = 'u' AND d.name = $2) OR (d.kind = 'g' AND d.name = ANY($3::text[])))) AS everything
        FROM warrant_tenants t WHERE t.tenant_id = $1
    ), readable AS MATERIALIZED (
        SELECT DISTINCT r.doc_id FROM document_readers r
        WHERE r.tenant_id = $1
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[])))
    ), scoped AS MATERIALIZED (
        SELECT p.lexeme, p.doc_id, p.version, p.chunk_ordinal, p.frequency::float8 AS frequency,
            p.tokens::float8 AS tokens
        FROM q JOIN chunk_terms p ON p.tenant_id = $1 AND p.lexeme = q.lexeme
            JOIN readable ON readable.doc_id = p.doc_id
        WHERE NOT (SELECT everything FROM totals)
    ), frequencies AS MATERIALIZED (
        SELECT l.lexeme, l.chunks::float8 AS documents
        FROM q JOIN lexeme_chunks l ON l.tenant_id = $1 AND l.lexeme = q.lexeme
        WHERE (SELECT everything FROM totals)
        UNION ALL
        SELECT lexeme, count(*)::float8 FROM scoped GROUP BY lexeme
    ), weights AS MATERIALIZED (
        SELECT f.lexeme, f.documents, i.idf,
            f.documents * 4 > totals.chunks AND i.idf < max(i.idf) OVER () AS common
        FROM frequencies f, totals,
            LATERAL (SELECT ln(1 + (totals.chunks - f.documents + 0.5) / (f.documents + 0.5)) AS idf) i
        WHERE f.documents > 0
    ), matches AS NOT MATERIALIZED (
        SELECT w.idf, w.common, p.doc_id, p.version, p.chunk_ordinal,
            p.frequency::float8 AS frequency, p.tokens::float8 AS tokens
        FROM weights w JOIN chunk_terms p ON p.tenant_id = $1 AND p.lexeme = w.lexeme
        WHERE (SELECT everything FROM totals)
        UNION ALL
        SELECT w.idf, w.common, s.doc_id, s.version, s.chunk_ordinal, s.frequency, s.tokens
        FROM weights w JOIN scoped s ON s.lexeme = w.lexeme
    ), postings AS NOT MATERIALIZED (
        SELECT m.common, m.doc_id, m.version, m.chunk_ordinal,
            m.idf * m.frequency * (1.2 + 1)
            / (m.frequency + 1.2 * (1 - 0.75 + 0.75 * m.tokens / totals.average_tokens)) AS score
        FROM matches m, totals
    ), partial AS MATERIALIZED (
        SELECT p.doc_id, p.version, p.chunk_ordinal, sum(p.score) AS score
        FROM postings p
        WHERE NOT p.common
        GROUP BY p.doc_id, p.version, p.chunk_ordinal
    ), reach AS MATERIALIZED (
        SELECT coalesce((SELECT sum(idf * (1.2 + 1)) FROM weights WHERE common), 0) AS bound,
            coalesce((SELECT min(best.score) FROM (SELECT score FROM partial ORDER BY score DESC LIMIT $5) best
                HAVING count(*) = $5), 0) AS floor
    ), near AS MATERIALIZED (
        SELECT p.doc_id, p.version, p.chunk_ordinal, p.score FROM partial p, reach
        WHERE p.score + reach.bound >= reach.floor
    ), lookup AS MATERIALIZED (
        SELECT (SELECT count(*) FROM near) * (SELECT count(*) FROM weights WHERE common) * 10
            <= coalesce((SELECT sum(documents) FROM weights WHERE common), 0) AS by_key
    ), candidates AS MATERIALIZED (
        SELECT parts.doc_id, parts.version, parts.chunk_ordinal, sum(parts.score) AS score FROM (
            SELECT n.doc_id, n.version, n.chunk_ordinal,
                n.score + coalesce((SELECT sum(w.idf * c.frequency * (1.2 + 1)
                        / (c.frequency + 1.2 * (1 - 0.75 + 0.75 * c.tokens / totals.average_tokens)))
                    FROM weights w JOIN chunk_terms c ON c.tenant_id = $1 AND c.lexeme = w.lexeme
                        AND c.doc_id = n.doc_id AND c.version = n.version AND c.chunk_ordinal = n.chunk_ordinal
                    WHERE w.common), 0) AS score, true AS near
            FROM near n, totals
            WHERE (SELECT by_key FROM lookup)
            UNION ALL
            SELECT n.doc_id, n.version, n.chunk_ordinal, n.score, true FROM near n WHERE NOT (SELECT by_key FROM lookup)
            UNION ALL
            SELECT p.doc_id, p.version, p.chunk_ordinal, p.score, false
            FROM postings p
            WHERE NOT (SELECT by_key FROM lookup) AND p.common
        ) parts
        GROUP BY parts.doc_id, parts.version, parts.chunk_ordinal
        HAVING bool_or(parts.near)
        ORDER BY score DESC, parts.doc_id, parts.version, parts.chunk_ordinal
        LIMIT $5
    ), exact AS MATERIALIZED (
        SELECT EXISTS (SELECT 1 FROM weights WHERE NOT common)
            AND (SELECT bound FROM reach)
                <= CASE WHEN (SELECT count(*) FROM candidates) < $5 THEN 0 ELSE (SELECT min(score) FROM candidates) END
            AS pruned
    ), scored AS (
        SELECT p.doc_id, p.version, p.chunk_ordinal, sum(p.score) AS score
        FROM postings p
        WHERE NOT (SELECT pruned FROM exact)
        GROUP BY p.doc_id, p.version, p.chunk_ordinal
        ORDER BY score DESC, p.doc_id, p.version, p.chunk_ordinal
        LIMIT $5
    ), scores AS (
        SELECT doc_id, version, chunk_ordinal, score FROM candidates WHERE (SELECT pruned FROM exact)
        UNION ALL
        SELECT doc_id, version, chunk_ordinal, score FROM scored
    )
    SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.title, c.body, s.score::real AS score, c.sentence_vectors, c.layout,
        (SELECT pruned FROM exact) AS pruned
    FROM scores s JOIN chunks c
        ON c.tenant_id = $1 AND c.doc_id = s.doc_id AND c.version = s.version AND c.chunk_ordinal = s.chunk_ordinal
    WHERE EXISTS (SELECT 1 FROM document_readers r
        WHERE r.tenant_id = $1 AND r.doc_id = c.doc_id
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
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
            c.title, c.body, c.sentence_vectors, c.layout, c.search_tokens, ts_filter(setweight(c.search, 'A', q.lexemes), '{a}') AS terms
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
        m.start_char, m.end_char, m.title, m.body, s.score::real AS score, m.sentence_vectors, m.layout
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
        coalesce((SELECT t.acl_epoch FROM warrant_tenants t WHERE t.tenant_id = $1), 0), c.sentence_vectors, c.layout
    FROM documents d
    JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.version = d.live_version
    JOIN chunks c ON c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id AND c.version = d.live_version
    WHERE d.tenant_id = $1 AND d.doc_id = $4
      AND EXISTS (SELECT 1 FROM document_readers r
        WHERE r.tenant_id = $1 AND r.doc_id = d.doc_id
          AND ((r.kind = 'u' AND r.name = $2) OR (r.kind = 'g' AND r.name = ANY($3::text[]))))
    ORDER BY c.start_char, c.chunk_ordinal";

/// The highest tenant epoch (readiness): database-wide, in a transaction that entered the
/// database ([`ENTER_DATABASE`]); reads `warrant_tenants` alone.
pub const HIGHEST_EPOCH: &str = "SELECT coalesce(max(acl_epoch), 0)::bigint FROM warrant_tenants";

/// Whether any tenant has written to the database (the demo corpus is loaded only into a
/// database nobody wrote to): database-wide, in a transaction that entered the database
/// ([`ENTER_DATABASE`]). A tenant row is created by its first committed write, and every write
/// but an empty batch writes a document, so this is "holds a document" (schema versions 1-6
/// asked `documents`, which the database-wide scope does not admit).
pub const ANY_TENANT: &str = "SELECT EXISTS (SELECT 1 FROM warrant_tenants)";

/// Creates the tenant row if absent: $1 tenant.
pub const TENANT_ENSURE: &str =
    "INSERT INTO warrant_tenants (tenant_id) VALUES ($1) ON CONFLICT (tenant_id) DO NOTHING";

/// Locks the tenant row (serializes the tenant's writes on every node): $1 tenant.
pub const TENANT_LOCK: &str = "SELECT acl_epoch FROM warrant_tenants WHERE tenant_id = $1 FOR UPDATE";

/// Reads the tenant's epoch without locking: $1 tenant.
pub const TENANT_EPOCH: &str = "SELECT acl_epoch FROM warrant_tenants WHERE tenant_id = $1";

/// Advances the tenant's epoch and applies the transaction's change to its BM25 totals (the
/// chunks [`CHUNK_INSERT`] and [`CHUNKS_DELETE`] returned) and to its live document count, once
/// at the end of every write transaction: $1 tenant, $2 new epoch, $3 chunks added (negative:
/// removed), $4 tokens added, $5 live documents added. One update of the tenant row per
/// transaction: updating it per chunk made loading SciFact 35 % slower per chunk (BENCHMARKS.md).
pub const TENANT_SET_EPOCH: &str = "UPDATE warrant_tenants SET acl_epoch = $2,
        lexical_chunks = lexical_chunks + $3, lexical_tokens = lexical_tokens + $4,
        live_documents = live_documents + $5
    WHERE tenant_id = $1";

/// Applies a write transaction's change to the documents each reader is granted (what the
/// reader statements returned, summed), once at its end: $1 tenant, $2 kinds ('g' or 'u'),
/// $3 names, $4 documents added (negative: removed). The rows are selected beside the tenant's
/// row (which the transaction's first statement created and locked) and take its `tenant_id`:
/// on Citus an `INSERT ... SELECT` from `unnest` alone is pulled to the coordinator, while one
/// from a co-located table filtered on the tenant is a single-shard router plan
/// (`citus::citus_every_tenant_statement_is_a_single_shard_router_plan`). The same holds for
/// [`LEXEME_COUNTS_ADD`] and [`READERS_INSERT`].
pub const READER_COUNTS_ADD: &str = "INSERT INTO reader_documents (tenant_id, kind, name, documents)
    SELECT t.tenant_id, change.kind::\"char\", change.name, change.documents
    FROM warrant_tenants t, unnest($2::text[], $3::text[], $4::bigint[]) AS change(kind, name, documents)
    WHERE t.tenant_id = $1
    ON CONFLICT (tenant_id, kind, name) DO UPDATE SET documents = reader_documents.documents + excluded.documents";

/// Applies a write transaction's change to the tenant's chunk count per lexeme (what
/// [`POSTINGS_INSERT`] and [`POSTINGS_DELETE`] returned, summed), once at its end: $1 tenant,
/// $2 lexemes, $3 chunks added (negative: removed).
pub const LEXEME_COUNTS_ADD: &str = "INSERT INTO lexeme_chunks (tenant_id, lexeme, chunks)
    SELECT t.tenant_id, change.lexeme, change.chunks
    FROM warrant_tenants t, unnest($2::text[], $3::bigint[]) AS change(lexeme, chunks)
    WHERE t.tenant_id = $1
    ON CONFLICT (tenant_id, lexeme) DO UPDATE SET chunks = lexeme_chunks.chunks + excluded.chunks";

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

/// Drops every posting of a document (before its chunks: [`CHUNKS_DELETE`]), returning how
/// many chunks held each lexeme, for the tenant's counts ([`LEXEME_COUNTS_ADD`]): $1 tenant,
/// $2 doc id.
pub const POSTINGS_DELETE: &str = "WITH deleted AS (
        DELETE FROM chunk_terms WHERE tenant_id = $1 AND doc_id = $2 RETURNING lexeme
    )
    SELECT lexeme, count(*) FROM deleted GROUP BY lexeme";

/// Drops every chunk of a document (the previous live version), returning each one's analyzed
/// length for the tenant's BM25 totals ([`TENANT_SET_EPOCH`]): $1 tenant, $2 doc id.
pub const CHUNKS_DELETE: &str = "DELETE FROM chunks WHERE tenant_id = $1 AND doc_id = $2 RETURNING search_tokens";

/// Inserts a chunk, returning its analyzed length for the tenant's BM25 totals
/// ([`TENANT_SET_EPOCH`]): $1 tenant, $2 doc id, $3 version, $4 chunk ordinal, $5 chunk id,
/// $6 doc ordinal, $7 start, $8 end, $9 title, $10 text, $11 embedding, $12 sentence vectors
/// (encoded, or NULL).
pub const CHUNK_INSERT: &str = "INSERT INTO chunks (tenant_id, doc_id, version, chunk_ordinal, chunk_id, doc_ordinal,
        start_char, end_char, title, body, embedding, sentence_vectors, layout)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
    RETURNING search_tokens";

/// Writes the postings of a document version's chunks (inserted just before, same transaction)
/// from their `search` vectors: $1 tenant, $2 doc id, $3 version. They go with their chunks
/// (`ON DELETE CASCADE`; the writes delete them first, [`POSTINGS_DELETE`]). Returns how many
/// chunks hold each lexeme, for the tenant's counts ([`LEXEME_COUNTS_ADD`]).
///
/// The target table has an alias its RETURNING names: Citus 13 deparses an unaliased
/// `INSERT ... SELECT ... RETURNING` on a table with row-level security as `RETURNING
/// chunk_terms.lexeme` against the shard `chunk_terms_102138`, which the worker refuses.
pub const POSTINGS_INSERT: &str = "WITH inserted AS (
        INSERT INTO chunk_terms AS p (tenant_id, lexeme, doc_id, version, chunk_ordinal, frequency, tokens)
        SELECT c.tenant_id, term.lexeme, c.doc_id, c.version, c.chunk_ordinal,
            coalesce(cardinality(term.positions), 1), c.search_tokens
        FROM chunks c, unnest(c.search) AS term
        WHERE c.tenant_id = $1 AND c.doc_id = $2 AND c.version = $3
        RETURNING p.lexeme
    )
    SELECT lexeme, count(*) FROM inserted GROUP BY lexeme";

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

/// Drops every reader of a document, returning each removed reader (kind, name) for the
/// readers' counts ([`READER_COUNTS_ADD`]): $1 tenant, $2 doc id.
pub const READERS_DELETE_ALL: &str =
    "DELETE FROM document_readers WHERE tenant_id = $1 AND doc_id = $2 RETURNING kind::text, name";

/// Removes readers of one kind, returning each removed one (kind, name): $1 tenant, $2 doc id,
/// $3 kind ('g' or 'u'), $4 names.
pub const READERS_DELETE: &str = "DELETE FROM document_readers
    WHERE tenant_id = $1 AND doc_id = $2 AND kind = $3::\"char\" AND name = ANY($4::text[])
    RETURNING kind::text, name";

/// Adds readers of one kind (existing ones are kept), returning each added one (kind, name):
/// $1 tenant, $2 doc id, $3 kind, $4 names.
pub const READERS_INSERT: &str = "INSERT INTO document_readers (tenant_id, doc_id, kind, name)
    SELECT t.tenant_id, $2, $3::\"char\", name FROM warrant_tenants t, unnest($4::text[]) AS name
    WHERE t.tenant_id = $1
    ON CONFLICT DO NOTHING
    RETURNING kind::text, name";

/// How many readers (users and groups together) a document has: $1 tenant, $2 doc id.
pub const READERS_COUNT: &str = "SELECT count(*) FROM document_readers WHERE tenant_id = $1 AND doc_id = $2";

/// The tenant's kept counts recounted ($1 tenant), each 0 when they agree: live documents kept
/// against counted; readers whose kept count disagrees with their reader rows; lexemes whose
/// kept count disagrees with their postings; reader rows of documents that are not live; chunks
/// of versions that are not live. The last two are the invariants that make a reader's count
/// equal to the live count mean "reads every chunk" ([`LEXICAL_SEARCH`]).
pub const COUNTS_CHECK: &str = "SELECT
        (SELECT t.live_documents FROM warrant_tenants t WHERE t.tenant_id = $1)
            - (SELECT count(*) FROM documents d WHERE d.tenant_id = $1 AND d.live_version IS NOT NULL),
        (SELECT count(*) FROM (SELECT kind, name, documents FROM reader_documents WHERE tenant_id = $1) k
            FULL JOIN (SELECT kind, name, count(*) AS documents FROM document_readers WHERE tenant_id = $1
                GROUP BY kind, name) r ON r.kind = k.kind AND r.name = k.name
            WHERE coalesce(k.documents, 0) <> coalesce(r.documents, 0)),
        (SELECT count(*) FROM (SELECT lexeme, chunks FROM lexeme_chunks WHERE tenant_id = $1) k
            FULL JOIN (SELECT lexeme, count(*) AS chunks FROM chunk_terms WHERE tenant_id = $1
                GROUP BY lexeme) p ON p.lexeme = k.lexeme
            WHERE coalesce(k.chunks, 0) <> coalesce(p.chunks, 0)),
        (SELECT count(*) FROM document_readers r JOIN documents d ON d.tenant_id = r.tenant_id AND d.doc_id = r.doc_id
            WHERE r.tenant_id = $1 AND d.live_version IS NULL),
        (SELECT count(*) FROM chunks c JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id
            WHERE c.tenant_id = $1 AND c.version IS DISTINCT FROM d.live_version)";

/// Appends to the change log: $1 tenant, $2 epoch, $3 position, $4 lineage (text uuid), $5 kind,
/// $6 doc id, $7 version, $8 groups, $9 users.
pub const CHANGE_INSERT: &str =
    "INSERT INTO acl_changes (tenant_id, epoch, position, lineage, kind, doc_id, version, groups, users)
    VALUES ($1, $2, $3, $4::text::uuid, $5, $6, $7, $8, $9)";

// ---- the review queue (migration 0008; src/review/, src/postgres/reviews.rs) ----

/// The live versions of the item's documents, share-locking their heads until the insert
/// commits (a delete or upsert of one of them waits, and its purge then sees the texts written):
/// $1 tenant, $2 doc ids.
pub const REVIEW_LIVE_VERSIONS: &str = "SELECT doc_id, live_version FROM documents
    WHERE tenant_id = $1 AND doc_id = ANY($2::text[]) AND live_version IS NOT NULL
    FOR SHARE";

/// The tenant's next sequence, counting the item in: $1 tenant. Locks the row to the commit.
pub const REVIEW_NEXT_SEQ: &str = "INSERT INTO review_tenants (tenant_id, last_seq, items) VALUES ($1, 1, 1)
    ON CONFLICT (tenant_id) DO UPDATE SET last_seq = review_tenants.last_seq + 1, items = review_tenants.items + 1
    RETURNING last_seq, items";

/// Stores an item: $1 tenant, $2 seq, $3 review id (text uuid), $4 created ms, $5 item,
/// $6 generated text (NULL when a source was not live).
pub const REVIEW_INSERT: &str = "INSERT INTO review_items (tenant_id, seq, review_id, created_ms, item, generated)
    VALUES ($1, $2, $3::text::uuid, $4, $5, $6)";

/// Stores one document version's source texts of an item: $1 tenant, $2 doc id, $3 version,
/// $4 seq, $5 texts.
pub const REVIEW_SOURCE_INSERT: &str = "INSERT INTO review_sources (tenant_id, doc_id, doc_version, seq, texts)
    VALUES ($1, $2, $3, $4, $5)";

/// Deletes the tenant's $2 oldest items (their sources and verdicts cascade): $1 tenant.
pub const REVIEW_EVICT: &str = "DELETE FROM review_items WHERE tenant_id = $1
    AND seq IN (SELECT seq FROM review_items WHERE tenant_id = $1 ORDER BY seq LIMIT $2)
    RETURNING seq";

/// Counts $2 items out of the tenant's: $1 tenant.
pub const REVIEW_COUNT_OUT: &str = "UPDATE review_tenants SET items = greatest(items - $2, 0) WHERE tenant_id = $1";

/// A page, newest first: $1 tenant, $2 below this seq, $3 reviewed (NULL: both), $4 limit.
pub const REVIEW_PAGE: &str = "SELECT i.seq, i.item,
        (SELECT count(*) FROM review_verdicts v WHERE v.tenant_id = $1 AND v.seq = i.seq)
    FROM review_items i
    WHERE i.tenant_id = $1 AND i.seq < $2 AND ($3::boolean IS NULL OR i.reviewed = $3)
    ORDER BY i.seq DESC LIMIT $4";

/// One item by id: $1 tenant, $2 review id (text uuid).
pub const REVIEW_GET: &str =
    "SELECT seq, item, generated FROM review_items WHERE tenant_id = $1 AND review_id = $2::text::uuid";

/// An item's stored source texts: $1 tenant, $2 seq.
pub const REVIEW_GET_SOURCES: &str = "SELECT doc_id, texts FROM review_sources WHERE tenant_id = $1 AND seq = $2";

/// An item's verdicts, oldest first: $1 tenant, $2 seq.
pub const REVIEW_GET_VERDICTS: &str =
    "SELECT verdict FROM review_verdicts WHERE tenant_id = $1 AND seq = $2 ORDER BY number";

/// Marks an item reviewed, locking it to the commit (verdicts on it are numbered one at a time):
/// $1 tenant, $2 review id (text uuid).
pub const REVIEW_MARK_REVIEWED: &str =
    "UPDATE review_items SET reviewed = true WHERE tenant_id = $1 AND review_id = $2::text::uuid RETURNING seq";

/// The last verdict number of an item: $1 tenant, $2 seq.
pub const REVIEW_LAST_VERDICT: &str =
    "SELECT coalesce(max(number), 0) FROM review_verdicts WHERE tenant_id = $1 AND seq = $2";

/// Appends a verdict: $1 tenant, $2 seq, $3 number, $4 verdict.
pub const REVIEW_VERDICT_INSERT: &str =
    "INSERT INTO review_verdicts (tenant_id, seq, number, verdict) VALUES ($1, $2, $3, $4)";

/// Deletes the stored texts of documents $2 whose version is not live: $1 tenant.
pub const REVIEW_PURGE: &str = "DELETE FROM review_sources s WHERE s.tenant_id = $1 AND s.doc_id = ANY($2::text[])
    AND NOT EXISTS (SELECT 1 FROM documents d
        WHERE d.tenant_id = $1 AND d.doc_id = s.doc_id AND d.live_version = s.doc_version)
    RETURNING s.seq";

/// Deletes every stored text of the tenant whose version is not live (the sweep): $1 tenant.
pub const REVIEW_SWEEP: &str = "DELETE FROM review_sources s WHERE s.tenant_id = $1
    AND NOT EXISTS (SELECT 1 FROM documents d
        WHERE d.tenant_id = $1 AND d.doc_id = s.doc_id AND d.live_version = s.doc_version)
    RETURNING s.seq";

/// Drops the generated text of items $2: $1 tenant.
pub const REVIEW_DROP_GENERATED: &str = "UPDATE review_items SET generated = NULL WHERE tenant_id = $1 AND seq = ANY($2::bigint[]) AND generated IS NOT NULL";

/// Deletes the tenant's items created before $2 ms: $1 tenant.
pub const REVIEW_EXPIRE: &str = "DELETE FROM review_items WHERE tenant_id = $1 AND created_ms < $2 RETURNING seq";

/// The tenants holding review items (database-wide, in the scope of [`ENTER_DATABASE`]: the
/// retention sweep visits each).
pub const REVIEW_TENANTS: &str = "SELECT tenant_id FROM review_tenants WHERE items > 0 OR last_seq > 0";

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
        (VECTOR_SEARCH_EXACT, Search),
        (LEXICAL_SEARCH, Search),
        (LEXICAL_SEARCH_EXHAUSTIVE, Search),
        (POSTINGS_INSERT, Nothing),
        (POSTINGS_DELETE, Nothing),
        (POSTINGS_CHECK, Nothing),
        (COUNTS_CHECK, Nothing),
        (READER_COUNTS_ADD, Nothing),
        (LEXEME_COUNTS_ADD, Nothing),
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
        (READERS_COUNT, Nothing),
        (CHANGE_INSERT, Nothing),
        (LEXICAL_TOTALS, Nothing),
        (LEXICAL_TOTALS_RECOUNTED, Nothing),
        (REVIEW_LIVE_VERSIONS, Nothing),
        (REVIEW_NEXT_SEQ, Nothing),
        (REVIEW_INSERT, Nothing),
        (REVIEW_SOURCE_INSERT, Nothing),
        (REVIEW_EVICT, Nothing),
        (REVIEW_COUNT_OUT, Nothing),
        (REVIEW_PAGE, Nothing),
        (REVIEW_GET, Nothing),
        (REVIEW_GET_SOURCES, Nothing),
        (REVIEW_GET_VERDICTS, Nothing),
        (REVIEW_MARK_REVIEWED, Nothing),
        (REVIEW_LAST_VERDICT, Nothing),
        (REVIEW_VERDICT_INSERT, Nothing),
        (REVIEW_PURGE, Nothing),
        (REVIEW_SWEEP, Nothing),
        (REVIEW_DROP_GENERATED, Nothing),
        (REVIEW_EXPIRE, Nothing),
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
        let at = |text: &str| LEXICAL_SEARCH.find(text).unwrap_or_else(|| panic!("{text}"));
        // A caller's postings are filtered by its readable documents before any statistic is
        // counted over them, unless it reads every live document of the tenant.
        assert!(at("readable AS MATERIALIZED") < at("scoped AS MATERIALIZED"));
        assert!(LEXICAL_SEARCH.contains("JOIN readable ON readable.doc_id = p.doc_id"), "postings inside the scope");
        assert!(LEXICAL_SEARCH.contains("SELECT lexeme, count(*)::float8 FROM scoped GROUP BY lexeme"));
        assert!(LEXICAL_SEARCH.contains("d.documents = t.live_documents"), "the tenant's counts only for all of it");
        assert!(at("scoped AS MATERIALIZED") < at("frequencies AS MATERIALIZED"));
        // The shortcut is exact only if the common terms' bounds cannot reach the k-th score.
        assert!(LEXICAL_SEARCH.contains("SELECT sum(idf * (1.2 + 1)) FROM weights WHERE common"));
        assert!(LEXICAL_SEARCH.contains("WHERE p.score + reach.bound >= reach.floor"));
        assert!(LEXICAL_SEARCH.contains("WHERE NOT (SELECT pruned FROM exact)"));
        // Chunk rows are read for the top $5 only, each checked against the ACL.
        assert!(at("LIMIT $5") < at("JOIN chunks c"));
        assert!(at("JOIN chunks c") < at("EXISTS (SELECT 1 FROM document_readers r"));
        for statement in [LEXICAL_SEARCH, LEXICAL_SEARCH_EXHAUSTIVE] {
            // k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
            assert!(statement.contains("(1.2 + 1)") && statement.contains("1.2 * (1 - 0.75 + 0.75 *"));
            assert!(statement.contains("ln(1 + (totals.chunks - "));
            assert!(statement.contains("to_tsvector('english', $4)"), "the query is analyzed like the chunks");
        }
        let matched = LEXICAL_SEARCH_EXHAUSTIVE.find("matched AS MATERIALIZED").expect("candidate set");
        let acl = LEXICAL_SEARCH_EXHAUSTIVE.find("EXISTS (SELECT 1 FROM document_readers r").expect("acl");
        assert!(matched < acl && acl < LEXICAL_SEARCH_EXHAUSTIVE.find("frequencies AS").expect("frequencies"));
    }

    #[test]
    fn every_write_returns_what_the_kept_counts_need() {
        for statement in [READERS_INSERT, READERS_DELETE, READERS_DELETE_ALL] {
            assert!(statement.ends_with("RETURNING kind::text, name"), "{statement}");
        }
        for statement in [POSTINGS_INSERT, POSTINGS_DELETE] {
            assert!(
                statement.ends_with("SELECT lexeme, count(*) FROM inserted GROUP BY lexeme")
                    || statement.ends_with("SELECT lexeme, count(*) FROM deleted GROUP BY lexeme"),
                "{statement}"
            );
        }
        assert!(TENANT_SET_EPOCH.contains("live_documents = live_documents + $5"));
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
