//! The write transactions' statements: the tenant lock, documents, versions, chunks, postings,
//! readers, the kept counts and the change log, and the checks that recount them (invariants:
//! [`super`]).

#[allow(unused_imports, reason = "the statements' doc links name their siblings")]
use super::*;

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
