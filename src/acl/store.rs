use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::domain::{DocAcl, DocOrdinal};

use super::snapshot::{AclSnapshot, DocEntry, TenantAcl};
use super::{AclError, AclResult};

/// One requested change of authorization state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AclMutation {
    /// Make `ordinal` the live version of the document, superseding (tombstoning) the previous.
    Upsert {
        /// Tenant.
        tenant: String,
        /// Document id.
        doc_id: String,
        /// New version.
        version: u64,
        /// Ordinal reserved for the new version (see [`AclStore::reserve_ordinals`]).
        ordinal: DocOrdinal,
        /// Display title.
        title: String,
        /// Access list of the new version.
        acl: DocAcl,
    },
    /// Delete the document: its live ordinal is tombstoned.
    Delete {
        /// Tenant.
        tenant: String,
        /// Document id.
        doc_id: String,
    },
    /// Add readers.
    Grant {
        /// Tenant.
        tenant: String,
        /// Document id.
        doc_id: String,
        /// Groups to add.
        groups: Vec<String>,
        /// Users to add.
        users: Vec<String>,
    },
    /// Remove readers; with both lists `None`, remove every reader.
    Revoke {
        /// Tenant.
        tenant: String,
        /// Document id.
        doc_id: String,
        /// Groups to remove.
        groups: Option<Vec<String>>,
        /// Users to remove.
        users: Option<Vec<String>>,
    },
}

impl AclMutation {
    /// Tenant the mutation acts in.
    pub fn tenant(&self) -> &str {
        match self {
            Self::Upsert { tenant, .. }
            | Self::Delete { tenant, .. }
            | Self::Grant { tenant, .. }
            | Self::Revoke { tenant, .. } => tenant,
        }
    }

    fn doc_id(&self) -> &str {
        match self {
            Self::Upsert { doc_id, .. }
            | Self::Delete { doc_id, .. }
            | Self::Grant { doc_id, .. }
            | Self::Revoke { doc_id, .. } => doc_id,
        }
    }
}

/// One entry of the append-only change log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclChange {
    /// Epoch published by the batch this change belongs to.
    pub epoch: u64,
    /// The change.
    pub mutation: AclMutation,
}

/// The published ACL snapshot, the writer lock and the change log.
pub struct AclStore {
    current: ArcSwap<AclSnapshot>,
    writer: Mutex<Vec<AclChange>>,
    next_ordinal: AtomicU32,
}

impl Default for AclStore {
    fn default() -> Self {
        Self::new()
    }
}

impl AclStore {
    /// An empty store at epoch 0.
    pub fn new() -> Self {
        Self::restore(AclSnapshot::default(), Vec::new(), 0)
    }

    /// A store resumed from a persisted snapshot, log and ordinal counter.
    pub fn restore(snapshot: AclSnapshot, log: Vec<AclChange>, next_ordinal: DocOrdinal) -> Self {
        Self {
            current: ArcSwap::from_pointee(snapshot),
            writer: Mutex::new(log),
            next_ordinal: AtomicU32::new(next_ordinal),
        }
    }

    /// The current snapshot. Load once per request.
    pub fn load(&self) -> Arc<AclSnapshot> {
        self.current.load_full()
    }

    /// Current epoch.
    pub fn epoch(&self) -> u64 {
        self.current.load().epoch
    }

    /// Reserves `count` fresh ordinals. Ordinals are never reused, so a reserved ordinal that is
    /// never published is simply never readable.
    pub fn reserve_ordinals(&self, count: u32) -> std::ops::Range<DocOrdinal> {
        let start = self.next_ordinal.fetch_add(count, Ordering::SeqCst);
        start..start + count
    }

    /// The next ordinal that would be reserved (for snapshots).
    pub fn next_ordinal(&self) -> DocOrdinal {
        self.next_ordinal.load(Ordering::SeqCst)
    }

    /// Changes with `epoch > since`, in order.
    pub fn changes_since(&self, since: u64) -> Vec<AclChange> {
        let log = self.lock_writer();
        let first = log.partition_point(|change| change.epoch <= since);
        log[first..].to_vec()
    }

