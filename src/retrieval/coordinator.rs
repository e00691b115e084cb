//! The coordinator actor: the one place where the candidates of either backend become a context.
//! It asks its backend's [`CandidateSearch`] for per-retriever ranked lists inside the request's
//! scope, merges them under the tenant check (a hit of another tenant is dropped and counted),
//! fuses them (RRF: Cormack et al. 2009), reranks, and budgets the final context
//! ([`select_context`]) when the request asks for one. It owns the search, the fusion constant and
//! the reranker.
//!
//! Several coordinators run, each on an arbiter (thread) of its own ([`super::ReadPath`] deals
//! requests to them in turn), so requests are not serialized on one thread. Each request is a
//! task of its coordinator's arbiter, dropped as soon as the caller stops waiting (its reply
//! channel closes): a backend's statements in flight are then abandoned (PostgreSQL's are
//! cancelled) as they were when the search ran in the caller's task.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message, ResponseFuture};
use tokio::sync::oneshot;

use crate::acl::AuthorizationScope;

use super::fusion::{Candidate, Retriever, ScoredChunk, reciprocal_rank_fusion};
use super::search::{CandidateSearch, RankedLists};
use super::select::{SelectionLimits, select_context};
use super::{RerankQuery, Reranker, RetrievalQuery, RetrievalResult, Retrieved};

/// What a request asks of its final context: the selection limits, and the least cosine score
/// that makes a vector-only candidate evidence (a lexical match always is).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContextBudget {
    /// Chunks, tokens and chunks per document.
    pub limits: SelectionLimits,
    /// Vector-only candidates below this score are not evidence.
    pub min_vector_score: f32,
}

/// Retrieve fused, reranked (and, with a budget, selected) candidates for one query inside one
/// scope; the result is sent on `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Retrieve {
    /// The request's scope (its bitmap is shared with every search, never copied).
    pub scope: AuthorizationScope,
    /// The validated query.
    pub query: RetrievalQuery,
    /// The final context's budget; `None`: candidates only (`/v1/retrieve`, evaluations).
    pub budget: Option<ContextBudget>,
    /// Where the result goes; closing it abandons the request.
    pub reply: oneshot::Sender<RetrievalResult<Retrieved>>,
}

/// The coordinator actor; see the module docs.
pub struct Coordinator {
    search: Arc<dyn CandidateSearch>,
    rrf_k: f64,
    reranker: Arc<dyn Reranker>,
}

impl Coordinator {
    /// A coordinator over a backend's searches.
    pub fn new(search: Arc<dyn CandidateSearch>, rrf_k: f64, reranker: Arc<dyn Reranker>) -> Self {
        Self { search, rrf_k, reranker }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;
}

impl Handler<Retrieve> for Coordinator {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, message: Retrieve, _: &mut Context<Self>) -> Self::Result {
        let (search, rrf_k, reranker) = (Arc::clone(&self.search), self.rrf_k, Arc::clone(&self.reranker));
        let Retrieve { scope, query, budget, mut reply } = message;
        Box::pin(async move {
            tokio::select! {
                result = retrieve(search.as_ref(), rrf_k, reranker.as_ref(), &scope, &query, budget) => {
                    // The caller may have stopped waiting meanwhile; nothing to tell it then.
                    let _ = reply.send(result);
                }
                () = reply.closed() => {}
            }
        })
    }
}

