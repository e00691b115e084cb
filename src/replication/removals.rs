//! What a change applied on a replica took away, and from whom: the *reach* of a removal (the
//! tenant and the readers who could lose access by it), recorded in a bounded log that each
//! request checks before it returns (issue 59: one counter per replica failed every request in
//! flight, in every tenant, on any revoke; 1.2-1.7 % of healthy reads got `replica_stale`).
//!
//! A principal reads a document when the document is live in its tenant and its access list
//! names the principal's user or one of its groups (`AclSnapshot::allows`). So a change can
//! take a document away only from the readers its live entry named *before* the change: a
//! delete or a new version (the old one's content goes) from every reader of the entry, a
//! revoke from the readers it removes (every reader when it names no list), a grant or a new
//! document from nobody. Judged on the snapshot before the change, whatever the change does to
//! the same document in between (a change is published at once: no request sees a state inside
//! it).
//!
//! Invariants:
//! - a removal is recorded after its change is applied and before the follower acknowledges it
//!   (`super::follower`), so a request that loaded the state before the change and returns after
//!   the primary acknowledged the change sees the removal;
//! - a request is failed only by a removal recorded after it started whose reach names its
//!   tenant and its user or one of its groups, or when removals it has not seen were dropped
//!   from the log (at most [`KEPT`] are kept): never by another tenant's change.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::acl::{AclChange, AclMutation, AclSnapshot};
use crate::domain::Principal;

/// Removals kept for requests in flight; a request that started before the oldest kept one is
/// failed (it cannot be told apart from an affected one).
pub const KEPT: usize = 1024;

/// The readers of one tenant a change can take documents away from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// The tenant.
    pub tenant: String,
    /// Groups whose members can lose access.
    pub groups: BTreeSet<String>,
    /// Users who can lose access.
    pub users: BTreeSet<String>,
}

impl Reach {
    /// Whether `principal` may have lost access by it.
    pub fn affects(&self, principal: &Principal) -> bool {
        self.tenant == principal.tenant
            && (self.users.contains(&principal.user) || !self.groups.is_disjoint(&principal.groups))
    }
}

/// The reach of `changes` (one change's entries, in order), judged on `before`, the snapshot
/// they apply to: one [`Reach`] per tenant that can lose anything, none for a change that only
/// adds (new documents, grants).
pub fn reach_of(changes: &[AclChange], before: &AclSnapshot) -> Vec<Reach> {
    let mut reaches: BTreeMap<&str, Reach> = BTreeMap::new();
    for change in changes {
        let (tenant, doc_id, lists) = match &change.mutation {
            AclMutation::Grant { .. } => continue,
            AclMutation::Upsert { tenant, doc_id, .. } | AclMutation::Delete { tenant, doc_id } => {
                (tenant, doc_id, None)
            }
            AclMutation::Revoke { tenant, doc_id, groups, users } => match (groups, users) {
                (None, None) => (tenant, doc_id, None),
                _ => (tenant, doc_id, Some((groups.as_deref().unwrap_or(&[]), users.as_deref().unwrap_or(&[])))),
            },
        };
        // No live entry: nobody could read any version of it.
        let Some(entry) = before.entry(tenant, doc_id) else { continue };
        let reach = reaches.entry(tenant).or_insert_with(|| Reach { tenant: tenant.clone(), ..Reach::default() });
        let (groups, users) = (&entry.acl.groups, &entry.acl.users);
        match lists {
            None => {
                reach.groups.extend(groups.iter().cloned());
                reach.users.extend(users.iter().cloned());
            }
            Some((revoked_groups, revoked_users)) => {
                reach.groups.extend(groups.iter().filter(|group| revoked_groups.contains(group)).cloned());
                reach.users.extend(users.iter().filter(|user| revoked_users.contains(user)).cloned());
            }
        }
    }
    reaches.into_values().filter(|reach| !reach.groups.is_empty() || !reach.users.is_empty()).collect()
}

/// The replica's log of recent removals, numbered from 1.
#[derive(Default)]
pub struct Removals {
    /// The number of the last removal recorded (0: none); moved only under `recent`'s lock,
    /// after the removal is in it.
    last: AtomicU64,
    /// The last [`KEPT`] removals, oldest first.
    recent: Mutex<VecDeque<(u64, Reach)>>,
}

impl Removals {
    fn recent(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Reach)>> {
        self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of the last removal recorded: what a request starting now has seen.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::SeqCst)
    }

    /// Records the reaches of one applied change.
    pub fn record(&self, reaches: Vec<Reach>) {
        if reaches.is_empty() {
            return;
        }
        let mut recent = self.recent();
        let mut last = self.last.load(Ordering::SeqCst);
        for reach in reaches {
            last += 1;
            recent.push_back((last, reach));
        }
        while recent.len() > KEPT {
            recent.pop_front();
        }
        self.last.store(last, Ordering::SeqCst);
    }

    /// Whether a removal recorded after `seen` may have taken something from `principal`
    /// (`None`: unknown, every removal counts), or one it has not seen is no longer kept.
    pub fn affect_since(&self, seen: u64, principal: Option<&Principal>) -> bool {
        if self.last.load(Ordering::SeqCst) == seen {
            return false;
        }
        let recent = self.recent();
        if recent.front().is_none_or(|(first, _)| *first > seen.saturating_add(1)) {
            return true;
        }
        let mut unseen = recent.iter().filter(|(number, _)| *number > seen);
        match principal {
            Some(principal) => unseen.any(|(_, reach)| reach.affects(principal)),
            None => unseen.next().is_some(),
        }
    }
}

#[cfg(test)]
mod tests;
