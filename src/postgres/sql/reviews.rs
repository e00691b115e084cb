//! The review queue's statements (migration 0008; `src/review/`, `src/postgres/reviews.rs`;
//! invariants: [`super`]).

#[allow(unused_imports, reason = "the statements' doc links name their siblings")]
use super::*;

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