    /// Validates `mutations` as one batch against the current snapshot, then publishes a new
    /// snapshot with `epoch + 1` and appends the batch to the log. On error nothing changes.
    pub fn apply(&self, mutations: Vec<AclMutation>) -> AclResult<u64> {
        let mut log = self.lock_writer();
        let current = self.current.load_full();
        let mut next = (*current).clone();
        let mut seen = HashSet::new();
        for mutation in &mutations {
            if let AclMutation::Upsert { .. } = mutation
                && !seen.insert((mutation.tenant().to_owned(), mutation.doc_id().to_owned()))
            {
                return Err(AclError::DuplicateDocument { doc_id: mutation.doc_id().to_owned() });
            }
            apply_one(&mut next, mutation)?;
        }
        next.epoch = current.epoch + 1;
        let epoch = next.epoch;
        self.current.store(Arc::new(next));
        log.extend(mutations.into_iter().map(|mutation| AclChange { epoch, mutation }));
        Ok(epoch)
    }

    /// Applies changes received from a primary, in order, skipping those already applied.
    /// Ordinals are kept as the primary assigned them.
    pub fn apply_remote(&self, changes: &[AclChange]) -> AclResult<u64> {
        let mut log = self.lock_writer();
        let current = self.current.load_full();
        let mut next = (*current).clone();
        for change in changes.iter().filter(|change| change.epoch > current.epoch) {
            apply_one(&mut next, &change.mutation)?;
            next.epoch = change.epoch;
            if let AclMutation::Upsert { ordinal, .. } = change.mutation {
                self.next_ordinal.fetch_max(ordinal + 1, Ordering::SeqCst);
            }
        }
        let epoch = next.epoch;
        self.current.store(Arc::new(next));
        log.extend(changes.iter().filter(|change| change.epoch > current.epoch).cloned());
        Ok(epoch)
    }

    /// The change log (for snapshots).
    pub fn log(&self) -> Vec<AclChange> {
        self.lock_writer().clone()
    }

