//! The review store of the PostgreSQL backend ([`ReviewStore`] over migration 0008's tables):
//! any number of nodes write and read one queue.
//!
//! Invariants: every statement runs in a transaction that entered its tenant first
//! ([`sql::ENTER_TENANT`]: migration 0008 FORCEs row-level security on these tables as 0007 does
//! on the others), and names the tenant (`tenant_id = $1`), so each routes to the tenant's shard
//! group on Citus; the retention sweeps list the tenants holding items in the database-wide scope
//! ([`sql::ENTER_DATABASE`]), which reads `review_tenants` alone; an insert share-locks the heads of the item's documents and
//! stores a source's text only if its version is live, so a delete or upsert committed on any
//! node either waits for the insert (and its purge, run after its commit, deletes what the
//! insert wrote) or is seen by it; a tenant's sequence is taken under its `review_tenants` row
//! lock, so sequences follow commit order and a cursor skips nothing written before the page it
//! came from was read.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::review::item::{self, GeneratedText, ReviewItem, ReviewStatus, SourceText, StoredItem, Summary, Verdict};
use crate::review::{Inserted, NewItem, ReviewError, ReviewResult, ReviewStore};

use super::{PostgresBackend, sql};

/// The review store's error for a failed database request, logged as the backend's are (cause,
/// SQLSTATE, the server's message; never DETAIL or the query) and counted in
/// `warrant_storage_errors_total{cause}`.
fn failed(error: impl super::fault::Fault) -> ReviewError {
    let cause = error.cause();
    metrics::counter!("warrant_storage_errors_total", "cause" => cause.as_str()).increment(1);
    tracing::warn!(
        cause = cause.as_str(),
        sqlstate = error.sqlstate().unwrap_or("none"),
        error = %error.describe(),
        "postgres review store request failed"
    );
    ReviewError::Storage("database request failed".into())
}

/// A transaction on `client` that entered `tenant`: row-level security admits that tenant's rows
/// alone until it ends.
async fn entered<'a>(
    client: &'a mut deadpool_postgres::Object,
    tenant: &str,
    read_only: bool,
) -> ReviewResult<deadpool_postgres::Transaction<'a>> {
    let transaction = client.build_transaction().read_only(read_only).start().await.map_err(failed)?;
    transaction.query_one(sql::ENTER_TENANT, &[&tenant]).await.map_err(failed)?;
    Ok(transaction)
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl PostgresBackend {
    /// Writes the items of one tenant in one transaction; returns (written, evicted).
    async fn insert_tenant(&self, tenant: &str, items: &[&NewItem], max_items: u64) -> ReviewResult<(usize, u64)> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let transaction = entered(&mut client, tenant, false).await?;
        let mut doc_ids: Vec<&str> = items.iter().flat_map(|new| new.item.doc_ids()).collect();
        doc_ids.sort_unstable();
        doc_ids.dedup();
        let live: BTreeMap<String, i64> = transaction
            .query(sql::REVIEW_LIVE_VERSIONS, &[&tenant, &doc_ids])
            .await
            .map_err(failed)?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let mut held = 0_i64;
        for new in items {
            let row = transaction.query_one(sql::REVIEW_NEXT_SEQ, &[&tenant]).await.map_err(failed)?;
            let seq: i64 = row.get(0);
            held = row.get(1);
            let versions: Vec<(&str, u64)> = {
                let mut versions: Vec<(&str, u64)> =
                    new.item.sources.iter().map(|source| (source.doc_id.as_str(), source.doc_version)).collect();
                versions.sort_unstable();
                versions.dedup();
                versions
            };
            let is_live = |doc_id: &str, version: u64| live.get(doc_id) == Some(&signed(version));
            let every_source_live = versions.iter().all(|(doc_id, version)| is_live(doc_id, *version));
            let generated = every_source_live.then(|| item::encode(&new.generated));
            let created = signed(new.item.created_ms);
            transaction
                .execute(
                    sql::REVIEW_INSERT,
                    &[&tenant, &seq, &new.item.review_id, &created, &item::encode(&new.item), &generated],
                )
                .await
                .map_err(failed)?;
            for (doc_id, version) in versions.iter().filter(|(doc_id, version)| is_live(doc_id, *version)) {
                let Some(texts) = new.sources.get(*doc_id) else { continue };
                transaction
                    .execute(
                        sql::REVIEW_SOURCE_INSERT,
                        &[&tenant, doc_id, &signed(*version), &seq, &item::encode(texts)],
                    )
                    .await
                    .map_err(failed)?;
            }
        }
        let mut evicted = 0;
        let over = held - signed(max_items);
        if over > 0 {
            evicted = transaction.query(sql::REVIEW_EVICT, &[&tenant, &over]).await.map_err(failed)?.len() as i64;
            transaction.execute(sql::REVIEW_COUNT_OUT, &[&tenant, &evicted]).await.map_err(failed)?;
        }
        transaction.commit().await.map_err(failed)?;
        Ok((items.len(), evicted as u64))
    }

    /// The tenants that hold or held review items, read in the database-wide scope.
    async fn review_tenants(&self) -> ReviewResult<Vec<String>> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let transaction = client.build_transaction().read_only(true).start().await.map_err(failed)?;
        transaction.query_one(sql::ENTER_DATABASE, &[]).await.map_err(failed)?;
        let rows = transaction.query(sql::REVIEW_TENANTS, &[]).await.map_err(failed)?;
        transaction.commit().await.map_err(failed)?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Drops the generated text of the items `seqs` of `tenant` (their sources were purged).
    async fn drop_generated(
        transaction: &deadpool_postgres::Transaction<'_>,
        tenant: &str,
        seqs: &[i64],
    ) -> ReviewResult<u64> {
        let mut seqs = seqs.to_vec();
        seqs.sort_unstable();
        seqs.dedup();
        if !seqs.is_empty() {
            transaction.execute(sql::REVIEW_DROP_GENERATED, &[&tenant, &seqs]).await.map_err(failed)?;
        }
        Ok(seqs.len() as u64)
    }
}

