//! The read statements: the two retrievals (and their reference and exact forms), the
//! document reads of the answer pipeline, and the database-wide reads (invariants: [`super`]).

#[allow(unused_imports, reason = "the statements' doc links name their siblings")]
use super::*;

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
