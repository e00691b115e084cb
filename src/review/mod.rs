//! Answers people can audit (issue 47): the routing policy that sends answers to human review,
//! the bounded queue in front of a durable review store on either backend, and what a reviewer
//! may read and write. Here is an answer the server gave; keep what it was made of, so that a
//! person can judge it later under their own access.
//!
//! - [`policy`]: which answers are queued (abstentions by reason, partial answers, a seeded
//!   sample of answered ones); a pure decision.
//! - [`queue`]: a bounded channel to one writer task. Queueing never waits and never fails the
//!   answer: a full or closed queue, or a failed write, drops the item and counts it
//!   (`warrant_reviews_dropped_total{reason}`), logged without content. The writer also expires
//!   items and sweeps texts of documents that are no longer live.
//! - [`ReviewStore`]: the durable store, one trait for both backends: a redb file beside the
//!   embedded store ([`embedded`]) and tables of the PostgreSQL database
//!   (`crate::postgres`, migration `0008_reviews.sql`).
//! - [`view`]: an item as one reviewer may see it, now: each source under the reviewer's own
//!   current access ([`ReadSide::authorization`](crate::retrieval::ReadSide::authorization)),
//!   and what the generator wrote only when the reviewer may read every source it was written
//!   from. The views carry their OpenAPI schema: they exist only to be sent.
//! - [`judge`]: the verdicts a reviewer may write, checked against what that reviewer sees.
//! - [`PurgeOnDelete`]: the write side that purges a deleted document's text from stored items.
//! - [`export`]: reviewed items as answer fixtures (`warrant review export-fixtures`); and
//!   [`reviewed_items`], what the offline tools read (`warrant eval reviews` too).
//!
//! Invariants:
//! - an item is keyed by its tenant: no read or write names an item of another tenant (another
//!   tenant's review id is not found, like a missing one);
//! - an item's review id is in the answer before the item is written; an item whose write
//!   failed, or that was still queued when the process died, is never found (the id names
//!   nothing) — `queued: true` means handed to the writer, not stored;
//! - no stored text of a deleted document outlives its deletion's acknowledgement on this node
//!   (the delete purges it; a write racing the delete checks the document is live under the
//!   same lock or row lock the purge takes; a purge lost to a crash is redone by the next sweep);
//! - pages are ordered by a per-tenant sequence assigned when an item is written, so a cursor
//!   (the last sequence seen) gives no duplicate and skips nothing written before the first page
//!   was read, however many items are written meanwhile.

pub mod embedded;
pub mod export;
pub mod item;
pub mod judge;
pub mod policy;
mod purge;
pub mod queue;
pub mod view;

use async_trait::async_trait;

pub use item::{
    AbstentionLabel, ClaimLabel, GeneratedText, NewItem, ReviewItem, ReviewStatus, Route, StoredItem, Summary, Verdict,
};
pub use policy::RoutingPolicy;
pub use purge::PurgeOnDelete;
pub use queue::{QueueSettings, ReviewQueue};

/// Errors of the review layer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No such item in the caller's tenant (also: an item of another tenant, a malformed id).
    #[error("no such review item")]
    NotFound,
    /// A verdict names a label that does not exist.
    #[error("unknown verdict {0:?}")]
    UnknownVerdict(String),
    /// A claim verdict names a claim the item does not have.
    #[error("claim index {index} is out of range: the item has {claims} claims")]
    ClaimOutOfRange {
        /// The index given.
        index: u64,
        /// Claims of the item.
        claims: usize,
    },
    /// One verdict judges a claim twice.
    #[error("claim {0} is judged twice in one verdict")]
    DuplicateClaim(u64),
    /// An abstention verdict on an item that did not abstain.
    #[error("the item did not abstain: there is no abstention to judge")]
    NoAbstention,
    /// A verdict that judges nothing.
    #[error("a verdict judges at least one claim or the abstention")]
    EmptyVerdict,
    /// A note over `review.max_note_chars`.
    #[error("the note is longer than {0} characters")]
    NoteTooLong(usize),
    /// A named document id that no document could have.
    #[error("doc_id must be 1..={0} characters")]
    InvalidDocId(usize),
    /// Claims judged by a reviewer who may not read every source they were written from.
    #[error("the claims of this item were written from sources you may not read")]
    NotReadable,
    /// The item holds `review.max_verdicts_per_item` verdicts already.
    #[error("the item holds {0} verdicts, the most it may (review.max_verdicts_per_item)")]
    TooManyVerdicts(u32),
    /// A cursor this server did not hand out.
    #[error("the cursor is not one this server returned")]
    InvalidCursor,
    /// The review store failed (details are logged, never returned).
    #[error("review store: {0}")]
    Storage(String),
    /// The review store holds bytes it cannot read.
    #[error("review store holds a corrupted item: {0}")]
    Corrupted(String),
    /// Asking the backend what the reviewer may read failed.
    #[error(transparent)]
    Retrieval(#[from] crate::retrieval::RetrievalError),
}

