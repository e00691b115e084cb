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

/// The in-memory change log: every batch with `epoch > floor`, in order. Entries at or below the
/// floor were compacted away (they are inside a checkpoint).
#[derive(Debug, Default)]
struct ChangeLog {
    floor: u64,
    entries: Vec<AclChange>,
}

/// A validated, not yet published change of the ACL state: the snapshot it would publish and
/// the change-log entries it would append. Built by [`AclStore::prepare`] and made current by
/// [`AclStore::publish`]; in between the caller makes it durable (the engine commits it to the
/// system of record), so nothing becomes visible before it is durable.
#[derive(Debug)]
pub struct Prepared {
    base: Arc<AclSnapshot>,
    next: AclSnapshot,
    changes: Vec<AclChange>,
    next_ordinal: Option<DocOrdinal>,
}

impl Prepared {
    /// The epoch the change publishes (the current epoch when it is a no-op).
    pub fn epoch(&self) -> u64 {
        self.next.epoch
    }

    /// Whether nothing changes (every mutation was a no-op: granting what is granted, revoking
    /// what is not granted). A no-op is never published and never grows the log.
    pub fn is_noop(&self) -> bool {
        self.changes.is_empty()
    }

    /// The change-log entries this change appends.
    pub fn changes(&self) -> &[AclChange] {
        &self.changes
    }

    /// Ordinals this change tombstones (deleted or superseded document versions).
    pub fn retired(&self) -> RoaringBitmap {
        self.next.tombstones.as_ref() - self.base.tombstones.as_ref()
    }

    /// The snapshot this change publishes.
    pub fn snapshot(&self) -> &AclSnapshot {
        &self.next
    }

    /// The ordinal counter a primary's changes move this store to (remote changes only).
    pub fn next_ordinal(&self) -> Option<DocOrdinal> {
        self.next_ordinal
    }

    /// Refuses the change when it leaves a document it upserts or grants on with more than
    /// `limit` users and groups together (a writer's cap, `server.max_acl_names_per_document`;
    /// a replica applying its primary's changes does not check it).
    pub fn check_acl_size(&self, limit: usize) -> AclResult<()> {
        for change in &self.changes {
            let (AclMutation::Upsert { tenant, doc_id, .. } | AclMutation::Grant { tenant, doc_id, .. }) =
                &change.mutation
            else {
                continue;
            };
            if let Some(entry) = self.next.entry(tenant, doc_id)
                && entry.acl.groups.len() + entry.acl.users.len() > limit
            {
                return Err(AclError::TooLarge { what: format!("the access list of document {doc_id}"), limit });
            }
        }
        Ok(())
    }
}

/// The published ACL snapshot, the writer lock, the change log and the lineage of its epochs.
pub struct AclStore {
    current: ArcSwap<AclSnapshot>,
    writer: Mutex<ChangeLog>,
    next_ordinal: AtomicU32,
    lineage: String,
}

impl Default for AclStore {
    fn default() -> Self {
        Self::new()
    }
}

