//! The sides of a retrieval backend, as the layers above see them: [`ReadSide`] (scope, the
//! shared [`ReadPath`] over the backend's [`CandidateSearch`](super::CandidateSearch), the current authorization of cited
//! chunks, one readable document) and [`WriteSide`] (document batches and ACL changes). The
//! application state holds one of each; the embedded engine (`crate::embedded::Engine`) and the
//! PostgreSQL backend implement them, so the answer pipeline and the HTTP handlers never name a
//! backend.
//!
//! Invariants every implementation keeps:
//! - The backend's [`CandidateSearch`](super::CandidateSearch) applies the scope inside every
//!   search it runs (`retrieval::search`).
//! - [`ReadSide::authorization`] reflects every change acknowledged before it was called: the
//!   pipeline calls it after its last await, so a revoke acknowledged while a request was in
//!   flight drops the revoked sources at validation.
//! - [`WriteSide`] acknowledges a change only once it is durable and enforced.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use crate::acl::{AclMutation, AclSnapshot, AuthorizationScope};
use crate::domain::{Chunk, DocOrdinal, Principal};

use super::coordinator::ContextBudget;
use super::read::ReadPath;
use super::{DocumentInput, RetrievalResult, Retrieved};

/// What one principal may read right now, asked only of chunks the pipeline may cite. Never
/// awaits: it is a snapshot taken by [`ReadSide::authorization`].
pub trait Authorization: Send + Sync {
    /// The ACL epoch this view was taken at (the principal's tenant's, for backends that keep
    /// epochs per tenant).
    fn epoch(&self) -> u64;
    /// Whether `principal` may read `chunk` (its document version is live and readable).
    fn allows(&self, principal: &Principal, chunk: &Chunk) -> bool;
}

impl Authorization for AclSnapshot {
    fn epoch(&self) -> u64 {
        AclSnapshot::epoch(self)
    }

    fn allows(&self, principal: &Principal, chunk: &Chunk) -> bool {
        AclSnapshot::allows(self, principal, chunk.doc_ordinal)
    }
}

/// An authorization view over a fixed set of readable document versions of one tenant (what a
/// backend that checks the ACL in its database returns for the chunks it was asked about).
#[derive(Clone, Debug)]
pub struct ReadableVersions {
    tenant: String,
    epoch: u64,
    readable: HashSet<DocOrdinal>,
}

impl ReadableVersions {
    /// `readable`: the document versions of `tenant` the principal may read, at `epoch`.
    pub fn new(tenant: impl Into<String>, epoch: u64, readable: impl IntoIterator<Item = DocOrdinal>) -> Self {
        Self { tenant: tenant.into(), epoch, readable: readable.into_iter().collect() }
    }
}

impl Authorization for ReadableVersions {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn allows(&self, principal: &Principal, chunk: &Chunk) -> bool {
        principal.tenant == self.tenant && chunk.tenant == self.tenant && self.readable.contains(&chunk.doc_ordinal)
    }
}

/// One readable document with its chunks (`GET /v1/documents/{doc_id}`).
#[derive(Clone, Debug)]
pub struct DocumentView {
    /// Document id.
    pub doc_id: String,
    /// Live version.
    pub version: u64,
    /// Title.
    pub title: String,
    /// ACL epoch the document was read at.
    pub acl_epoch: u64,
    /// The live version's chunks, in document order.
    pub chunks: Vec<Arc<Chunk>>,
}

/// The read side of a backend.
#[async_trait]
pub trait ReadSide: Send + Sync {
    /// The scope of `principal`, built once per request and used for every search.
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope>;
    /// The read path over this backend's searches (the embedded engine's changes when a replica
    /// replaces its state).
    fn read_path(&self) -> Arc<ReadPath>;
    /// Hybrid retrieval of `text` inside `scope` through the read path, budgeted into a final
    /// context when `budget` is given.
    async fn retrieve(
        &self,
        scope: &AuthorizationScope,
        text: &str,
        budget: Option<ContextBudget>,
    ) -> RetrievalResult<Retrieved> {
        self.read_path().retrieve(scope, text, budget).await
    }
    /// What `principal` may read now, asked of `chunks` (the sources the pipeline may cite).
    async fn authorization(
        &self,
        principal: &Principal,
        chunks: &[Arc<Chunk>],
    ) -> RetrievalResult<Arc<dyn Authorization>>;
    /// The live version of `doc_id` in the principal's tenant, when the principal may read it;
    /// `None` when it is absent, deleted or unreadable (indistinguishable to the caller).
    async fn document(&self, principal: &Principal, doc_id: &str) -> RetrievalResult<Option<DocumentView>>;
    /// The embedder's name (readiness, evaluation reports).
    fn embedder_name(&self) -> &str;
    /// The ACL epoch and lineage to report at readiness (a backend with an epoch per tenant
    /// reports the highest).
    async fn acl_state(&self) -> RetrievalResult<(u64, String)>;
}

/// The write side of a backend.
#[async_trait]
pub trait WriteSide: Send + Sync {
    /// Upserts a batch of documents into `tenant`, all or nothing; returns once readable.
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome>;
    /// Applies one ACL change (delete, grant, revoke); returns the epoch once it is enforced.
    async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64>;
}

/// Result of an upsert batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UpsertOutcome {
    /// Epoch that made the batch readable.
    pub acl_epoch: u64,
    /// Documents written.
    pub documents: usize,
    /// Chunks written.
    pub chunks: usize,
}
