use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::domain::DocOrdinal;

/// The immutable authorization scope of one request: the document-version ordinals the
/// principal may read, and the epoch of the snapshot they were derived from.
///
/// Built once per request (see [`super::AclSnapshot::scope_for`]) and passed by reference to
/// every search so that lexical and vector retrieval apply exactly the same set.
#[derive(Clone, Debug)]
pub struct AuthorizationScope {
    tenant: String,
    user: String,
    epoch: u64,
    allowed: Arc<RoaringBitmap>,
    /// The principal's groups, for backends that evaluate the ACL themselves (postgres).
    groups: Arc<[String]>,
    /// Whether the backend evaluates the ACL inside its own statements (no bitmap is carried).
    in_backend: bool,
}

impl AuthorizationScope {
    pub(crate) fn new(tenant: String, user: String, epoch: u64, allowed: RoaringBitmap) -> Self {
        Self { tenant, user, epoch, allowed: Arc::new(allowed), groups: Arc::from(Vec::new()), in_backend: false }
    }

    /// The scope of `principal` for a backend that evaluates the ACL inside its own queries (the
    /// postgres backend): it carries the principal (tenant, user, groups) and no bitmap, so the
    /// embedded shards, given it by mistake, find nothing (fail-closed).
    pub fn for_principal(principal: &crate::domain::Principal, epoch: u64) -> Self {
        Self {
            tenant: principal.tenant.clone(),
            user: principal.user.clone(),
            epoch,
            allowed: Arc::new(RoaringBitmap::new()),
            groups: principal.groups.iter().cloned().collect(),
            in_backend: true,
        }
    }

    /// This scope carrying `groups`, the principal's, besides its bitmap (which alone still decides
    /// what it admits): a cached postgres tenant's scope, so that a search whose tenant left the
    /// cache can be answered by the database for the same principal ([`Self::in_backend`]).
    pub fn with_groups<'a>(mut self, groups: impl IntoIterator<Item = &'a String>) -> Self {
        self.groups = groups.into_iter().cloned().collect();
        self
    }

    /// The scope of the principal this scope carries (tenant, user, groups), at its epoch, for a
    /// backend that evaluates the ACL itself, as [`Self::for_principal`] builds it.
    pub fn in_backend(&self) -> Self {
        Self {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            epoch: self.epoch,
            allowed: Arc::new(RoaringBitmap::new()),
            groups: Arc::clone(&self.groups),
            in_backend: true,
        }
    }

    /// The principal's groups (set by [`Self::for_principal`] and [`Self::with_groups`]).
    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    /// A scope over an explicit set (benchmarks and tests that bypass the ACL store).
    pub fn from_bitmap(tenant: impl Into<String>, epoch: u64, allowed: RoaringBitmap) -> Self {
        Self::new(tenant.into(), String::new(), epoch, allowed)
    }

    /// The user the scope was built for (empty for scopes built from a bare bitmap).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The tenant the scope belongs to.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Epoch of the snapshot the scope was built from.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the document version is inside the scope.
    #[inline]
    pub fn allows(&self, ordinal: DocOrdinal) -> bool {
        self.allowed.contains(ordinal)
    }

    /// The allowed ordinals.
    pub fn bitmap(&self) -> &RoaringBitmap {
        &self.allowed
    }

    /// Shared handle to the allowed ordinals (cheap to clone into shard messages).
    pub fn shared_bitmap(&self) -> Arc<RoaringBitmap> {
        Arc::clone(&self.allowed)
    }

    /// Number of allowed document versions.
    pub fn len(&self) -> u64 {
        self.allowed.len()
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// Whether the backend evaluates this scope inside its own statements ([`Self::for_principal`]:
    /// no bitmap is carried) rather than through the allowed ordinals.
    pub fn evaluated_in_backend(&self) -> bool {
        self.in_backend
    }

    /// Whether a search inside this scope can only find nothing: a bitmap scope that allows no
    /// document version (a scope the backend evaluates itself is never known to be empty here).
    pub fn reads_nothing(&self) -> bool {
        !self.in_backend && self.allowed.is_empty()
    }

    /// Whether `chunk` may come out of a search inside this scope: the scope's tenant, and, for a
    /// bitmap scope, an allowed document version.
    pub fn admits(&self, chunk: &crate::domain::Chunk) -> bool {
        chunk.tenant == self.tenant && (self.in_backend || self.allowed.contains(chunk.doc_ordinal))
    }
}