/// The coordinator's work for one request: search, merge under the tenant check, fuse, rerank,
/// budget.
pub async fn retrieve(
    search: &dyn CandidateSearch,
    rrf_k: f64,
    reranker: &dyn Reranker,
    scope: &AuthorizationScope,
    query: &RetrievalQuery,
    budget: Option<ContextBudget>,
) -> RetrievalResult<Retrieved> {
    if scope.reads_nothing() {
        return Ok(Retrieved::default());
    }
    query.check_vector(search.dimension())?;
    let RankedLists { lexical, vector, vector_reports } = search.search(scope, query).await?;
    let tenant = scope.tenant();
    let mut lists = Vec::with_capacity(2);
    if let Some(hits) = lexical {
        lists.push((Retriever::Lexical, same_tenant(hits, tenant)));
    }
    if let Some(hits) = vector {
        lists.push((Retriever::Vector, same_tenant(hits, tenant)));
    }
    let fused = reciprocal_rank_fusion(lists, rrf_k);
    debug_assert!(fused.iter().all(|candidate| scope.admits(&candidate.chunk)));
    let candidates = reranker.rerank(&RerankQuery { text: &query.text, vector: query.vector.as_deref() }, fused);
    let selecting = std::time::Instant::now();
    let context = budget.and_then(|budget| {
        let evidence: Vec<Candidate> = candidates
            .iter()
            .filter(|candidate| {
                candidate.lexical.is_some()
                    || candidate.vector.is_some_and(|placement| placement.score >= budget.min_vector_score)
            })
            .cloned()
            .collect();
        (!evidence.is_empty()).then(|| select_context(&evidence, budget.limits))
    });
    let selection_elapsed = if budget.is_some() { selecting.elapsed() } else { std::time::Duration::ZERO };
    Ok(Retrieved { candidates, vector_reports, context, selection_elapsed })
}

