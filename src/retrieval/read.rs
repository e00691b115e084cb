//! The read side of the [`Engine`]: the scope of a principal under the current ACL snapshot, the
//! per-principal query-vector cache and scoped hybrid retrieval through the repository.

use std::sync::Arc;

use lru::LruCache;

use async_trait::async_trait;

use crate::acl::AuthorizationScope;
use crate::domain::{Chunk, Principal};

use super::backend::{Authorization, DocumentView, ReadSide};
use super::engine::Engine;
use super::{RetrievalQuery, RetrievalResult, Retrieved};

/// Query-cache key: the asking principal (tenant and user) and the normalized text. Keyed per
/// principal so a cache hit (a faster answer) never tells one user what another asked recently,
/// inside a tenant or across tenants.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct QueryKey {
    tenant: String,
    user: String,
    text: String,
}

impl Engine {
    /// The scope of `principal` under the current ACL snapshot.
    pub fn scope(&self, principal: &Principal) -> AuthorizationScope {
        self.core.load().acl.load().scope_for(principal)
    }

    /// Embeds a query of (`tenant`, `user`) through the bounded LRU cache (key: the principal and
    /// the whitespace-normalized lowercase text; entries are never shared between principals, so
    /// hit timing cannot reveal another user's questions).
    pub async fn embed_query(&self, tenant: &str, user: &str, text: &str) -> RetrievalResult<Arc<Vec<f32>>> {
        let key = QueryKey {
            tenant: tenant.to_owned(),
            user: user.to_owned(),
            text: text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
        };
        if let Some(hit) = self.lock_cache().get(&key) {
            return Ok(Arc::clone(hit));
        }
        let mut vectors = self.embedder.embed(std::slice::from_ref(&key.text)).await?;
        let vector = Arc::new(vectors.pop().ok_or(crate::embed::EmbedError::Shape { expected: 1, got: 0 })?);
        self.lock_cache().put(key, Arc::clone(&vector));
        Ok(vector)
    }

    pub(super) fn lock_cache(&self) -> std::sync::MutexGuard<'_, LruCache<QueryKey, Arc<Vec<f32>>>> {
        self.query_cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hybrid retrieval of `text` inside `scope`.
    pub async fn retrieve(&self, scope: &AuthorizationScope, text: &str) -> RetrievalResult<Retrieved> {
        if scope.is_empty() {
            return Ok(Retrieved::default());
        }
        let vector = self.embed_query(scope.tenant(), scope.user(), text).await?;
        let query = RetrievalQuery {
            text: text.to_owned(),
            vector: Some(vector.as_ref().clone()),
            lexical_candidates: self.params.lexical_candidates,
            vector_candidates: self.params.vector_candidates,
        };
        self.repository().retrieve(scope, &query).await
    }
}

#[async_trait]
impl ReadSide for Engine {
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        Ok(Engine::scope(self, principal))
    }

    async fn retrieve(&self, scope: &AuthorizationScope, text: &str) -> RetrievalResult<Retrieved> {
        Engine::retrieve(self, scope, text).await
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
        let shard = super::shard_of(&principal.tenant, doc_id, core.shards.len());
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
