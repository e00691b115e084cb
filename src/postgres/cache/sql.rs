//! The statements of the tenant cache: what a load and a catch-up read, each inside one
//! REPEATABLE READ, read-only transaction that first entered the tenant
//! ([`super::super::sql::ENTER_TENANT`]), so row-level security admits that tenant's rows alone
//! and every statement of one load or catch-up sees the same committed state.
//!
//! Invariants (as [`super::super::sql`]'s): every statement is a constant with bind parameters,
//! filters on `tenant_id = $1` (the Citus distribution column: a single-shard router plan) and
//! reads rows of that tenant only.

/// The tenant's epoch, the commit time of the change that made it (the fingerprint of the
/// history the state was built from: a database restored to another history at the same epoch
/// is told apart by it) and its kept BM25 totals (chunks, analyzed tokens: the size estimate
/// before anything is read): $1 tenant. No row: the tenant was never written.
pub const TENANT_STATE: &str = "SELECT t.acl_epoch,
        (SELECT max(c.committed_at)::text FROM acl_changes c WHERE c.tenant_id = $1 AND c.epoch = t.acl_epoch),
        t.lexical_chunks, t.lexical_tokens
    FROM warrant_tenants t WHERE t.tenant_id = $1";

/// The live documents of the tenant with their version, ordinal, title and readers (groups,
/// users): $1 tenant.
pub const LIVE_DOCUMENTS: &str = "SELECT d.doc_id, v.version, v.doc_ordinal, v.title,
        coalesce(array_agg(r.name ORDER BY r.name) FILTER (WHERE r.kind = 'g'), '{}'::text[]),
        coalesce(array_agg(r.name ORDER BY r.name) FILTER (WHERE r.kind = 'u'), '{}'::text[])
    FROM documents d
    JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.version = d.live_version
    LEFT JOIN document_readers r ON r.tenant_id = d.tenant_id AND r.doc_id = d.doc_id
    WHERE d.tenant_id = $1 AND d.live_version IS NOT NULL
    GROUP BY d.doc_id, v.version, v.doc_ordinal, v.title";

/// Every chunk of the tenant (only live versions have chunks) with its embedding: $1 tenant.
/// Columns as [`VERSION_CHUNKS`].
pub const TENANT_CHUNKS: &str = "SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.title, c.body, c.embedding, c.sentence_vectors, c.layout
    FROM chunks c
    WHERE c.tenant_id = $1";

/// The chunks of some document versions with their embeddings: $1 tenant, $2 doc ids, $3
/// versions (pairwise). A version superseded or deleted since has none.
pub const VERSION_CHUNKS: &str = "SELECT c.chunk_id, c.doc_id, c.version, c.chunk_ordinal, c.doc_ordinal,
        c.start_char, c.end_char, c.title, c.body, c.embedding, c.sentence_vectors, c.layout
    FROM unnest($2::text[], $3::bigint[]) AS w(doc_id, version)
    JOIN chunks c ON c.tenant_id = $1 AND c.doc_id = w.doc_id AND c.version = w.version";

/// The tenant's change log from epoch $2 on, in order, with each upserted version's ordinal and
/// title and each change's commit time: $1 tenant, $2 first epoch.
pub const CHANGES_SINCE: &str = "SELECT c.epoch, c.position, c.kind, c.doc_id, c.version,
        coalesce(c.groups, '{}'::text[]), coalesce(c.users, '{}'::text[]), v.doc_ordinal, v.title,
        c.committed_at::text, c.lineage::text
    FROM acl_changes c
    LEFT JOIN document_versions v ON v.tenant_id = c.tenant_id AND v.doc_id = c.doc_id AND v.version = c.version
        AND c.kind = 'upsert'
    WHERE c.tenant_id = $1 AND c.epoch >= $2
    ORDER BY c.epoch, c.position";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_statement_is_bound_to_its_tenant_and_has_no_placeholder() {
        for statement in [TENANT_STATE, LIVE_DOCUMENTS, TENANT_CHUNKS, VERSION_CHUNKS, CHANGES_SINCE] {
            assert!(statement.contains("tenant_id = $1"), "not bound to the tenant: {statement}");
            for marker in ["@DIMENSION@", "%s"] {
                assert!(!statement.contains(marker), "{marker} in {statement}");
            }
            assert!(!statement.contains("FOR UPDATE") && !statement.contains("INSERT"), "read only: {statement}");
        }
    }
}
