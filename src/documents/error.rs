//! The one error of the write path: every refusal of [`super::Documents`] and every failure of the
//! backend's write side beneath it, each with a transport-neutral `code()` (the HTTP status is
//! chosen in `crate::http::error`, in one exhaustive match).

use crate::acl::AclError;
use crate::extract::ExtractError;
use crate::retrieval::RetrievalError;

/// Why a write was refused or failed. Every refusal is raised before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum DocumentsError {
    /// This server is a replica: its state comes only from its primary.
    #[error("this server is a read-only replica; send writes to the primary")]
    ReadOnly,
    /// An upsert of no documents.
    #[error("documents must not be empty")]
    EmptyBatch,
    /// An upsert of more documents than `server.max_batch_documents`.
    #[error("at most {max} documents per request")]
    BatchTooLarge {
        /// The configured cap.
        max: usize,
    },
    /// A grant that names nobody.
    #[error("grant needs groups or users")]
    EmptyGrant,
    /// A revoke whose lists are given but empty (it would revoke nothing).
    #[error("revoke lists are empty; name groups or users, or omit both lists to revoke all access")]
    EmptyRevoke,
    /// An access-list name that is blank or longer than 256 characters.
    #[error("acl names must be 1..=256 characters")]
    InvalidAclName,
    /// A file larger than `server.max_file_bytes`.
    #[error("file {file:?} is larger than {limit} bytes (server.max_file_bytes)")]
    FileTooLarge {
        /// The file (a document id or a file name, at most 256 characters).
        file: String,
        /// The configured cap.
        limit: usize,
    },
    /// A file whose text cannot be extracted (never [`ExtractError::Busy`]: a busy extraction
    /// is [`DocumentsError::Overloaded`]).
    #[error("file {file:?}: {error}")]
    Extraction {
        /// The file (a document id or a file name, at most 256 characters).
        file: String,
        /// Why.
        error: ExtractError,
    },
    /// The tenant's writes of this kind in flight are at their bound, or no extraction slot
    /// freed in time: retry after `retry_after_seconds`.
    #[error("server is overloaded, retry later")]
    Overloaded {
        /// `server.retry_after_seconds`.
        retry_after_seconds: u64,
    },
    /// An access list past its cap (`acl_too_large`), checked before the write.
    #[error(transparent)]
    Acl(#[from] AclError),
    /// The backend's write failed or refused the batch (validation, versions, storage).
    #[error(transparent)]
    Retrieval(#[from] RetrievalError),
}

impl DocumentsError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only_replica",
            Self::EmptyBatch => "empty_batch",
            Self::BatchTooLarge { .. } => "batch_too_large",
            Self::EmptyGrant => "empty_grant",
            Self::EmptyRevoke => "empty_revoke",
            Self::InvalidAclName => "invalid_acl_name",
            Self::FileTooLarge { .. } => "file_too_large",
            Self::Extraction { error, .. } => error.code(),
            Self::Overloaded { .. } => "overloaded",
            Self::Acl(error) => error.code(),
            Self::Retrieval(error) => error.code(),
        }
    }

    /// Whether the write itself is malformed or over a limit (the admin API's 400s: sending it
    /// again gets the same answer), as opposed to the server's state (busy, read-only, storage
    /// failing) or the document's (missing, a newer version stored): `warrant ingest` reports a
    /// refused file and goes on, and ends the run on anything else, on both of its paths.
    pub fn is_refusal(&self) -> bool {
        match self {
            Self::EmptyBatch
            | Self::BatchTooLarge { .. }
            | Self::EmptyGrant
            | Self::EmptyRevoke
            | Self::InvalidAclName
            | Self::FileTooLarge { .. }
            | Self::Extraction { .. } => true,
            Self::ReadOnly | Self::Overloaded { .. } => false,
            Self::Acl(error) => acl_refusal(error),
            Self::Retrieval(error) => match error {
                RetrievalError::InvalidDocument { .. } => true,
                RetrievalError::Acl(error) => acl_refusal(error),
                RetrievalError::Index(_)
                | RetrievalError::Embed(_)
                | RetrievalError::Storage(_)
                | RetrievalError::QueryVector(_)
                | RetrievalError::Database { .. } => false,
            },
        }
    }
}

/// Whether an ACL error refuses the write itself (a 400 of the admin API).
fn acl_refusal(error: &AclError) -> bool {
    match error {
        AclError::DuplicateDocument { .. } | AclError::TooLarge { .. } | AclError::OutOfOrder { .. } => true,
        AclError::UnknownDocument { .. }
        | AclError::StaleVersion { .. }
        | AclError::Exhausted { .. }
        | AclError::Conflict
        | AclError::Compacted { .. } => false,
    }
}

/// Result alias of this layer.
pub type DocumentsResult<T> = Result<T, DocumentsError>;
