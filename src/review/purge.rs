//! [`PurgeOnDelete`]: the backend's write side, purging review texts as documents go. After a
//! delete is durable and enforced, and before it is acknowledged, every stored text of the
//! document is deleted from review items (and the generated text of the items that had it in
//! their context); after an upsert, the texts of the versions it superseded. A purge that fails
//! is logged and counted (`warrant_review_purge_failures_total`) and does not undo the
//! acknowledged write: the writer's periodic sweep purges whatever is not live (and a reviewer
//! is never shown a version that is not live anyway).

use std::sync::Arc;

use async_trait::async_trait;

use crate::acl::AclMutation;
use crate::retrieval::{DocumentInput, RetrievalResult, UpsertOutcome, WriteSide};

use super::ReviewStore;

/// A [`WriteSide`] that purges review texts of the documents it deletes or supersedes.
pub struct PurgeOnDelete {
    inner: Arc<dyn WriteSide>,
    reviews: Arc<dyn ReviewStore>,
}

impl PurgeOnDelete {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn WriteSide>, reviews: Arc<dyn ReviewStore>) -> Self {
        Self { inner, reviews }
    }

    async fn purge(&self, tenant: &str, doc_ids: &[String]) {
        match self.reviews.purge_documents(tenant, doc_ids).await {
            Ok(0) => {}
            Ok(items) => {
                metrics::counter!("warrant_review_texts_purged_total").increment(items);
            }
            Err(error) => {
                metrics::counter!("warrant_review_purge_failures_total").increment(1);
                tracing::error!(code = error.code(), %error, "review texts of a removed document were not purged; the sweep will");
            }
        }
    }
}

#[async_trait]
impl WriteSide for PurgeOnDelete {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        let doc_ids: Vec<String> = inputs.iter().map(|input| input.doc_id.clone()).collect();
        let outcome = self.inner.upsert(tenant, inputs).await?;
        self.purge(tenant, &doc_ids).await;
        Ok(outcome)
    }

    async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        let deleted = match &mutation {
            AclMutation::Delete { tenant, doc_id } => Some((tenant.clone(), doc_id.clone())),
            AclMutation::Upsert { .. } | AclMutation::Grant { .. } | AclMutation::Revoke { .. } => None,
        };
        let epoch = self.inner.mutate(mutation).await?;
        if let Some((tenant, doc_id)) = deleted {
            self.purge(&tenant, &[doc_id]).await;
        }
        Ok(epoch)
    }
}
