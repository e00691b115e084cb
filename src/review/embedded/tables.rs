//! The write side of the embedded review store: every table open in one write transaction
//! ([`Tables`]), and the item-level writes made of it — insert as the tenant's next item, evict
//! the oldest beyond the tenant's bound, remove one item with everything keyed by it, purge the
//! texts of document versions that are not live.
//!
//! Invariants: an item and its id, status, texts, generated text and verdicts are written and
//! removed together, and the tenant's (last sequence, items held) row follows in the same
//! transaction; a text (and the generated text) is stored only when its document version is
//! live at the write ([`super::Liveness`], asked under the store's gate).

use redb::ReadableTable;

use super::super::item::{self, ReviewItem};
use super::super::{NewItem, ReviewResult};
use super::{GENERATED, IDS, ITEMS, Liveness, PENDING, REVIEWED, SOURCES, STATUS, TENANTS, VERDICTS, failed};

/// Every table, open in one write transaction.
pub(super) struct Tables<'txn> {
    pub(super) tenants: redb::Table<'txn, &'static str, (u64, u64)>,
    pub(super) items: redb::Table<'txn, (&'static str, u64), &'static [u8]>,
    pub(super) ids: redb::Table<'txn, (&'static str, &'static str), u64>,
    pub(super) status: redb::Table<'txn, (&'static str, u8, u64), ()>,
    pub(super) sources: redb::Table<'txn, (&'static str, &'static str, u64, u64), &'static [u8]>,
    pub(super) generated: redb::Table<'txn, (&'static str, u64), &'static [u8]>,
    pub(super) verdicts: redb::Table<'txn, (&'static str, u64, u32), &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn redb::WriteTransaction, file: &str) -> ReviewResult<Self> {
        Ok(Self {
            tenants: txn.open_table(TENANTS).map_err(|error| failed(file, error))?,
            items: txn.open_table(ITEMS).map_err(|error| failed(file, error))?,
            ids: txn.open_table(IDS).map_err(|error| failed(file, error))?,
            status: txn.open_table(STATUS).map_err(|error| failed(file, error))?,
            sources: txn.open_table(SOURCES).map_err(|error| failed(file, error))?,
            generated: txn.open_table(GENERATED).map_err(|error| failed(file, error))?,
            verdicts: txn.open_table(VERDICTS).map_err(|error| failed(file, error))?,
        })
    }

    /// Writes one item as the next of its tenant; returns its sequence.
    pub(super) fn insert(&mut self, new: &NewItem, liveness: &dyn Liveness, file: &str) -> ReviewResult<u64> {
        let tenant = new.tenant.as_str();
        let (last, held) =
            self.tenants.get(tenant).map_err(|error| failed(file, error))?.map_or((0, 0), |guard| guard.value());
        let seq = last + 1;
        let item = &new.item;
        self.items.insert((tenant, seq), item::encode(item).as_slice()).map_err(|error| failed(file, error))?;
        self.ids.insert((tenant, item.review_id.as_str()), seq).map_err(|error| failed(file, error))?;
        self.status.insert((tenant, PENDING, seq), ()).map_err(|error| failed(file, error))?;
        let mut every_source_live = true;
        for (doc_id, version) in versions(item) {
            if liveness.live_version(tenant, doc_id) != Some(version) {
                every_source_live = false;
                continue;
            }
            if let Some(texts) = new.sources.get(doc_id) {
                self.sources
                    .insert((tenant, doc_id, version, seq), item::encode(texts).as_slice())
                    .map_err(|error| failed(file, error))?;
            }
        }
        if every_source_live {
            self.generated
                .insert((tenant, seq), item::encode(&new.generated).as_slice())
                .map_err(|error| failed(file, error))?;
        }
        self.tenants.insert(tenant, (seq, held + 1)).map_err(|error| failed(file, error))?;
        Ok(seq)
    }

    /// Deletes the oldest items of `tenant` until it holds at most `max`; returns how many.
    pub(super) fn evict(&mut self, tenant: &str, max: u64, file: &str) -> ReviewResult<u64> {
        let mut evicted = 0;
        loop {
            let (last, held) =
                self.tenants.get(tenant).map_err(|error| failed(file, error))?.map_or((0, 0), |guard| guard.value());
            if held <= max {
                return Ok(evicted);
            }
            let oldest = self
                .items
                .range((tenant, 0)..=(tenant, u64::MAX))
                .map_err(|error| failed(file, error))?
                .next()
                .transpose()
                .map_err(|error| failed(file, error))?
                .map(|(key, _)| key.value().1);
            let Some(seq) = oldest else {
                // The count drifted from the rows: believe the rows.
                self.tenants.insert(tenant, (last, 0)).map_err(|error| failed(file, error))?;
                return Ok(evicted);
            };
            self.remove(tenant, seq, file)?;
            evicted += 1;
        }
    }

    /// Deletes item `seq` of `tenant` and everything keyed by it, and counts it out.
    pub(super) fn remove(&mut self, tenant: &str, seq: u64, file: &str) -> ReviewResult<()> {
        let removed =
            self.items.remove((tenant, seq)).map_err(|error| failed(file, error))?.map(|guard| guard.value().to_vec());
        let Some(bytes) = removed else { return Ok(()) };
        match item::decode::<ReviewItem>("review item", &bytes) {
            Ok(item) => {
                self.ids.remove((tenant, item.review_id.as_str())).map_err(|error| failed(file, error))?;
                for (doc_id, version) in versions(&item) {
                    self.sources.remove((tenant, doc_id, version, seq)).map_err(|error| failed(file, error))?;
                }
            }
            // Its id and texts cannot be found to be deleted; the item itself goes.
            Err(corrupt) => tracing::error!(error = %corrupt, "a corrupted review item was deleted"),
        }
        self.status.remove((tenant, PENDING, seq)).map_err(|error| failed(file, error))?;
        self.status.remove((tenant, REVIEWED, seq)).map_err(|error| failed(file, error))?;
        self.generated.remove((tenant, seq)).map_err(|error| failed(file, error))?;
        self.verdicts
            .retain_in((tenant, seq, 0)..=(tenant, seq, u32::MAX), |_, _| false)
            .map_err(|error| failed(file, error))?;
        let (last, held) =
            self.tenants.get(tenant).map_err(|error| failed(file, error))?.map_or((0, 0), |guard| guard.value());
        self.tenants.insert(tenant, (last, held.saturating_sub(1))).map_err(|error| failed(file, error))?;
        Ok(())
    }

    /// Deletes the stored texts of `doc_id` of `tenant` whose version is not live, and the
    /// generated text of their items; returns the items touched.
    pub(super) fn purge(
        &mut self,
        tenant: &str,
        doc_id: &str,
        liveness: &dyn Liveness,
        file: &str,
    ) -> ReviewResult<u64> {
        let live = liveness.live_version(tenant, doc_id);
        let mut dead: Vec<(u64, u64)> = Vec::new();
        for entry in self
            .sources
            .range((tenant, doc_id, 0, 0)..=(tenant, doc_id, u64::MAX, u64::MAX))
            .map_err(|error| failed(file, error))?
        {
            let (key, _) = entry.map_err(|error| failed(file, error))?;
            let (_, _, version, seq) = key.value();
            if Some(version) != live {
                dead.push((version, seq));
            }
        }
        for (version, seq) in &dead {
            self.sources.remove((tenant, doc_id, *version, *seq)).map_err(|error| failed(file, error))?;
            self.generated.remove((tenant, *seq)).map_err(|error| failed(file, error))?;
        }
        Ok(dead.len() as u64)
    }
}

/// Each document of the item's context with the version its sources came from.
pub(super) fn versions(item: &ReviewItem) -> Vec<(&str, u64)> {
    let mut versions: Vec<(&str, u64)> =
        item.sources.iter().map(|source| (source.doc_id.as_str(), source.doc_version)).collect();
    versions.sort_unstable();
    versions.dedup();
    versions
}
