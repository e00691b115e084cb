//! The write path: [`Documents`], the one way anything is written (issue 62). It owns the
//! backend's write side, the per-tenant admission of writes ([`admission`]), the extraction
//! slots, every write limit ([`limits`]) and the replicas' settlement, and offers two calls:
//!
//! - [`Documents::upsert`]: check the batch once (size, files' sizes, access lists), admit it,
//!   extract each file off the async threads, write the batch, settle;
//! - [`Documents::change`]: a delete, grant or revoke: check it, admit it, write it, settle.
//!
//! (and [`Documents::seed`] for the demo corpus a server loads before it serves: written and
//! settled, not a request.)
//!
//! The admin API's handlers (`crate::http::admin`, `crate::http::files`) only decode a request
//! into [`Upload`]s or a [`Change`] and make one call; `warrant ingest --data-dir` makes the same
//! calls in process (`crate::ingest`). Nothing here knows HTTP: it takes no application state,
//! returns no wire type, and its one error ([`DocumentsError`]) has a transport-neutral `code()`
//! that `crate::http::error` maps to a status.
//!
//! Invariants:
//! - every refusal (a replica, a batch or file or access list past its limit, a malformed grant
//!   or revoke, a tenant at its admission bound, a file that cannot be extracted) happens before
//!   anything is written, and a batch is all or nothing;
//! - a write is acknowledged (its call returns) only after [`Settle::settle`] returned for its
//!   epoch: on a primary with replicas, a change that can remove access is acknowledged only once
//!   every replica holding a live lease applied it, or that lease ran out. No write reaches the
//!   write side by another road, so none can skip it;
//! - a tenant has at most `server.admin_document_batches_per_tenant` batches and
//!   `server.admin_acl_changes_per_tenant` changes in flight (its batches hold their permit while
//!   their files are extracted, so extraction is bounded per tenant too); the process runs at
//!   most `server.max_concurrent_extractions` extractions at once.

pub mod admission;
mod error;
pub mod limits;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OwnedSemaphorePermit;

use crate::acl::AclMutation;
use crate::config::Settings;
use crate::domain::DocAcl;
use crate::extract::{ExtractError, ExtractionSlots, extract_off_thread};
use crate::retrieval::{DocumentInput, UpsertOutcome, WriteSide};

pub use admission::{TenantAdmission, WriteKind};
pub use error::{DocumentsError, DocumentsResult};
pub use limits::{AclFields, AclList, WriteLimits};

/// What a write waits on after it is committed and before it is acknowledged: a primary's
/// replicas applying it ([`crate::replication`]'s leases), or nothing.
#[async_trait]
pub trait Settle: Send + Sync {
    /// Returns once the change of `epoch`, written into `tenant`, may be acknowledged.
    async fn settle(&self, tenant: &str, epoch: u64);
}

/// A server without replicas: a committed write is acknowledged at once.
pub struct NoReplicas;

#[async_trait]
impl Settle for NoReplicas {
    async fn settle(&self, _tenant: &str, _epoch: u64) {}
}

/// A document to upsert.
#[derive(Clone, Debug)]
pub struct Upload {
    /// Tenant-scoped id.
    pub doc_id: String,
    /// Display title; `None`: the file's own (a Markdown file's front matter), else its file
    /// name (empty for text).
    pub title: Option<String>,
    /// Its text, or a file to extract it from.
    pub content: Content,
    /// Who may read it.
    pub acl: DocAcl,
    /// Explicit version (greater than the stored one), or the next one.
    pub version: Option<u64>,
}

/// An upload's content.
#[derive(Clone, Debug)]
pub enum Content {
    /// The text, as given.
    Text(String),
    /// A file whose text and layout map are extracted.
    File(File),
}

/// A file to extract.
#[derive(Clone, Debug)]
pub struct File {
    /// What errors call it: its file name (a multipart part, a folder's file) or its document id.
    pub name: String,
    /// Its bytes.
    pub bytes: bytes::Bytes,
    /// Its declared media type (the bytes must agree).
    pub content_type: String,
}

/// A change to one document of a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Delete the document.
    Delete {
        /// Document.
        doc_id: String,
    },
    /// Add readers: at least one name.
    Grant {
        /// Document.
        doc_id: String,
        /// Groups to add.
        groups: Vec<String>,
        /// Users to add.
        users: Vec<String>,
    },
    /// Remove readers: the listed ones, or every reader when neither list is given; lists that
    /// are given must not both be empty.
    Revoke {
        /// Document.
        doc_id: String,
        /// Groups to remove.
        groups: Option<Vec<String>>,
        /// Users to remove.
        users: Option<Vec<String>>,
    },
}

/// The write path; see the module documentation.
pub struct Documents {
    writer: Arc<dyn WriteSide>,
    settle: Arc<dyn Settle>,
    limits: WriteLimits,
    admission: TenantAdmission,
    extraction: ExtractionSlots,
    read_only: bool,
}

impl Documents {
    /// The write path over `writer` with the limits, admission bounds and extraction slots of
    /// `settings`, settling each write with `settle`; a replica's (`replica.follow`) refuses
    /// every write.
    pub fn from_settings(settings: &Settings, writer: Arc<dyn WriteSide>, settle: Arc<dyn Settle>) -> Self {
        let server = &settings.server;
        Self {
            writer,
            settle,
            limits: WriteLimits::from_settings(settings),
            admission: TenantAdmission::new(
                server.admin_document_batches_per_tenant,
                server.admin_acl_changes_per_tenant,
            ),
            extraction: ExtractionSlots::from_settings(settings),
            read_only: !settings.replica.follow.is_empty(),
        }
    }