/// A fresh random lineage id (epochs are comparable only within one lineage).
pub fn new_lineage() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl AclStore {
    /// An empty store at epoch 0 with a fresh lineage.
    pub fn new() -> Self {
        Self::restore(AclSnapshot::default(), Vec::new(), 0, new_lineage())
    }

    /// A store resumed from a persisted snapshot, retained log, ordinal counter and lineage.
    /// The log is complete above `first epoch - 1` (or above the snapshot's epoch when empty).
    pub fn restore(snapshot: AclSnapshot, log: Vec<AclChange>, next_ordinal: DocOrdinal, lineage: String) -> Self {
        let floor = log.first().map(|change| change.epoch.saturating_sub(1)).unwrap_or(snapshot.epoch);
        Self {
            current: ArcSwap::from_pointee(snapshot),
            writer: Mutex::new(ChangeLog { floor, entries: log }),
            next_ordinal: AtomicU32::new(next_ordinal),
            lineage,
        }
    }

    /// The same state under another lineage (a primary restored from a snapshot forks history:
    /// its epochs must never be compared with those of the lineage it was restored from).
    pub fn relabeled(self, lineage: String) -> Self {
        Self { lineage, ..self }
    }

    /// The lineage id: epochs of two stores are comparable only when their lineages are equal.
    pub fn lineage(&self) -> &str {
        &self.lineage
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
    /// never published is simply never readable. Fails (changing nothing) when the 32-bit
    /// ordinal space would overflow.
    pub fn reserve_ordinals(&self, count: u32) -> AclResult<std::ops::Range<DocOrdinal>> {
        let mut start = self.next_ordinal.load(Ordering::SeqCst);
        loop {
            let end = start.checked_add(count).ok_or(AclError::Exhausted { what: "document ordinals" })?;
            match self.next_ordinal.compare_exchange(start, end, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(start..end),
                Err(actual) => start = actual,
            }
        }
    }

    /// The next ordinal that would be reserved (for snapshots).
    pub fn next_ordinal(&self) -> DocOrdinal {
        self.next_ordinal.load(Ordering::SeqCst)
    }

    /// Changes with `epoch > since`, in order; [`AclError::Compacted`] when some of them were
    /// compacted away (the caller must re-bootstrap from a snapshot).
    pub fn changes_since(&self, since: u64) -> AclResult<Vec<AclChange>> {
        let log = self.lock_writer();
        if since < log.floor {
            return Err(AclError::Compacted { since, floor: log.floor });
        }
        let first = log.entries.partition_point(|change| change.epoch <= since);
        Ok(log.entries[first..].to_vec())
    }

    /// The epoch at or below which the log was compacted.
    pub fn log_floor(&self) -> u64 {
        self.lock_writer().floor
    }

    /// Drops log entries with `epoch <= up_to` (they are inside a checkpoint).
    pub fn compact(&self, up_to: u64) {
        let mut log = self.lock_writer();
        let up_to = up_to.min(self.epoch());
        if up_to <= log.floor {
            return;
        }
        let keep = log.entries.partition_point(|change| change.epoch <= up_to);
        log.entries.drain(..keep);
        log.floor = up_to;
    }

    /// Validates `mutations` as one batch against the current snapshot and builds the snapshot
    /// it would publish (`epoch + 1`), without publishing anything. No-op mutations (granting
    /// what is granted, revoking what is not) are dropped; when all are, the result is a no-op.
    pub fn prepare(&self, mutations: Vec<AclMutation>) -> AclResult<Prepared> {
        let base = self.current.load_full();
        let mut next = (*base).clone();
        let mut seen = HashSet::new();
        let mut effective = Vec::with_capacity(mutations.len());
        for mutation in mutations {
            if let AclMutation::Upsert { .. } = mutation
                && !seen.insert((mutation.tenant().to_owned(), mutation.doc_id().to_owned()))
            {
                return Err(AclError::DuplicateDocument { doc_id: mutation.doc_id().to_owned() });
            }
            if apply_one(&mut next, &mutation)? {
                effective.push(mutation);
            }
        }
        if effective.is_empty() {
            return Ok(Prepared { next: (*base).clone(), base, changes: Vec::new(), next_ordinal: None });
        }
        next.epoch = base.epoch.checked_add(1).ok_or(AclError::Exhausted { what: "acl epochs" })?;
        let epoch = next.epoch;
        let changes = effective.into_iter().map(|mutation| AclChange { epoch, mutation }).collect();
        Ok(Prepared { base, next, changes, next_ordinal: None })
    }

    /// Builds the snapshot that applying a primary's `changes` (in order, skipping those already
    /// applied) would publish. Ordinals are kept as the primary assigned them.
    pub fn prepare_remote(&self, changes: &[AclChange]) -> AclResult<Prepared> {
        let base = self.current.load_full();
        let mut next = (*base).clone();
        let mut applied = Vec::new();
        let mut next_ordinal = None;
        for change in changes.iter().filter(|change| change.epoch > base.epoch) {
            if change.epoch < next.epoch {
                return Err(AclError::OutOfOrder { epoch: change.epoch });
            }
            apply_one(&mut next, &change.mutation)?;
            next.epoch = change.epoch;
            if let AclMutation::Upsert { ordinal, .. } = change.mutation {
                let after = ordinal.checked_add(1).ok_or(AclError::Exhausted { what: "document ordinals" })?;
                next_ordinal = Some(next_ordinal.unwrap_or(0).max(after));
            }
            applied.push(change.clone());
        }
        Ok(Prepared { base, next, changes: applied, next_ordinal })
    }

    /// Publishes a prepared change (one `ArcSwap::store`) and appends it to the log. Fails,
    /// changing nothing, when another change was published since it was prepared.
    pub fn publish(&self, prepared: Prepared) -> AclResult<u64> {
        let mut log = self.lock_writer();
        if prepared.is_noop() {
            return Ok(self.epoch());
        }
        if !Arc::ptr_eq(&self.current.load_full(), &prepared.base) {
            return Err(AclError::Conflict);
        }
        if let Some(next_ordinal) = prepared.next_ordinal {
            self.next_ordinal.fetch_max(next_ordinal, Ordering::SeqCst);
        }
        let epoch = prepared.next.epoch;
        self.current.store(Arc::new(prepared.next));
        log.entries.extend(prepared.changes);
        Ok(epoch)
    }

    /// Validates and publishes `mutations` as one batch (no durability step: tests, in-memory
    /// engines). On error nothing changes.
    pub fn apply(&self, mutations: Vec<AclMutation>) -> AclResult<u64> {
        let prepared = self.prepare(mutations)?;
        self.publish(prepared)
    }

    /// Applies changes received from a primary, in order, skipping those already applied.
    pub fn apply_remote(&self, changes: &[AclChange]) -> AclResult<u64> {
        let prepared = self.prepare_remote(changes)?;
        self.publish(prepared)
    }

    /// The retained change log (for snapshots).
    pub fn log(&self) -> Vec<AclChange> {
        self.lock_writer().entries.clone()
    }

    fn lock_writer(&self) -> MutexGuard<'_, ChangeLog> {
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

/// Applies one mutation to `snapshot`; returns whether it changed anything.
fn apply_one(snapshot: &mut AclSnapshot, mutation: &AclMutation) -> AclResult<bool> {
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
            let doc_id: Arc<str> = Arc::from(doc_id);
            let entry = DocEntry {
                doc_id: Arc::clone(&doc_id),
                version: *version,
                ordinal: *ordinal,
                title: title.clone(),
                acl,
            };
            tenant.entries.insert(doc_id, Arc::new(entry));
        }
        AclMutation::Delete { .. } => {
            let entry = known.expect("checked above");
            retire(tenant, &mut snapshot.tombstones, &entry);
            tenant.entries.remove(doc_id);
        }
        AclMutation::Grant { groups, users, .. } => {
            let entry = Arc::make_mut(tenant.entries.get_mut(doc_id).expect("checked above"));
            let ordinal = entry.ordinal;
            let before = entry.acl.clone();
            for group in groups {
                add(&mut tenant.groups, group, ordinal);
                entry.acl.groups.push(group.clone());
            }
            for user in users {
                add(&mut tenant.users, user, ordinal);
                entry.acl.users.push(user.clone());
            }
            entry.acl = normalized(&entry.acl);
            return Ok(entry.acl != before);
        }
        AclMutation::Revoke { groups, users, .. } => {
            let entry = Arc::make_mut(tenant.entries.get_mut(doc_id).expect("checked above"));
            let ordinal = entry.ordinal;
            let before = entry.acl.clone();
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
            return Ok(entry.acl != before);
        }
    }
    Ok(true)
}

/// `acl` sorted with repeated names removed (how every access list is kept).
pub fn normalized(acl: &DocAcl) -> DocAcl {
    let mut groups = acl.groups.clone();
    groups.sort();
    groups.dedup();
    let mut users = acl.users.clone();
    users.sort();
    users.dedup();
    DocAcl { groups, users }
}

#[cfg(test)]
mod tests;
