//! Authorization state: immutable ACL snapshots over dense document ordinals (roaring bitmaps),
//! the per-request [`AuthorizationScope`], and the append-only change log that replicas follow.
//!
//! Invariants kept by this module:
//! - a snapshot is never mutated after it is published; every change builds a new snapshot with
//!   `epoch + 1` and publishes it with one `ArcSwap::store`, so a reader that `load`s once per
//!   request sees one consistent state;
//! - a scope only ever contains live (not deleted, not superseded) ordinals of the principal's
//!   own tenant: `allowed = (user ∪ groups) ∩ tenant_docs − tombstones`;
//! - a batch of mutations is validated as a whole before anything is published (all or nothing).
//!
//! Pure data structures: no IO.

mod scope;
mod snapshot;
mod store;

pub use scope::AuthorizationScope;
pub use snapshot::{AclSnapshot, DocEntry};
pub use store::{AclChange, AclMutation, AclStore, Prepared, new_lineage, normalized};

/// Errors of the authorization layer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AclError {
    /// The document does not exist in the tenant.
    #[error("document {doc_id} not found")]
    UnknownDocument {
        /// The missing document id.
        doc_id: String,
    },
    /// The supplied version is not newer than the stored one.
    #[error("document {doc_id} already has version {current}; a new version must be greater")]
    StaleVersion {
        /// The document id.
        doc_id: String,
        /// Its current version.
        current: u64,
    },
    /// The same document appears twice in one batch.
    #[error("document {doc_id} appears more than once in the batch")]
    DuplicateDocument {
        /// The repeated document id.
        doc_id: String,
    },
    /// A counter would overflow (refused; nothing changes).
    #[error("{what} are exhausted")]
    Exhausted {
        /// Which counter.
        what: &'static str,
    },
    /// Changes the caller asked for were compacted into a checkpoint.
    #[error(
        "changes since epoch {since} were compacted (the log starts after epoch {floor}); re-bootstrap from a snapshot"
    )]
    Compacted {
        /// Requested epoch.
        since: u64,
        /// The log holds every change above this epoch.
        floor: u64,
    },
    /// A remote change arrived out of epoch order.
    #[error("change of epoch {epoch} arrived out of order")]
    OutOfOrder {
        /// Its epoch.
        epoch: u64,
    },
    /// Another change was published between preparing and publishing this one.
    #[error("the acl state changed while the change was prepared")]
    Conflict,
    /// A document's access list, or one change, would name more users and groups than allowed.
    #[error("{what} may name at most {limit} users and groups together")]
    TooLarge {
        /// `the access list of document <id>` or `one change`.
        what: String,
        /// The configured cap.
        limit: usize,
    },
}

impl AclError {
    /// Transport-neutral error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownDocument { .. } => "document_not_found",
            Self::StaleVersion { .. } => "stale_version",
            Self::DuplicateDocument { .. } => "duplicate_document",
            Self::Exhausted { .. } => "counter_exhausted",
            Self::Compacted { .. } => "changes_compacted",
            Self::OutOfOrder { .. } => "out_of_order",
            Self::Conflict => "conflict",
            Self::TooLarge { .. } => "acl_too_large",
        }
    }
}

/// Result alias of this layer.
pub type AclResult<T> = Result<T, AclError>;
