//! The read path both backends share: [`ReadPath`] embeds a question through the per-principal
//! query-vector cache ([`QueryEmbedder`]) and hands scope, query and budget to one of its
//! [`Coordinator`] actors, each on an arbiter of its own, over the backend's
//! [`CandidateSearch`].

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix::{Actor, Addr, Arbiter};
use lru::LruCache;
use tokio::sync::oneshot;

use crate::acl::AuthorizationScope;
use crate::embed::{EmbedError, Embedder};
use crate::index::IndexError;

use super::coordinator::{ContextBudget, Coordinator, Retrieve};
use super::search::CandidateSearch;
use super::{Reranker, RetrievalQuery, RetrievalResult, Retrieved};

/// Query-cache key: the asking principal (tenant and user) and the normalized text. Keyed per
/// principal so a cache hit (a faster answer) never tells one user what another asked recently,
/// inside a tenant or across tenants.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct QueryKey {
    tenant: String,
    user: String,
    text: String,
}

/// The embedder of questions, with a bounded LRU cache of query vectors per principal (key: the
/// principal and the whitespace-normalized lowercase text; entries are never shared between
/// principals, so hit timing cannot reveal another user's questions).
pub struct QueryEmbedder {
    embedder: Arc<dyn Embedder>,
    cache: Mutex<LruCache<QueryKey, Arc<Vec<f32>>>>,
}

impl QueryEmbedder {
    /// A cache of `capacity` query vectors (at least one) in front of `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>, capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity.max(1)).expect("at least one");
        Self { embedder, cache: Mutex::new(LruCache::new(capacity)) }
    }

    /// The vector of `text` asked by (`tenant`, `user`).
    pub async fn embed(&self, tenant: &str, user: &str, text: &str) -> RetrievalResult<Arc<Vec<f32>>> {
        let key = QueryKey {
            tenant: tenant.to_owned(),
            user: user.to_owned(),
            text: text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
        };
        if let Some(hit) = self.lock().get(&key) {
            return Ok(Arc::clone(hit));
        }
        let mut vectors = self.embedder.embed(std::slice::from_ref(&key.text)).await?;
        let vector = Arc::new(vectors.pop().ok_or(EmbedError::Shape { expected: 1, got: 0 })?);
        self.lock().put(key, Arc::clone(&vector));
        Ok(vector)
    }

    /// Forgets every cached vector (the engine's state was replaced).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<QueryKey, Arc<Vec<f32>>>> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Candidates asked of each retriever per query.
#[derive(Clone, Copy, Debug)]
pub struct CandidateCounts {
    /// Lexical candidates (0 skips BM25).
    pub lexical: usize,
    /// Vector candidates.
    pub vector: usize,
}

/// One backend's read path: the query embedder and the coordinator actors over its searches.
/// Dropping it stops the coordinators' arbiters.
pub struct ReadPath {
    queries: Arc<QueryEmbedder>,
    counts: CandidateCounts,
    coordinators: Vec<Addr<Coordinator>>,
    arbiters: Vec<Arbiter>,
    next: AtomicUsize,
}

impl ReadPath {
    /// Starts `coordinators` coordinator actors (at least one), each on a new arbiter, over
    /// `search`. Call it inside a running actix System.
    pub fn start(
        queries: Arc<QueryEmbedder>,
        counts: CandidateCounts,
        search: Arc<dyn CandidateSearch>,
        rrf_k: f64,
        reranker: Arc<dyn Reranker>,
        coordinators: usize,
    ) -> Self {
        let arbiters: Vec<Arbiter> = (0..coordinators.max(1)).map(|_| Arbiter::new()).collect();
        let coordinators = arbiters
            .iter()
            .map(|arbiter| {
                let (search, reranker) = (Arc::clone(&search), Arc::clone(&reranker));
                Coordinator::start_in_arbiter(&arbiter.handle(), move |_| Coordinator::new(search, rrf_k, reranker))
            })
            .collect();
        Self { queries, counts, coordinators, arbiters, next: AtomicUsize::new(0) }
    }

