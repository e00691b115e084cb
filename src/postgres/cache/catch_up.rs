//! Catching a cached tenant up to the database: in one REPEATABLE READ, read-only transaction
//! entered into the tenant, the change log from the cached epoch on ([`sql::CHANGES_SINCE`]) and
//! the chunks, with their embeddings, of the versions its upserts made live
//! ([`sql::VERSION_CHUNKS`]); then each epoch's changes are applied in order as a replica applies
//! its primary's ([`crate::embedded::Engine::apply_replicated`]: the versions' chunks indexed
//! under the database's ordinals, then the ACL change published). Nothing is re-embedded.
//!
//! A version whose chunks are gone in the snapshot was superseded or deleted by a later change
//! the same catch-up applies: it is shipped without chunks (live, with nothing to find, between
//! the two epochs of one catch-up; never readable once it ends).
//!
//! The history is checked before anything is applied: the rows at the cached epoch must carry
//! the commit time recorded when it was reached, every epoch up to the tenant's must be there,
//! each change must carry the database's lineage. Otherwise the tenant is dropped and reloads.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::acl::{AclChange, AclMutation};
use crate::domain::{Chunk, DocAcl};
use crate::storage::EncodedDocument;

use super::super::fault::pooled;
use super::load::{chunk_row, ordinal, snapshot};
use super::{Cached, TenantCache, sql};
use crate::retrieval::DatabaseOperation;

/// Why a catch-up did not bring its tenant up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::postgres) struct Behind {
    /// The fallback reason counted.
    pub(in crate::postgres) reason: &'static str,
    /// Whether the cached state cannot continue (the tenant must reload), rather than the
    /// database having failed a statement (the next read tries again).
    pub(in crate::postgres) reload: bool,
}

const fn reload(reason: &'static str) -> Behind {
    Behind { reason, reload: true }
}

/// One change row of [`sql::CHANGES_SINCE`].
struct ChangeRow {
    epoch: u64,
    mutation: AclMutation,
    committed: String,
    lineage: String,
}

impl TenantCache {
    /// Brings `cached` (`tenant`'s entry) up to at least `epoch`: one catch-up at a time per
    /// tenant, in a task of its own on the cache's arbiter (an abandoned request does not stop
    /// it half-way); readers that arrive meanwhile wait for it and find the work done.
    pub(in crate::postgres) async fn catch_up(
        self: &Arc<Self>,
        tenant: &str,
        cached: &Arc<Cached>,
        epoch: u64,
    ) -> Result<(), Behind> {
        let history = Arc::clone(&cached.history).lock_owned().await;
        if cached.engine.acl().epoch() >= epoch {
            return Ok(());
        }
        let (cache, entry, owner) = (Arc::clone(self), Arc::clone(cached), tenant.to_owned());
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let task = async move {
            let mut history = history;
            let _ = reply.send(cache.apply_changes(&owner, &entry, &mut history).await);
        };
        let spawned = self.runner().is_some_and(|runner| runner.spawn(task));
        let outcome = match spawned {
            // The task dropped without a reply (its arbiter stopped): nothing is known.
            true => outcome.await.unwrap_or(Err(reload("catch_up_failed"))),
            false => Err(reload("no_actor_system")),
        };
        let label = match &outcome {
            Ok(()) => "applied",
            Err(behind) if behind.reload => "reload",
            Err(_) => "failed",
        };
        metrics::counter!("warrant_tenant_cache_catch_ups_total", "outcome" => label).increment(1);
        outcome?;
        if cached.engine.acl().epoch() < epoch {
            return Err(reload("catch_up_short"));
        }
        self.save_local_if_behind(tenant, cached);
        Ok(())
    }

    /// Reads what changed since the cached epoch and applies it (see the module's
    /// documentation); `history` is the commit time at the cached epoch, moved along.
    pub(super) async fn apply_changes(
        &self,
        tenant: &str,
        cached: &Cached,
        history: &mut Option<String>,
    ) -> Result<(), Behind> {
        let database = Behind { reason: "database", reload: false };
        let from = cached.engine.acl().epoch();
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Read).await.map_err(|_| database)?;
        let mut client = pooled(&self.pool, DatabaseOperation::Read).await.map_err(|_| database)?;
        let transaction = snapshot(&mut client, tenant).await.map_err(|_| database)?;
        let state = transaction.query_opt(sql::TENANT_STATE, &[&tenant]).await.map_err(|_| database)?;
        let target = state.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64);
        if target < from {
            return Err(reload("epoch_went_back"));
        }
        let rows = transaction
            .query(sql::CHANGES_SINCE, &[&tenant, &i64::try_from(from).unwrap_or(i64::MAX)])
            .await
            .map_err(|_| database)?;
        let mut changes = Vec::with_capacity(rows.len());
        for row in &rows {
            changes.push(change_row(tenant, row).ok_or(reload("history_changed"))?);
        }
        check_history(&changes, from, target, history.as_deref(), &cached.lineage)?;
        let upserts: Vec<(String, i64)> = changes
            .iter()
            .filter_map(|change| match &change.mutation {
                AclMutation::Upsert { doc_id, version, .. } => Some((doc_id.clone(), *version as i64)),
                _ => None,
            })
            .collect();
        let mut chunks: HashMap<u32, Vec<(Chunk, Vec<f32>)>> = HashMap::new();
        if !upserts.is_empty() {
            let (doc_ids, versions): (Vec<String>, Vec<i64>) = upserts.into_iter().unzip();
            let rows =
                transaction.query(sql::VERSION_CHUNKS, &[&tenant, &doc_ids, &versions]).await.map_err(|_| database)?;
            for row in &rows {
                let (chunk, vector) = chunk_row(tenant, row).map_err(|_| reload("history_changed"))?;
                chunks.entry(chunk.doc_ordinal).or_default().push((chunk, vector));
            }
        }
        transaction.commit().await.map_err(|_| database)?;
        drop(client);
        let mut epochs: BTreeMap<u64, Vec<&ChangeRow>> = BTreeMap::new();
        for change in changes.iter().filter(|change| change.epoch > from) {
            epochs.entry(change.epoch).or_default().push(change);
        }
        for (epoch, group) in epochs {
            let mut documents = Vec::new();
            for change in &group {
                if let AclMutation::Upsert { ordinal, .. } = change.mutation {
                    let mut items = chunks.remove(&ordinal).unwrap_or_default();
                    items.sort_by_key(|(chunk, _)| chunk.ordinal);
                    let refs: Vec<(&Chunk, &[f32])> =
                        items.iter().map(|(chunk, vector)| (chunk, vector.as_slice())).collect();
                    documents.push(EncodedDocument::encode(ordinal, &refs));
                }
            }
            let entries: Vec<AclChange> =
                group.iter().map(|change| AclChange { epoch, mutation: change.mutation.clone() }).collect();
            if let Err(error) = cached.engine.apply_replicated(&entries, &documents, &RoaringBitmap::new()).await {
                tracing::warn!(%error, "a cached tenant could not apply its changes; it reloads");
                return Err(reload("apply_failed"));
            }
            metrics::counter!("warrant_tenant_cache_catch_up_epochs_total").increment(1);
            *history = group.last().map(|change| change.committed.clone());
        }
        Ok(())
    }
}