impl ReviewError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "review_not_found",
            Self::UnknownVerdict(_) => "unknown_verdict",
            Self::ClaimOutOfRange { .. } => "claim_out_of_range",
            Self::DuplicateClaim(_) => "duplicate_claim_verdict",
            Self::NoAbstention => "no_abstention",
            Self::EmptyVerdict => "empty_verdict",
            Self::NoteTooLong(_) => "note_too_long",
            Self::InvalidDocId(_) => "invalid_doc_id",
            Self::NotReadable => "claims_not_readable",
            Self::InvalidCursor => "invalid_cursor",
            Self::TooManyVerdicts(_) => "too_many_verdicts",
            Self::Storage(_) | Self::Corrupted(_) => "reviews_unavailable",
            Self::Retrieval(error) => error.code(),
        }
    }
}

/// Result alias of this layer.
pub type ReviewResult<T> = Result<T, ReviewError>;

/// What one insert did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inserted {
    /// Items written.
    pub written: usize,
    /// Older items deleted to keep each tenant within `review.max_items_per_tenant`.
    pub evicted: u64,
}

/// The durable review store of a backend. Every method but the sweeps acts inside one tenant.
#[async_trait]
pub trait ReviewStore: Send + Sync {
    /// Writes `items` (in order: each gets the next sequence of its tenant), then deletes the
    /// oldest items of each tenant beyond `max_items_per_tenant`. Source texts of a document that
    /// is not live when the item is written are left out, and so is the generated text of an
    /// item with such a source (a delete racing this write never leaves its text behind).
    async fn insert(&self, items: Vec<NewItem>, max_items_per_tenant: u64) -> ReviewResult<Inserted>;
    /// Up to `limit` items of `tenant`, newest first, with a sequence below `before` (all when
    /// `None`), only those of `status` when given.
    async fn page(
        &self,
        tenant: &str,
        status: Option<ReviewStatus>,
        before: Option<u64>,
        limit: usize,
    ) -> ReviewResult<Vec<Summary>>;
    /// The item `review_id` of `tenant` (a canonical UUID), with its texts and verdicts.
    async fn get(&self, tenant: &str, review_id: &str) -> ReviewResult<Option<StoredItem>>;
    /// Appends `verdict` to the item; `false` when there is no such item (it expired meanwhile),
    /// [`ReviewError::TooManyVerdicts`] when it holds `max_verdicts` already (checked in the
    /// write's transaction, so concurrent verdicts cannot pass it).
    async fn add_verdict(
        &self,
        tenant: &str,
        review_id: &str,
        verdict: &Verdict,
        max_verdicts: u32,
    ) -> ReviewResult<bool>;
    /// Deletes every stored text of the documents `doc_ids` of `tenant` whose version is not
    /// live now (all of a deleted document's, a superseded version's), and the generated text of
    /// every item that had such a version in its context; returns the items touched. Cheap when
    /// there is nothing to purge (every upsert asks).
    async fn purge_documents(&self, tenant: &str, doc_ids: &[String]) -> ReviewResult<u64>;
    /// Deletes every item created before `cutoff_ms`; returns how many.
    async fn expire(&self, cutoff_ms: u64) -> ReviewResult<u64>;
    /// [`ReviewStore::purge_documents`] for every stored document version that is no longer live
    /// (a purge a crash lost, or a delete a replica applied); returns the items touched.
    async fn sweep_dead_documents(&self) -> ReviewResult<u64>;
    /// The tenants that have held items, in order (what the offline tools walk: `warrant eval
    /// reviews`, `warrant review export-fixtures`).
    async fn tenants(&self) -> ReviewResult<Vec<String>>;
}