/// Defence in depth: a hit whose chunk belongs to another tenant than the scope's can only come
/// from a corrupted ordinal mapping or a statement that lost its tenant predicate; it is dropped
/// and counted, never served.
fn same_tenant(hits: Vec<ScoredChunk>, tenant: &str) -> Vec<ScoredChunk> {
    hits.into_iter()
        .filter(|hit| {
            let same = hit.chunk.tenant == tenant;
            if !same {
                metrics::counter!("warrant_scope_violations_total").increment(1);
                tracing::error!("a hit of another tenant reached the coordinator; dropped");
            }
            same
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::domain::{Chunk, ChunkingConfig, DocAcl, Document, Principal, chunk_document};
    use crate::retrieval::IdentityReranker;

    fn chunk(tenant: &str, doc_id: &str, ordinal: u32, text: &str) -> Arc<Chunk> {
        let document = Document {
            tenant: tenant.into(),
            doc_id: doc_id.into(),
            version: 1,
            title: String::new(),
            text: text.into(),
            acl: DocAcl::default(),
            layout: None,
        };
        Arc::new(chunk_document(&document, ordinal, &ChunkingConfig::default()).remove(0))
    }

    /// Test FAKE: a backend whose searches return fixed lists, whatever the scope (as a backend
    /// whose statement lost its tenant predicate would), counting the calls.
    struct FixedSearch {
        lexical: Vec<ScoredChunk>,
        vector: Vec<ScoredChunk>,
        calls: AtomicUsize,
    }

    #[async_trait]
    impl CandidateSearch for FixedSearch {
        fn dimension(&self) -> usize {
            2
        }

        async fn search(&self, _: &AuthorizationScope, query: &RetrievalQuery) -> RetrievalResult<RankedLists> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(RankedLists {
                lexical: (query.lexical_candidates > 0).then(|| self.lexical.clone()),
                vector: query.vector.as_ref().map(|_| self.vector.clone()),
                vector_reports: Vec::new(),
            })
        }
    }

    fn query() -> RetrievalQuery {
        RetrievalQuery {
            text: "launch code".into(),
            vector: Some(vec![1.0, 0.0]),
            lexical_candidates: 10,
            vector_candidates: 10,
        }
    }

    fn scored(chunk: &Arc<Chunk>, score: f32) -> ScoredChunk {
        ScoredChunk { chunk: Arc::clone(chunk), score }
    }

    fn principal(tenant: &str) -> Principal {
        Principal {
            tenant: tenant.into(),
            user: "u".into(),
            groups: ["all".to_owned()].into(),
            roles: Default::default(),
        }
    }

    /// A backend that evaluates the ACL itself (PostgreSQL's scope carries no bitmap) gets the
    /// same tenant check as the shards: a hit of another tenant never reaches fusion.
    #[tokio::test]
    async fn a_hit_of_another_tenant_is_dropped_for_a_backend_evaluated_scope() {
        let own = chunk("acme", "handbook", 1, "The launch code is in the handbook.");
        let foreign = chunk("globex", "secret", 2, "The globex launch code is swordfish.");
        let search = FixedSearch {
            lexical: vec![scored(&foreign, 9.0), scored(&own, 1.0)],
            vector: vec![scored(&foreign, 0.9)],
            calls: AtomicUsize::new(0),
        };
        let scope = AuthorizationScope::for_principal(&principal("acme"), 0);
        let retrieved = retrieve(&search, 60.0, &IdentityReranker, &scope, &query(), None).await.unwrap();
        let tenants: Vec<&str> = retrieved.candidates.iter().map(|candidate| candidate.chunk.tenant.as_str()).collect();
        assert_eq!(tenants, ["acme"]);
    }

    /// An empty bitmap scope never reaches the backend; a backend-evaluated scope always does.
    #[tokio::test]
    async fn an_empty_bitmap_scope_asks_nothing_of_the_backend() {
        let own = chunk("acme", "handbook", 1, "The launch code is in the handbook.");
        let search = FixedSearch { lexical: vec![scored(&own, 1.0)], vector: Vec::new(), calls: AtomicUsize::new(0) };
        let empty = AuthorizationScope::from_bitmap("acme", 0, roaring::RoaringBitmap::new());
        let retrieved = retrieve(&search, 60.0, &IdentityReranker, &empty, &query(), None).await.unwrap();
        assert!(retrieved.candidates.is_empty());
        assert_eq!(search.calls.load(Ordering::SeqCst), 0);
        let scope = AuthorizationScope::for_principal(&principal("acme"), 0);
        let retrieved = retrieve(&search, 60.0, &IdentityReranker, &scope, &query(), None).await.unwrap();
        assert_eq!(retrieved.candidates.len(), 1);
        assert_eq!(search.calls.load(Ordering::SeqCst), 1);
    }

    /// The budget: vector-only candidates under the least score are not evidence; the context is
    /// the selection of the rest, and no evidence at all means no context.
    #[tokio::test]
    async fn the_budget_keeps_evidence_only_and_selects_within_it() {
        let lexical = chunk("acme", "a", 1, "The launch code is in the handbook.");
        let close = chunk("acme", "b", 2, "Launch codes are rotated monthly.");
        let far = chunk("acme", "c", 3, "The cafeteria opens at noon.");
        let search = FixedSearch {
            lexical: vec![scored(&lexical, 2.0)],
            vector: vec![scored(&close, 0.8), scored(&far, 0.1)],
            calls: AtomicUsize::new(0),
        };
        let scope = AuthorizationScope::for_principal(&principal("acme"), 0);
        let budget = ContextBudget {
            limits: SelectionLimits { top_k: 5, token_budget: 1000, max_chunks_per_doc: 2 },
            min_vector_score: 0.5,
        };
        let retrieved = retrieve(&search, 60.0, &IdentityReranker, &scope, &query(), Some(budget)).await.unwrap();
        assert_eq!(retrieved.candidates.len(), 3);
        let context = retrieved.context.expect("evidence was found");
        let mut chosen: Vec<&str> = context.chosen.iter().map(|candidate| candidate.chunk.doc_id.as_str()).collect();
        chosen.sort_unstable();
        assert_eq!(chosen, ["a", "b"]);

        let lexical_off = RetrievalQuery { lexical_candidates: 0, ..query() };
        let strict = ContextBudget { min_vector_score: 0.95, ..budget };
        let retrieved = retrieve(&search, 60.0, &IdentityReranker, &scope, &lexical_off, Some(strict)).await.unwrap();
        assert_eq!(retrieved.candidates.len(), 2);
        assert!(retrieved.context.is_none(), "no candidate is evidence");
    }
}