    /// The coordinators a read path starts by default: one per available core (at most 16).
    pub fn default_coordinators() -> usize {
        std::thread::available_parallelism().map_or(1, usize::from).min(16)
    }

    /// The query embedder.
    pub fn queries(&self) -> &Arc<QueryEmbedder> {
        &self.queries
    }

    /// Hybrid retrieval of `text` inside `scope` with the configured candidate counts, budgeted
    /// into a final context when `budget` is given.
    pub async fn retrieve(
        &self,
        scope: &AuthorizationScope,
        text: &str,
        budget: Option<ContextBudget>,
    ) -> RetrievalResult<Retrieved> {
        if scope.reads_nothing() {
            return Ok(Retrieved::default());
        }
        let vector = self.queries.embed(scope.tenant(), scope.user(), text).await?;
        let query = RetrievalQuery {
            text: text.to_owned(),
            vector: Some(vector.as_ref().clone()),
            lexical_candidates: self.counts.lexical,
            vector_candidates: self.counts.vector,
        };
        self.retrieve_query(scope, query, budget).await
    }

    /// Retrieval of an explicit query (evaluations run lexical, vector and hybrid apart).
    pub async fn retrieve_query(
        &self,
        scope: &AuthorizationScope,
        query: RetrievalQuery,
        budget: Option<ContextBudget>,
    ) -> RetrievalResult<Retrieved> {
        let coordinator = &self.coordinators[self.next.fetch_add(1, Ordering::Relaxed) % self.coordinators.len()];
        let (reply, result) = oneshot::channel();
        // Queued whatever the mailbox's length (admission bounds the requests in flight); a
        // stopped coordinator drops the message, and with it the reply: unavailable.
        coordinator.do_send(Retrieve { scope: scope.clone(), query, budget, reply });
        result.await.map_err(|_| IndexError::Unavailable)?
    }
}

impl Drop for ReadPath {
    fn drop(&mut self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use async_trait::async_trait;

    use super::*;
    use crate::domain::Principal;
    use crate::embed::HashedEmbedder;
    use crate::retrieval::{IdentityReranker, RankedLists};

    /// Test FAKE: a backend that finds nothing and records the thread each search ran on.
    #[derive(Default)]
    struct ThreadRecorder {
        threads: Mutex<Vec<std::thread::ThreadId>>,
    }

    #[async_trait]
    impl CandidateSearch for ThreadRecorder {
        fn dimension(&self) -> usize {
            16
        }

        async fn search(&self, _: &AuthorizationScope, _: &RetrievalQuery) -> RetrievalResult<RankedLists> {
            self.threads.lock().unwrap().push(std::thread::current().id());
            Ok(RankedLists::default())
        }
    }

    /// Requests are dealt to the coordinators in turn, each on a thread of its own and none on
    /// the caller's: one coordinator's thread does not serialize them all.
    #[actix_rt::test]
    async fn requests_are_dealt_to_coordinators_on_threads_of_their_own() {
        let search = Arc::new(ThreadRecorder::default());
        let read_path = ReadPath::start(
            Arc::new(QueryEmbedder::new(Arc::new(HashedEmbedder::new(16)), 8)),
            CandidateCounts { lexical: 5, vector: 5 },
            search.clone(),
            60.0,
            Arc::new(IdentityReranker),
            3,
        );
        let principal = Principal {
            tenant: "acme".into(),
            user: "u".into(),
            groups: ["all".to_owned()].into(),
            roles: Default::default(),
        };
        let scope = AuthorizationScope::for_principal(&principal, 0);
        for _ in 0..6 {
            read_path.retrieve(&scope, "launch code", None).await.unwrap();
        }
        let threads = search.threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 6);
        let distinct: HashSet<_> = threads.iter().collect();
        assert_eq!(distinct.len(), 3, "three coordinators, three threads");
        assert!(!distinct.contains(&std::thread::current().id()));
        assert_eq!(threads[0..3], threads[3..6], "dealt in turn");
    }
}
