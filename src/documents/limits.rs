//! Every limit of a write, each checked by one function: the batch size, a file's size, the
//! access-list names and their count, and the bounds of one file's extraction.
//!
//! [`super::Documents`] checks them all before it admits a write. A decoder that must bound its
//! memory while a request streams in (a multipart upload: a file part is refused the moment it
//! passes `server.max_file_bytes`, and a request of empty parts the moment it has one file too
//! many) calls the same functions on what it has read so far: the rule stays one function, the
//! early call only refuses sooner.

use std::time::Duration;

use crate::acl::AclError;
use crate::config::Settings;
use crate::domain::DocAcl;
use crate::domain::schema::MAX_ACL_NAME_CHARS;
use crate::extract::ExtractLimits;

use super::error::{DocumentsError, DocumentsResult};

/// The limits of writes, from `server.*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteLimits {
    /// Documents of one upsert (`server.max_batch_documents`).
    pub max_batch_documents: usize,
    /// Names of one document's access list (`server.max_acl_names_per_document`).
    pub max_acl_names_per_document: usize,
    /// Names of one grant or revoke (`server.max_acl_names_per_change`).
    pub max_acl_names_per_change: usize,
    /// Bytes of one file (`server.max_file_bytes`).
    pub max_file_bytes: usize,
    /// Bounds of one file's extraction (`server.extraction_timeout_ms`, and the decompressed
    /// size: four times the file limit, at least 64 MiB).
    pub extraction: ExtractLimits,
    /// `Retry-After` of an overloaded write (`server.retry_after_seconds`).
    pub retry_after_seconds: u64,
}

impl WriteLimits {
    /// The limits of these settings.
    pub fn from_settings(settings: &Settings) -> Self {
        let server = &settings.server;
        Self {
            max_batch_documents: server.max_batch_documents,
            max_acl_names_per_document: server.max_acl_names_per_document,
            max_acl_names_per_change: server.max_acl_names_per_change,
            max_file_bytes: server.max_file_bytes,
            extraction: ExtractLimits {
                max_text_chars: crate::retrieval::MAX_TEXT_CHARS,
                max_unpacked_bytes: 4 * server.max_file_bytes.max(16 * 1024 * 1024),
                time_limit: Duration::from_millis(server.extraction_timeout_ms),
                ..ExtractLimits::default()
            },
            retry_after_seconds: server.retry_after_seconds,
        }
    }

    /// `empty_batch` or `batch_too_large` for an upsert of `count` documents.
    pub fn check_batch(&self, count: usize) -> DocumentsResult<()> {
        if count == 0 {
            return Err(DocumentsError::EmptyBatch);
        }
        if count > self.max_batch_documents {
            return Err(DocumentsError::BatchTooLarge { max: self.max_batch_documents });
        }
        Ok(())
    }

    /// `file_too_large` when `bytes` bytes of the file `file` (a document id or file name) pass
    /// `server.max_file_bytes`.
    pub fn check_file(&self, file: &str, bytes: usize) -> DocumentsResult<()> {
        if bytes > self.max_file_bytes {
            return Err(DocumentsError::FileTooLarge { file: shown(file), limit: self.max_file_bytes });
        }
        Ok(())
    }

    /// `acl_too_large` when the access list of the document `doc_id` names more than
    /// `server.max_acl_names_per_document` (grants add up: the backend checks the sum again).
    pub fn check_document_acl(&self, doc_id: &str, acl: &DocAcl) -> DocumentsResult<()> {
        let what = || format!("the access list of document {doc_id}");
        check_count(acl.groups.len() + acl.users.len(), self.max_acl_names_per_document, what)
    }

    /// `acl_too_large` when one grant or revoke names more than `server.max_acl_names_per_change`.
    pub fn check_change(&self, count: usize) -> DocumentsResult<()> {
        check_count(count, self.max_acl_names_per_change, || "one change".to_owned())
    }
}

/// `acl_too_large` when `count` names are more than `limit` allows for `what`.
fn check_count(count: usize, limit: usize, what: impl FnOnce() -> String) -> DocumentsResult<()> {
    if count > limit {
        return Err(AclError::TooLarge { what: what(), limit }.into());
    }
    Ok(())
}

/// `invalid_acl_name` unless every name is 1..=256 characters and not blank.
pub fn check_names(names: &[String]) -> DocumentsResult<()> {
    if names.iter().any(|name| name.trim().is_empty() || name.chars().count() > MAX_ACL_NAME_CHARS) {
        return Err(DocumentsError::InvalidAclName);
    }
    Ok(())
}

/// A file's name as an error shows it: at most 256 characters.
pub(super) fn shown(file: &str) -> String {
    file.chars().take(256).collect()
}

/// Which list of an access list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclList {
    /// Groups.
    Groups,
    /// Users.
    Users,
}

/// The access list given once for every file of an upload, as fields (a multipart request's
/// `groups` and `users`, or a folder's sidecar as `warrant ingest` sends it), checked as each
/// field arrives: a field's names are comma-separated and trimmed, blank ones dropped; each name
/// must be 1..=256 characters (`invalid_acl_name`) and the list at most
/// `server.max_acl_names_per_document` names (`acl_too_large`). The bytes the list holds are
/// counted, so a decoder can bound the copies its files get.
#[derive(Clone, Debug, Default)]
pub struct AclFields {
    acl: DocAcl,
    bytes: usize,
}

impl AclFields {
    /// Adds the comma-separated names of one field to `list`; refuses at once.
    pub fn add(&mut self, list: AclList, value: &str, limits: &WriteLimits) -> DocumentsResult<()> {
        let names: Vec<String> =
            value.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_owned).collect();
        check_names(&names)?;
        let count = self.acl.groups.len() + self.acl.users.len() + names.len();
        check_count(count, limits.max_acl_names_per_document, || "the access list of the request's files".to_owned())?;
        self.bytes += names.iter().map(|name| name.len() + std::mem::size_of::<String>()).sum::<usize>();
        let target = match list {
            AclList::Groups => &mut self.acl.groups,
            AclList::Users => &mut self.acl.users,
        };
        target.extend(names);
        Ok(())
    }

    /// Each name of `acl` as its own field, as `warrant ingest` sends a sidecar's list.
    pub fn of(acl: &DocAcl, limits: &WriteLimits) -> DocumentsResult<Self> {
        let mut fields = Self::default();
        for group in &acl.groups {
            fields.add(AclList::Groups, group, limits)?;
        }
        for user in &acl.users {
            fields.add(AclList::Users, user, limits)?;
        }
        Ok(fields)
    }

    /// Bytes the list holds in memory (names and their headers).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The list.
    pub fn acl(&self) -> &DocAcl {
        &self.acl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_split_trimmed_checked_and_counted_as_they_arrive() {
        let limits = WriteLimits { max_acl_names_per_document: 3, ..WriteLimits::from_settings(&Settings::defaults()) };
        let mut fields = AclFields::default();
        fields.add(AclList::Groups, " staff, ,hr ", &limits).unwrap();
        assert_eq!(fields.acl().groups, ["staff", "hr"]);
        assert!(matches!(fields.add(AclList::Users, &"n".repeat(257), &limits), Err(DocumentsError::InvalidAclName)));
        let refused = fields.add(AclList::Users, "ann,bob", &limits).unwrap_err();
        assert_eq!(refused.code(), "acl_too_large");
        fields.add(AclList::Users, "ann", &limits).unwrap();
        assert_eq!(fields.acl().users, ["ann"]);
        assert!(fields.bytes() >= "staffhrann".len());
    }
}