#[async_trait]
impl ReviewStore for PostgresBackend {
    async fn insert(&self, items: Vec<NewItem>, max_items_per_tenant: u64) -> ReviewResult<Inserted> {
        let mut by_tenant: BTreeMap<&str, Vec<&NewItem>> = BTreeMap::new();
        for new in &items {
            by_tenant.entry(new.tenant.as_str()).or_default().push(new);
        }
        let mut inserted = Inserted::default();
        for (tenant, items) in by_tenant {
            let (written, evicted) = self.insert_tenant(tenant, &items, max_items_per_tenant).await?;
            inserted.written += written;
            inserted.evicted += evicted;
        }
        Ok(inserted)
    }

    async fn page(
        &self,
        tenant: &str,
        status: Option<ReviewStatus>,
        before: Option<u64>,
        limit: usize,
    ) -> ReviewResult<Vec<Summary>> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let client = entered(&mut client, tenant, true).await?;
        let reviewed = status.map(|status| status == ReviewStatus::Reviewed);
        let below = before.map_or(i64::MAX, signed);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client.query(sql::REVIEW_PAGE, &[&tenant, &below, &reviewed, &limit]).await.map_err(failed)?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let bytes: &[u8] = row.get(1);
                let verdicts: i64 = row.get(2);
                Ok(Summary {
                    seq: seq as u64,
                    item: item::decode::<ReviewItem>("review item", bytes)?,
                    verdicts: u32::try_from(verdicts).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }

    async fn get(&self, tenant: &str, review_id: &str) -> ReviewResult<Option<StoredItem>> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let client = entered(&mut client, tenant, true).await?;
        let Some(row) = client.query_opt(sql::REVIEW_GET, &[&tenant, &review_id]).await.map_err(failed)? else {
            return Ok(None);
        };
        let seq: i64 = row.get(0);
        let item: ReviewItem = item::decode("review item", row.get::<_, &[u8]>(1))?;
        let generated = match row.get::<_, Option<&[u8]>>(2) {
            Some(bytes) => Some(item::decode::<GeneratedText>("review generated text", bytes)?),
            None => None,
        };
        let mut sources = BTreeMap::new();
        for row in client.query(sql::REVIEW_GET_SOURCES, &[&tenant, &seq]).await.map_err(failed)? {
            let texts: Vec<SourceText> = item::decode("review sources", row.get::<_, &[u8]>(1))?;
            sources.insert(row.get::<_, String>(0), texts);
        }
        let mut verdicts = Vec::new();
        for row in client.query(sql::REVIEW_GET_VERDICTS, &[&tenant, &seq]).await.map_err(failed)? {
            verdicts.push(item::decode::<Verdict>("review verdict", row.get::<_, &[u8]>(0))?);
        }
        Ok(Some(StoredItem { seq: seq as u64, item, sources, generated, verdicts }))
    }

