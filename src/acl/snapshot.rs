use std::collections::HashMap;
use std::sync::Arc;

use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::domain::{DocAcl, DocOrdinal, Principal};

use super::scope::AuthorizationScope;

/// The live version of one document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocEntry {
    /// Document id (the same allocation as its key in [`TenantAcl::entries`]).
    pub doc_id: Arc<str>,
    /// Live version.
    pub version: u64,
    /// Ordinal of the live version.
    pub ordinal: DocOrdinal,
    /// Display title.
    pub title: String,
    /// Effective access list after grants and revocations.
    pub acl: DocAcl,
}

/// ACL state of one tenant. Bitmaps are `Arc`ed so that a change to one document clones only
/// the bitmaps it touches; so are the entries and their ids, so that the next snapshot of a
/// batch copies the tenant's table of pointers, never its strings (24.8 ms -> 3.6 ms to prepare
/// 500 upserts in a tenant of 100,000 documents, BENCHMARKS.md "Where an ingesting node's memory
/// goes").
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TenantAcl {
    /// Live ordinals of the tenant.
    pub docs: Arc<RoaringBitmap>,
    /// Group -> live ordinals readable by its members.
    pub groups: HashMap<String, Arc<RoaringBitmap>>,
    /// User -> live ordinals readable by that user.
    pub users: HashMap<String, Arc<RoaringBitmap>>,
    /// doc_id -> live entry.
    pub entries: HashMap<Arc<str>, Arc<DocEntry>>,
}

/// One immutable authorization state.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AclSnapshot {
    pub(crate) epoch: u64,
    pub(crate) tenants: HashMap<String, Arc<TenantAcl>>,
    /// Ordinals that must never be served again (deleted documents, superseded versions).
    pub(crate) tombstones: Arc<RoaringBitmap>,
}

impl AclSnapshot {
    /// The epoch: incremented by every published change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Builds the immutable scope of `principal` under this snapshot.
    ///
    /// Cost is one bitmap union per group the principal holds; nothing proportional to the
    /// number of readable documents is copied out of the snapshot besides the result bitmap.
    pub fn scope_for(&self, principal: &Principal) -> AuthorizationScope {
        let Some(tenant) = self.tenants.get(&principal.tenant) else {
            return AuthorizationScope::new(
                principal.tenant.clone(),
                principal.user.clone(),
                self.epoch,
                RoaringBitmap::new(),
            );
        };
        let mut allowed = tenant.users.get(&principal.user).map(|bitmap| (**bitmap).clone()).unwrap_or_default();
        for group in &principal.groups {
            if let Some(bitmap) = tenant.groups.get(group) {
                allowed |= bitmap.as_ref();
            }
        }
        allowed &= tenant.docs.as_ref();
        allowed -= self.tombstones.as_ref();
        AuthorizationScope::new(principal.tenant.clone(), principal.user.clone(), self.epoch, allowed)
    }

    /// Whether `principal` may read the document version `ordinal` under this snapshot.
    /// Cheaper than building a scope when only a few ordinals are checked (validation).
    pub fn allows(&self, principal: &Principal, ordinal: DocOrdinal) -> bool {
        if self.tombstones.contains(ordinal) {
            return false;
        }
        let Some(tenant) = self.tenants.get(&principal.tenant) else {
            return false;
        };
        if !tenant.docs.contains(ordinal) {
            return false;
        }
        tenant.users.get(&principal.user).is_some_and(|bitmap| bitmap.contains(ordinal))
            || principal
                .groups
                .iter()
                .any(|group| tenant.groups.get(group).is_some_and(|bitmap| bitmap.contains(ordinal)))
    }

    /// The live entry of a document, if any.
    pub fn entry(&self, tenant: &str, doc_id: &str) -> Option<&DocEntry> {
        self.tenants.get(tenant)?.entries.get(doc_id).map(Arc::as_ref)
    }

    /// Whether `ordinal` is tombstoned (deleted or superseded).
    pub fn is_tombstoned(&self, ordinal: DocOrdinal) -> bool {
        self.tombstones.contains(ordinal)
    }

    /// All tombstoned ordinals.
    pub fn tombstones(&self) -> &RoaringBitmap {
        &self.tombstones
    }

    /// Number of live documents in all tenants.
    pub fn live_documents(&self) -> u64 {
        self.tenants.values().map(|tenant| tenant.docs.len()).sum()
    }

    /// Tenants with at least one document ever registered.
    pub fn tenant_names(&self) -> impl Iterator<Item = &str> {
        self.tenants.keys().map(String::as_str)
    }

    /// Live entries of one tenant.
    pub fn entries(&self, tenant: &str) -> impl Iterator<Item = &DocEntry> {
        self.tenants.get(tenant).into_iter().flat_map(|acl| acl.entries.values().map(Arc::as_ref))
    }
}