/// Pages read at a time by [`reviewed_items`].
const REVIEWED_PAGE: usize = 200;

/// Every reviewed item of `store` (of `tenant` only, when given) created at or after
/// `since_ms`, with its tenant, oldest first within a tenant. For the offline tools; reads every
/// such item whole.
pub async fn reviewed_items(
    store: &dyn ReviewStore,
    tenant: Option<&str>,
    since_ms: u64,
) -> ReviewResult<Vec<(String, StoredItem)>> {
    let tenants = match tenant {
        Some(tenant) => vec![tenant.to_owned()],
        None => store.tenants().await?,
    };
    let mut reviewed = Vec::new();
    for tenant in tenants {
        let mut of_tenant = Vec::new();
        let mut before = None;
        loop {
            let page = store.page(&tenant, Some(ReviewStatus::Reviewed), before, REVIEWED_PAGE).await?;
            let Some(last) = page.last() else { break };
            before = Some(last.seq);
            let full = page.len() == REVIEWED_PAGE;
            for summary in page.into_iter().filter(|summary| summary.item.created_ms >= since_ms) {
                // An item expired between the page and the read is skipped.
                if let Some(stored) = store.get(&tenant, &summary.item.review_id).await? {
                    of_tenant.push((tenant.clone(), stored));
                }
            }
            if !full {
                break;
            }
        }
        of_tenant.reverse();
        reviewed.extend(of_tenant);
    }
    Ok(reviewed)
}

/// What the answer pipeline routes finished answers with: the policy and the queue.
pub struct Router {
    policy: RoutingPolicy,
    queue: ReviewQueue,
}

impl Router {
    /// Routes by `policy` into `queue`.
    pub fn new(policy: RoutingPolicy, queue: ReviewQueue) -> Self {
        Self { policy, queue }
    }

    /// The policy.
    pub fn policy(&self) -> &RoutingPolicy {
        &self.policy
    }

    /// The queue.
    pub fn queue(&self) -> &ReviewQueue {
        &self.queue
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh review id.
pub fn new_review_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The canonical form of a review id given by a client (lowercase hyphenated UUID), or `None`.
pub fn canonical_review_id(text: &str) -> Option<String> {
    uuid::Uuid::parse_str(text).ok().map(|id| id.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    /// Every abstention reason the pipeline can give is one `review.abstentions` may name (the
    /// match has no wildcard: a new reason does not compile until it is listed).
    #[test]
    fn every_abstention_reason_can_be_routed() {
        use crate::answer::grounding::validate::AbstentionReason as Reason;
        let every = |reason: Reason| match reason {
            Reason::NoAuthorizedEvidence
            | Reason::InsufficientEvidence
            | Reason::InvalidOutput
            | Reason::UnsupportedCitation
            | Reason::MissingCitation
            | Reason::SourceRevoked
            | Reason::GeneratorTimeout
            | Reason::GeneratorError
            | Reason::ContextOverflow
            | Reason::DeadlineExceeded
            | Reason::MaterialClaimUnsupported => reason.as_str(),
        };
        let reasons = [
            Reason::NoAuthorizedEvidence,
            Reason::InsufficientEvidence,
            Reason::InvalidOutput,
            Reason::UnsupportedCitation,
            Reason::MissingCitation,
            Reason::SourceRevoked,
            Reason::GeneratorTimeout,
            Reason::GeneratorError,
            Reason::ContextOverflow,
            Reason::DeadlineExceeded,
            Reason::MaterialClaimUnsupported,
        ];
        assert_eq!(reasons.len(), crate::config::ABSTENTION_REASONS.len());
        for reason in reasons {
            assert!(crate::config::ABSTENTION_REASONS.contains(&every(reason)), "{reason:?}");
        }
        for default in crate::config::ReviewSettings::default().abstentions {
            assert!(crate::config::ABSTENTION_REASONS.contains(&default.as_str()), "{default}");
        }
    }

    #[test]
    fn review_ids_are_canonical_uuids() {
        let id = super::new_review_id();
        assert_eq!(super::canonical_review_id(&id).as_deref(), Some(id.as_str()));
        assert_eq!(super::canonical_review_id(&id.to_uppercase()).as_deref(), Some(id.as_str()));
        for bad in ["", "abc", "../etc", "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6"] {
            assert_eq!(super::canonical_review_id(bad), None, "{bad}");
        }
    }
}