/// The rows must continue the cached history: at `from` (when above 0) the recorded commit
/// time, then every epoch up to `target` in order, all of the cached lineage.
fn check_history(
    changes: &[ChangeRow],
    from: u64,
    target: u64,
    committed: Option<&str>,
    lineage: &str,
) -> Result<(), Behind> {
    if changes.iter().any(|change| change.lineage != lineage) {
        return Err(reload("history_changed"));
    }
    if from > 0 {
        let at_from: Vec<&ChangeRow> = changes.iter().filter(|change| change.epoch == from).collect();
        if at_from.is_empty() || at_from.iter().any(|change| Some(change.committed.as_str()) != committed) {
            return Err(reload("history_changed"));
        }
    }
    let mut expected = from;
    for change in changes.iter().filter(|change| change.epoch > from) {
        if change.epoch == expected + 1 {
            expected = change.epoch;
        } else if change.epoch != expected {
            return Err(reload("epochs_missing"));
        }
    }
    if expected != target {
        return Err(reload("epochs_missing"));
    }
    Ok(())
}

/// A change row as the change it records; `None` for a row that cannot be one (an upsert
/// whose version is unknown, an unknown kind).
fn change_row(tenant: &str, row: &tokio_postgres::Row) -> Option<ChangeRow> {
    let epoch = u64::try_from(row.get::<_, i64>(0)).ok()?;
    let kind: &str = row.get(2);
    let doc_id: String = row.get(3);
    let groups: Vec<String> = row.get(5);
    let users: Vec<String> = row.get(6);
    let tenant = tenant.to_owned();
    let mutation = match kind {
        "upsert" => AclMutation::Upsert {
            tenant,
            doc_id,
            version: u64::try_from(row.get::<_, Option<i64>>(4)?).ok()?,
            ordinal: ordinal(row.get::<_, Option<i64>>(7)?).ok()?,
            title: row.get::<_, Option<String>>(8)?,
            acl: DocAcl { groups, users },
        },
        "delete" => AclMutation::Delete { tenant, doc_id },
        "grant" => AclMutation::Grant { tenant, doc_id, groups, users },
        // A revoke of every reader is recorded with both lists empty (a revoke that removed
        // nobody is never recorded).
        "revoke" if groups.is_empty() && users.is_empty() => {
            AclMutation::Revoke { tenant, doc_id, groups: None, users: None }
        }
        "revoke" => AclMutation::Revoke { tenant, doc_id, groups: Some(groups), users: Some(users) },
        _ => return None,
    };
    Some(ChangeRow { epoch, mutation, committed: row.get(9), lineage: row.get(10) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(epoch: u64, committed: &str) -> ChangeRow {
        ChangeRow {
            epoch,
            mutation: AclMutation::Delete { tenant: "t".into(), doc_id: "d".into() },
            committed: committed.into(),
            lineage: "l".into(),
        }
    }

    #[test]
    fn a_catch_up_continues_only_the_cached_history() {
        let rows = [row(2, "b"), row(3, "c"), row(3, "c"), row(4, "d")];
        assert_eq!(check_history(&rows, 2, 4, Some("b"), "l"), Ok(()));
        // Another commit at the cached epoch: a database restored to another history.
        assert_eq!(check_history(&rows, 2, 4, Some("x"), "l"), Err(reload("history_changed")));
        // Another lineage.
        assert_eq!(check_history(&rows, 2, 4, Some("b"), "m"), Err(reload("history_changed")));
        // An epoch missing (pruned), or fewer than the tenant's epoch.
        let gap = [row(2, "b"), row(4, "d")];
        assert_eq!(check_history(&gap, 2, 4, Some("b"), "l"), Err(reload("epochs_missing")));
        assert_eq!(check_history(&rows, 2, 5, Some("b"), "l"), Err(reload("epochs_missing")));
        // From epoch 0 there is nothing to match.
        assert_eq!(check_history(&[row(1, "a")], 0, 1, None, "l"), Ok(()));
        assert_eq!(check_history(&[], 2, 2, Some("b"), "l"), Err(reload("history_changed")));
    }
}
