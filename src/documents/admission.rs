//! Per-tenant admission of writes (moved here from `http/admission.rs` with issue 62: the
//! service admits, not the handlers): each tenant gets its own bounded number of document
//! batches and of ACL changes in flight, so one tenant's admin can neither
//! starve another tenant nor queue revocations behind its own uploads. Beyond the bound a request
//! is refused at once ([`super::DocumentsError::Overloaded`]: 503 `overloaded` with
//! `Retry-After` over HTTP; the bounded queue is the set of permits; nothing waits unboundedly).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which pool a write draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A document batch (extraction, chunking, embedding, indexing: expensive).
    Documents,
    /// Grant, revoke, delete (cheap; never queued behind document batches).
    Acl,
}

/// Per-(tenant, kind) semaphores, created on first use and dropped when idle.
pub struct TenantAdmission {
    documents: usize,
    acl: usize,
    pools: Mutex<HashMap<(String, WriteKind), Arc<Semaphore>>>,
}

impl TenantAdmission {
    /// Bounds per tenant: `documents` batches and `acl` changes in flight.
    pub fn new(documents: usize, acl: usize) -> Self {
        Self { documents: documents.max(1), acl: acl.max(1), pools: Mutex::new(HashMap::new()) }
    }

    /// A permit for one write of `kind` in `tenant`, or `None` when the tenant's bound is reached.
    pub fn try_admit(&self, tenant: &str, kind: WriteKind) -> Option<OwnedSemaphorePermit> {
        let limit = match kind {
            WriteKind::Documents => self.documents,
            WriteKind::Acl => self.acl,
        };
        let mut pools = self.pools.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Forget idle pools so the map stays as small as the set of tenants writing right now.
        if pools.len() > 1024 {
            pools.retain(|(_, kind), pool| {
                let limit = if *kind == WriteKind::Documents { self.documents } else { self.acl };
                Arc::strong_count(pool) > 1 || pool.available_permits() < limit
            });
        }
        let pool = pools.entry((tenant.to_owned(), kind)).or_insert_with(|| Arc::new(Semaphore::new(limit)));
        Arc::clone(pool).try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tenant_at_its_bound_does_not_block_another_or_its_own_acl_changes() {
        let admission = TenantAdmission::new(2, 4);
        let first = admission.try_admit("acme", WriteKind::Documents).unwrap();
        let _second = admission.try_admit("acme", WriteKind::Documents).unwrap();
        assert!(admission.try_admit("acme", WriteKind::Documents).is_none());
        assert!(admission.try_admit("globex", WriteKind::Documents).is_some());
        assert!(admission.try_admit("acme", WriteKind::Acl).is_some());
        drop(first);
        assert!(admission.try_admit("acme", WriteKind::Documents).is_some());
    }
}