    async fn add_verdict(
        &self,
        tenant: &str,
        review_id: &str,
        verdict: &Verdict,
        max_verdicts: u32,
    ) -> ReviewResult<bool> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let transaction = entered(&mut client, tenant, false).await?;
        let Some(row) =
            transaction.query_opt(sql::REVIEW_MARK_REVIEWED, &[&tenant, &review_id]).await.map_err(failed)?
        else {
            return Ok(false);
        };
        let seq: i64 = row.get(0);
        let last: i32 = transaction.query_one(sql::REVIEW_LAST_VERDICT, &[&tenant, &seq]).await.map_err(failed)?.get(0);
        if i64::from(last) >= i64::from(max_verdicts) {
            return Err(ReviewError::TooManyVerdicts(max_verdicts));
        }
        transaction
            .execute(sql::REVIEW_VERDICT_INSERT, &[&tenant, &seq, &(last + 1), &item::encode(verdict)])
            .await
            .map_err(failed)?;
        transaction.commit().await.map_err(failed)?;
        Ok(true)
    }

    async fn purge_documents(&self, tenant: &str, doc_ids: &[String]) -> ReviewResult<u64> {
        let mut client = self.pool.get().await.map_err(failed)?;
        let transaction = entered(&mut client, tenant, false).await?;
        let seqs: Vec<i64> = transaction
            .query(sql::REVIEW_PURGE, &[&tenant, &doc_ids])
            .await
            .map_err(failed)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let purged = Self::drop_generated(&transaction, tenant, &seqs).await?;
        transaction.commit().await.map_err(failed)?;
        Ok(purged)
    }

    async fn expire(&self, cutoff_ms: u64) -> ReviewResult<u64> {
        let tenants = self.review_tenants().await?;
        let mut expired = 0;
        for tenant in tenants {
            let mut client = self.pool.get().await.map_err(failed)?;
            let transaction = entered(&mut client, &tenant, false).await?;
            let gone =
                transaction.query(sql::REVIEW_EXPIRE, &[&tenant, &signed(cutoff_ms)]).await.map_err(failed)?.len()
                    as i64;
            if gone > 0 {
                transaction.execute(sql::REVIEW_COUNT_OUT, &[&tenant, &gone]).await.map_err(failed)?;
            }
            transaction.commit().await.map_err(failed)?;
            expired += gone as u64;
        }
        Ok(expired)
    }

    async fn sweep_dead_documents(&self) -> ReviewResult<u64> {
        let tenants = self.review_tenants().await?;
        let mut purged = 0;
        for tenant in tenants {
            let mut client = self.pool.get().await.map_err(failed)?;
            let transaction = entered(&mut client, &tenant, false).await?;
            let seqs: Vec<i64> = transaction
                .query(sql::REVIEW_SWEEP, &[&tenant])
                .await
                .map_err(failed)?
                .iter()
                .map(|row| row.get(0))
                .collect();
            purged += Self::drop_generated(&transaction, &tenant, &seqs).await?;
            transaction.commit().await.map_err(failed)?;
        }
        Ok(purged)
    }

    async fn tenants(&self) -> ReviewResult<Vec<String>> {
        let mut tenants = self.review_tenants().await?;
        tenants.sort_unstable();
        Ok(tenants)
    }
}