    /// The limits every write is checked against (a decoder bounding a request as it streams
    /// in checks the same ones: [`limits`]).
    pub fn limits(&self) -> &WriteLimits {
        &self.limits
    }

    /// `read_only_replica` on a replica. [`Documents::upsert`] and [`Documents::change`] check
    /// it first; a handler may ask before it reads an upload, to refuse without reading it.
    pub fn ensure_writable(&self) -> DocumentsResult<()> {
        if self.read_only {
            return Err(DocumentsError::ReadOnly);
        }
        Ok(())
    }

    /// Upserts `uploads` into `tenant`, all or nothing: checks the batch, admits it, extracts
    /// each file (one after the other, so a batch holds one file's work at a time), writes it,
    /// and returns once it is readable and settled.
    pub async fn upsert(&self, tenant: &str, uploads: Vec<Upload>) -> DocumentsResult<UpsertOutcome> {
        self.ensure_writable()?;
        self.limits.check_batch(uploads.len())?;
        for upload in &uploads {
            if let Content::File(file) = &upload.content {
                self.limits.check_file(&file.name, file.bytes.len())?;
            }
            self.limits.check_document_acl(&upload.doc_id, &upload.acl)?;
        }
        let _permit = self.admit(tenant, WriteKind::Documents)?;
        let mut inputs = Vec::with_capacity(uploads.len());
        for upload in uploads {
            inputs.push(self.input(upload).await?);
        }
        let outcome = self.writer.upsert(tenant, inputs).await?;
        self.settle.settle(tenant, outcome.acl_epoch).await;
        Ok(outcome)
    }

    /// Writes a trusted bootstrap batch of text documents into `tenant` (the demo corpus, loaded
    /// before anything is served: not a request, so neither the request limits nor admission
    /// apply), settled like every write.
    pub async fn seed(&self, tenant: &str, inputs: Vec<DocumentInput>) -> DocumentsResult<UpsertOutcome> {
        self.ensure_writable()?;
        let outcome = self.writer.upsert(tenant, inputs).await?;
        self.settle.settle(tenant, outcome.acl_epoch).await;
        Ok(outcome)
    }

    /// Applies `change` to a document of `tenant`: checks it, admits it, writes it (durable,
    /// then published), and returns its epoch once settled.
    pub async fn change(&self, tenant: &str, change: Change) -> DocumentsResult<u64> {
        self.ensure_writable()?;
        let mutation = self.check_change(tenant, change)?;
        let _permit = self.admit(tenant, WriteKind::Acl)?;
        let epoch = self.writer.mutate(mutation).await?;
        self.settle.settle(tenant, epoch).await;
        Ok(epoch)
    }

    /// The mutation of a well-formed change: a grant names someone, a revoke's given lists are
    /// not all empty, at most `server.max_acl_names_per_change` names of 1..=256 characters.
    fn check_change(&self, tenant: &str, change: Change) -> DocumentsResult<AclMutation> {
        let tenant = tenant.to_owned();
        match change {
            Change::Delete { doc_id } => Ok(AclMutation::Delete { tenant, doc_id }),
            Change::Grant { doc_id, groups, users } => {
                if groups.is_empty() && users.is_empty() {
                    return Err(DocumentsError::EmptyGrant);
                }
                self.limits.check_change(groups.len() + users.len())?;
                limits::check_names(&groups)?;
                limits::check_names(&users)?;
                Ok(AclMutation::Grant { tenant, doc_id, groups, users })
            }
            Change::Revoke { doc_id, groups, users } => {
                let given: Vec<&Vec<String>> = [&groups, &users].into_iter().flatten().collect();
                if !given.is_empty() && given.iter().all(|list| list.is_empty()) {
                    return Err(DocumentsError::EmptyRevoke);
                }
                self.limits.check_change(given.iter().map(|list| list.len()).sum())?;
                for list in given {
                    limits::check_names(list)?;
                }
                Ok(AclMutation::Revoke { tenant, doc_id, groups, users })
            }
        }
    }

    /// A permit of `tenant`'s admission for `kind`, or `overloaded`.
    fn admit(&self, tenant: &str, kind: WriteKind) -> DocumentsResult<OwnedSemaphorePermit> {
        self.admission
            .try_admit(tenant, kind)
            .ok_or(DocumentsError::Overloaded { retry_after_seconds: self.limits.retry_after_seconds })
    }

    /// The backend's input of an upload: its text as given, or extracted from its file on the
    /// blocking pool in one of the extraction slots.
    async fn input(&self, upload: Upload) -> DocumentsResult<DocumentInput> {
        let Upload { doc_id, title, content, acl, version } = upload;
        let file = match content {
            Content::Text(text) => {
                let title = title.unwrap_or_default();
                return Ok(DocumentInput { doc_id, title, text, acl, version, layout: None });
            }
            Content::File(file) => file,
        };
        let File { name, bytes, content_type } = file;
        let extracted = extract_off_thread(bytes, content_type, self.limits.extraction, &self.extraction)
            .await
            .map_err(|error| match error {
                ExtractError::Busy => {
                    DocumentsError::Overloaded { retry_after_seconds: self.limits.retry_after_seconds }
                }
                error => DocumentsError::Extraction { file: limits::shown(&name), error },
            })?;
        let title = title.or(extracted.title).unwrap_or(name);
        let layout = (!extracted.layout.is_empty()).then(|| Arc::new(extracted.layout));
        Ok(DocumentInput { doc_id, title, text: extracted.text, acl, version, layout })
    }
}

#[cfg(test)]
mod tests;