    fn lock_writer(&self) -> MutexGuard<'_, Vec<AclChange>> {
        // A panic while holding the lock cannot leave a half-published snapshot (publishing is
        // one store at the end), so a poisoned lock is safe to keep using.
        self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn add(map: &mut std::collections::HashMap<String, Arc<RoaringBitmap>>, key: &str, ordinal: DocOrdinal) {
    Arc::make_mut(map.entry(key.to_owned()).or_default()).insert(ordinal);
}

fn remove(map: &mut std::collections::HashMap<String, Arc<RoaringBitmap>>, key: &str, ordinal: DocOrdinal) {
    if let Some(bitmap) = map.get_mut(key) {
        Arc::make_mut(bitmap).remove(ordinal);
        if bitmap.is_empty() {
            map.remove(key);
        }
    }
}

/// Removes every trace of the live entry from the tenant's bitmaps and tombstones its ordinal.
fn retire(tenant: &mut TenantAcl, tombstones: &mut Arc<RoaringBitmap>, entry: &DocEntry) {
    Arc::make_mut(&mut tenant.docs).remove(entry.ordinal);
    for group in &entry.acl.groups {
        remove(&mut tenant.groups, group, entry.ordinal);
    }
    for user in &entry.acl.users {
        remove(&mut tenant.users, user, entry.ordinal);
    }
    Arc::make_mut(tombstones).insert(entry.ordinal);
}

fn apply_one(snapshot: &mut AclSnapshot, mutation: &AclMutation) -> AclResult<()> {
    let tenant_name = mutation.tenant();
    let doc_id = mutation.doc_id();
    let known = snapshot.tenants.get(tenant_name).and_then(|tenant| tenant.entries.get(doc_id)).cloned();
    if known.is_none() && !matches!(mutation, AclMutation::Upsert { .. }) {
        return Err(AclError::UnknownDocument { doc_id: doc_id.to_owned() });
    }
    let tenant = Arc::make_mut(snapshot.tenants.entry(tenant_name.to_owned()).or_default());
    match mutation {
        AclMutation::Upsert { version, ordinal, title, acl, .. } => {
            if let Some(previous) = &known {
                if *version <= previous.version {
                    return Err(AclError::StaleVersion { doc_id: doc_id.to_owned(), current: previous.version });
                }
                retire(tenant, &mut snapshot.tombstones, previous);
            }
            let acl = normalized(acl);
            Arc::make_mut(&mut tenant.docs).insert(*ordinal);
            for group in &acl.groups {
                add(&mut tenant.groups, group, *ordinal);
            }
            for user in &acl.users {
                add(&mut tenant.users, user, *ordinal);
            }
            tenant.entries.insert(
                doc_id.to_owned(),
                DocEntry { doc_id: doc_id.to_owned(), version: *version, ordinal: *ordinal, title: title.clone(), acl },
            );
        }
        AclMutation::Delete { .. } => {
            let entry = known.expect("checked above");
            retire(tenant, &mut snapshot.tombstones, &entry);
            tenant.entries.remove(doc_id);
        }
        AclMutation::Grant { groups, users, .. } => {
            let entry = tenant.entries.get_mut(doc_id).expect("checked above");
            let ordinal = entry.ordinal;
            for group in groups {
                add(&mut tenant.groups, group, ordinal);
                entry.acl.groups.push(group.clone());
            }
            for user in users {
                add(&mut tenant.users, user, ordinal);
                entry.acl.users.push(user.clone());
            }
            entry.acl = normalized(&entry.acl);
        }
        AclMutation::Revoke { groups, users, .. } => {
            let entry = tenant.entries.get_mut(doc_id).expect("checked above");
            let ordinal = entry.ordinal;
            let (revoked_groups, revoked_users) = match (groups, users) {
                (None, None) => (entry.acl.groups.clone(), entry.acl.users.clone()),
                _ => (groups.clone().unwrap_or_default(), users.clone().unwrap_or_default()),
            };
            for group in &revoked_groups {
                remove(&mut tenant.groups, group, ordinal);
            }
            for user in &revoked_users {
                remove(&mut tenant.users, user, ordinal);
            }
            entry.acl.groups.retain(|group| !revoked_groups.contains(group));
            entry.acl.users.retain(|user| !revoked_users.contains(user));
        }
    }
    Ok(())
}

fn normalized(acl: &DocAcl) -> DocAcl {
    let mut groups = acl.groups.clone();
    groups.sort();
    groups.dedup();
    let mut users = acl.users.clone();
    users.sort();
    users.dedup();
    DocAcl { groups, users }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Principal;

    fn upsert(store: &AclStore, tenant: &str, doc: &str, version: u64, groups: &[&str]) -> DocOrdinal {
        let ordinal = store.reserve_ordinals(1).start;
        store
            .apply(vec![AclMutation::Upsert {
                tenant: tenant.into(),
                doc_id: doc.into(),
                version,
                ordinal,
                title: doc.into(),
                acl: DocAcl { groups: groups.iter().map(|g| g.to_string()).collect(), users: vec![] },
            }])
            .unwrap();
        ordinal
    }

    #[test]
    fn scope_is_tenant_and_group_bound() {
        let store = AclStore::new();
        let a = upsert(&store, "acme", "d1", 1, &["eng"]);
        let b = upsert(&store, "globex", "d1", 1, &["eng"]);
        let scope = store.load().scope_for(&Principal::new("acme", "u", ["eng"]));
        assert!(scope.allows(a));
        assert!(!scope.allows(b));
        assert_eq!(scope.epoch(), 2);
    }

    #[test]
    fn upsert_tombstones_the_previous_version() {
        let store = AclStore::new();
        let old = upsert(&store, "acme", "d1", 1, &["eng"]);
        let new = upsert(&store, "acme", "d1", 2, &["eng"]);
        let snapshot = store.load();
        let principal = Principal::new("acme", "u", ["eng"]);
        assert!(!snapshot.allows(&principal, old));
        assert!(snapshot.allows(&principal, new));
        assert!(snapshot.is_tombstoned(old));
    }

    #[test]
    fn revoke_without_lists_removes_everyone_and_failed_batch_changes_nothing() {
        let store = AclStore::new();
        let ordinal = upsert(&store, "acme", "d1", 1, &["eng", "ops"]);
        let before = store.epoch();
        let failed = store.apply(vec![
            AclMutation::Revoke { tenant: "acme".into(), doc_id: "d1".into(), groups: None, users: None },
            AclMutation::Delete { tenant: "acme".into(), doc_id: "missing".into() },
        ]);
        assert_eq!(failed, Err(AclError::UnknownDocument { doc_id: "missing".into() }));
        assert_eq!(store.epoch(), before);
        assert!(store.load().allows(&Principal::new("acme", "u", ["ops"]), ordinal));
        store
            .apply(vec![AclMutation::Revoke { tenant: "acme".into(), doc_id: "d1".into(), groups: None, users: None }])
            .unwrap();
        assert!(!store.load().allows(&Principal::new("acme", "u", ["ops"]), ordinal));
        assert_eq!(store.changes_since(before).len(), 1);
    }
}
