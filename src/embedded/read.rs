//! The embedded engine's read side: the scope of a principal under the current ACL snapshot,
//! retrieval through the shared read path (`crate::retrieval::ReadPath`, over the shard actors'
//! [`ShardSearch`](super::ShardSearch)), the authorization of cited chunks (the snapshot itself)
//! and one readable document.

use std::sync::Arc;

use async_trait::async_trait;

use crate::acl::AuthorizationScope;
use crate::domain::{Chunk, Principal};
use crate::retrieval::{Authorization, DocumentView, ReadPath, ReadSide, RetrievalResult, Retrieved};

use super::engine::{Engine, shard_of};

impl Engine {
    /// The scope of `principal` under the current ACL snapshot.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        self.core.load().acl.load().scope_for(principal)
    }

    /// Embeds a question of (`tenant`, `user`) through the query cache ([`QueryEmbedder`]).
    pub async fn embed_query(&self, tenant: &str, user: &str, text: &str) -> RetrievalResult<Arc<Vec<f32>>> {
        self.queries.embed(tenant, user, text).await
    }

    /// Hybrid retrieval of `text` inside `scope` (candidates only, no budget).
    pub async fn retrieve(&self, scope: &AuthorizationScope, text: &str) -> RetrievalResult<Retrieved> {
        self.read_path().retrieve(scope, text, None).await
    }
}

#[async_trait]
impl ReadSide for Engine {
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        Ok(Engine::scope(self, principal))
    }

    fn read_path(&self) -> Arc<ReadPath> {
        Engine::read_path(self)
    }

    /// The current ACL snapshot: it answers for every chunk, not only `_chunks`.
    async fn authorization(
        &self,
        _principal: &Principal,
        _chunks: &[Arc<Chunk>],
    ) -> RetrievalResult<Arc<dyn Authorization>> {
        Ok(self.acl().load())
    }

    async fn document(&self, principal: &Principal, doc_id: &str) -> RetrievalResult<Option<DocumentView>> {
        let core = self.core.load();
        let snapshot = core.acl.load();
        let Some(entry) =
            snapshot.entry(&principal.tenant, doc_id).filter(|entry| snapshot.allows(principal, entry.ordinal))
        else {
            return Ok(None);
        };
        let shard = shard_of(&principal.tenant, doc_id, core.shards.len());
        let chunks = core.shards.get(shard).map(|shard| shard.chunks_of(entry.ordinal)).unwrap_or_default();
        Ok(Some(DocumentView {
            doc_id: entry.doc_id.to_string(),
            version: entry.version,
            title: entry.title.clone(),
            acl_epoch: snapshot.epoch(),
            chunks,
        }))
    }

    fn embedder_name(&self) -> &str {
        self.embedder.name()
    }

    async fn acl_state(&self) -> RetrievalResult<(u64, String)> {
        let acl = self.acl();
        Ok((acl.epoch(), acl.lineage().to_owned()))
    }
}
