//! Retrieval quality on labeled collections: every query is asked by a principal of its own
//! tenant through a real backend's [`crate::retrieval::ReadPath`] (the embedded
//! [`Engine`], or [`PostgresBackend`] with `--backend postgres`) three times — lexical only,
//! vector only, and hybrid (the fused path the answer pipeline uses) — and scored with the
//! standard TREC/BEIR measures. Both backends get the same corpus inputs, the same candidate
//! budget and the same scoring, so their reports compare line by line.
//!
//! Chunks are mapped to their documents before scoring: a document ranks where its best chunk
//! ranks (first occurrence in the fused, best-first candidate list). Measures, averaged over the
//! queries that have at least one positive judgment:
//! - nDCG@10 (Järvelin & Kekäläinen 2002) with trec_eval's linear gain `rel / log2(rank + 1)`
//!   (what BEIR reports through pytrec_eval), ideal ranking from the judged relevances;
//! - Recall@k: relevant documents in the top k over all relevant documents;
//! - MRR@10: reciprocal rank of the first relevant document in the top 10, else 0.
//!
//! Invariant checked on every answer: no retrieved chunk belongs to another tenant than the
//! query's (`cross_tenant_hits` must stay 0).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use serde::Serialize;

use super::cache::CachingEmbedder;
use super::dataset::{Dataset, DatasetError, EvalQuery, IngestSummary, Progress, ingest, principal_of};
use super::stats::{Interval, mean_interval, paired_difference};
use crate::acl::AuthorizationScope;
use crate::config::{ConfigError, Settings, StorageBackend};
use crate::domain::Principal;
use crate::embed::Embedder;
use crate::embedded::{Engine, EngineParams};
use crate::postgres::{PostgresBackend, PostgresParams};
use crate::providers::ProviderError;
use crate::retrieval::{Candidate, ReadPath, RetrievalError, RetrievalQuery, RetrievalResult};

/// Documents per upsert when ingesting a dataset.
pub const INGEST_BATCH: usize = 128;

/// Rank cut-off of nDCG and MRR.
const CUTOFF: usize = 10;
/// Deep recall cut-off: the candidate budget must reach this many documents.
pub const DEEP_CUTOFF: usize = 100;

/// Normalized discounted cumulative gain of `ranked` (best first) at `k`, with graded `judged`
/// relevances (linear gain, trec_eval). 0 when nothing is relevant.
pub fn ndcg_at_k(ranked: &[String], judged: &HashMap<String, u32>, k: usize) -> f64 {
    let discount = |index: usize| 1.0 / ((index + 2) as f64).log2();
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(index, doc)| f64::from(judged.get(doc).copied().unwrap_or(0)) * discount(index))
        .sum();
    let mut ideal: Vec<u32> = judged.values().copied().filter(|&relevance| relevance > 0).collect();
    ideal.sort_unstable_by(|left, right| right.cmp(left));
    let idcg: f64 =
        ideal.iter().take(k).enumerate().map(|(index, &relevance)| f64::from(relevance) * discount(index)).sum();
    if idcg > 0.0 { dcg / idcg } else { 0.0 }
}

/// Share of the relevant documents found in the top `k` of `ranked`.
pub fn recall_at_k(ranked: &[String], judged: &HashMap<String, u32>, k: usize) -> f64 {
    let relevant = judged.values().filter(|&&relevance| relevance > 0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranked.iter().take(k).filter(|doc| judged.get(*doc).is_some_and(|&relevance| relevance > 0)).count();
    found as f64 / relevant as f64
}

/// Reciprocal rank of the first relevant document in the top `k`, else 0.
pub fn mrr_at_k(ranked: &[String], judged: &HashMap<String, u32>, k: usize) -> f64 {
    ranked
        .iter()
        .take(k)
        .position(|doc| judged.get(doc).is_some_and(|&relevance| relevance > 0))
        .map_or(0.0, |index| 1.0 / (index + 1) as f64)
}

/// Document ids in the order of their best chunk (candidates are best first).
pub fn documents_of(candidates: &[Candidate]) -> Vec<String> {
    let mut seen = HashSet::new();
    candidates
        .iter()
        .filter(|candidate| seen.insert(candidate.chunk.doc_id.as_str()))
        .map(|candidate| candidate.chunk.doc_id.clone())
        .collect()
}

/// Mean measures of one retriever.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RetrieverMetrics {
    /// Mean nDCG@10.
    pub ndcg_at_10: f64,
    /// Mean Recall@10.
    pub recall_at_10: f64,
    /// Mean Recall@100.
    pub recall_at_100: f64,
    /// Mean MRR@10.
    pub mrr_at_10: f64,
}

impl RetrieverMetrics {
    /// Measures of one ranking.
    pub fn of(ranked: &[String], judged: &HashMap<String, u32>) -> Self {
        Self {
            ndcg_at_10: ndcg_at_k(ranked, judged, CUTOFF),
            recall_at_10: recall_at_k(ranked, judged, CUTOFF),
            recall_at_100: recall_at_k(ranked, judged, DEEP_CUTOFF),
            mrr_at_10: mrr_at_k(ranked, judged, CUTOFF),
        }
    }

    fn add(&mut self, other: Self) {
        self.ndcg_at_10 += other.ndcg_at_10;
        self.recall_at_10 += other.recall_at_10;
        self.recall_at_100 += other.recall_at_100;
        self.mrr_at_10 += other.mrr_at_10;
    }

    fn mean(self, count: usize) -> Self {
        let count = count.max(1) as f64;
        Self {
            ndcg_at_10: self.ndcg_at_10 / count,
            recall_at_10: self.recall_at_10 / count,
            recall_at_100: self.recall_at_100 / count,
            mrr_at_10: self.mrr_at_10 / count,
        }
    }
}

/// Parameters the run used (so a report can be reproduced).
#[derive(Clone, Debug, Serialize)]
pub struct RunParams {
    /// Chunk size, tokens.
    pub max_tokens: usize,
    /// Chunk overlap, tokens.
    pub overlap_tokens: usize,
    /// RRF constant.
    pub rrf_k: f64,
    /// Lexical candidates per shard.
    pub lexical_candidates: usize,
    /// Vector candidates per shard.
    pub vector_candidates: usize,
    /// Shards (embedded backend; 0 for postgres).
    pub shards: usize,
    /// `hnsw.ef_search` of the postgres backend's sessions (absent for the embedded backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ef_search: Option<usize>,
}

/// The report of `warrant eval retrieval`.
#[derive(Clone, Debug, Serialize)]
pub struct RetrievalReport {
    /// The backend asked: `embedded` or `postgres`.
    pub backend: &'static str,
    /// Embedder name.
    pub embedder: String,
    /// Dataset name (folder, e.g. `scifact/train`).
    pub dataset: String,
    /// Queries scored (those with at least one positive judgment, after any limit).
    pub queries: usize,
    /// BM25 only.
    pub lexical: RetrieverMetrics,
    /// Vector search only.
    pub vector: RetrieverMetrics,
    /// Reciprocal rank fusion of both.
    pub hybrid: RetrieverMetrics,
    /// 95 % bootstrap intervals over queries: nDCG@10 of each retriever and hybrid's paired
    /// gain over each single retriever.
    pub confidence: Confidence,
    /// Retrieved chunks of another tenant than the query's (must be 0).
    pub cross_tenant_hits: usize,
    /// Per-query nDCG@10, in query order (written by `--per-query`, for paired comparisons
    /// across runs).
    #[serde(skip)]
    pub per_query: Vec<QueryScores>,
    /// Run parameters.
    pub params: RunParams,
    /// Seconds spent asking the queries.
    pub query_seconds: f64,
}

/// nDCG@10 intervals of one run (see [`super::stats`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Confidence {
    /// BM25 only.
    pub lexical: Interval,
    /// Vector only.
    pub vector: Interval,
    /// Hybrid.
    pub hybrid: Interval,
    /// Hybrid minus lexical, paired by query.
    pub hybrid_minus_lexical: Interval,
    /// Hybrid minus vector, paired by query.
    pub hybrid_minus_vector: Interval,
}

impl Confidence {
    fn of(per_query: &[QueryScores]) -> Self {
        let column = |pick: fn(&QueryScores) -> f64| per_query.iter().map(pick).collect::<Vec<f64>>();
        let (lexical, vector, hybrid) =
            (column(|query| query.lexical), column(|query| query.vector), column(|query| query.hybrid));
        Self {
            lexical: mean_interval(&lexical),
            vector: mean_interval(&vector),
            hybrid: mean_interval(&hybrid),
            hybrid_minus_lexical: paired_difference(&hybrid, &lexical),
            hybrid_minus_vector: paired_difference(&hybrid, &vector),
        }
    }
}

/// nDCG@10 of one query under each retriever.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryScores {
    /// Query id.
    pub query_id: String,
    /// BM25 only.
    pub lexical: f64,
    /// Vector only.
    pub vector: f64,
    /// Hybrid.
    pub hybrid: f64,
}

/// Options of an evaluation run.
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalOptions {
    /// Score only the first N judged queries.
    pub limit_queries: Option<usize>,
}

/// The judged queries of `dataset` in file order, limited.
pub fn judged_queries(dataset: &Dataset, options: EvalOptions) -> Vec<&EvalQuery> {
    dataset
        .queries
        .iter()
        .filter(|query| dataset.qrels.get(&query.id).is_some_and(|judged| !judged.is_empty()))
        .take(options.limit_queries.unwrap_or(usize::MAX))
        .collect()
}

/// A backend as the evaluation asks it: the scope of a principal, its query embedding and its
/// scoped retrieval.
#[async_trait]
trait EvalTarget: Send + Sync {
    /// `embedded` or `postgres`.
    fn backend(&self) -> &'static str;
    /// The embedder's name.
    fn embedder_name(&self) -> String;
    /// The parameters to report.
    fn run_params(&self) -> RunParams;
    /// The scope of `principal`, as a request of this backend gets it.
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope>;
    /// The backend's read path (query embedding, the coordinators).
    fn read_path(&self) -> Arc<ReadPath>;
}

#[async_trait]
impl EvalTarget for Engine {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn embedder_name(&self) -> String {
        self.embedder().name().to_owned()
    }

    fn run_params(&self) -> RunParams {
        let params = self.params();
        RunParams {
            max_tokens: params.chunking.max_tokens,
            overlap_tokens: params.chunking.overlap_tokens,
            rrf_k: params.rrf_k,
            lexical_candidates: params.lexical_candidates,
            vector_candidates: params.vector_candidates,
            shards: params.shards,
            ef_search: None,
        }
    }

    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        Ok(Engine::scope(self, principal))
    }

    fn read_path(&self) -> Arc<ReadPath> {
        Engine::read_path(self)
    }
}

#[async_trait]
impl EvalTarget for PostgresBackend {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn embedder_name(&self) -> String {
        self.embedder().name().to_owned()
    }

    fn run_params(&self) -> RunParams {
        let params = self.params();
        RunParams {
            max_tokens: params.chunking.max_tokens,
            overlap_tokens: params.chunking.overlap_tokens,
            rrf_k: params.rrf_k,
            lexical_candidates: params.lexical_candidates,
            vector_candidates: params.vector_candidates,
            shards: 0,
            ef_search: Some(params.ef_search),
        }
    }

    /// The tenant's epoch read, then the cached tenant's bitmap scope when the backend holds
    /// it, else the principal evaluated by the database ([`crate::retrieval::ReadSide::scope`]).
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        crate::retrieval::ReadSide::scope(self, principal).await
    }

    fn read_path(&self) -> Arc<ReadPath> {
        Arc::clone(PostgresBackend::read_path(self))
    }
}

/// Asks every judged query of `dataset` (already ingested into `engine`) three ways and scores
/// the answers.
pub async fn evaluate(
    engine: &Arc<Engine>,
    dataset: &Dataset,
    options: EvalOptions,
) -> RetrievalResult<RetrievalReport> {
    evaluate_on(engine.as_ref(), dataset, options).await
}

/// [`evaluate`] on the postgres backend (the dataset already ingested into its database): each
/// query's scope is the one a request gets, so a backend whose tenant cache holds the tenant is
/// measured on its cached engine, else on the SQL statements.
pub async fn evaluate_postgres(
    backend: &PostgresBackend,
    dataset: &Dataset,
    options: EvalOptions,
) -> RetrievalResult<RetrievalReport> {
    evaluate_on(backend, dataset, options).await
}

async fn evaluate_on(
    target: &dyn EvalTarget,
    dataset: &Dataset,
    options: EvalOptions,
) -> RetrievalResult<RetrievalReport> {
    let started = Instant::now();
    let params = target.run_params();
    let queries = judged_queries(dataset, options);
    let (mut lexical, mut vector, mut hybrid) =
        (RetrieverMetrics::default(), RetrieverMetrics::default(), RetrieverMetrics::default());
    let mut cross_tenant_hits = 0;
    let mut per_query = Vec::with_capacity(queries.len());
    for query in &queries {
        let tenant = query.tenant();
        let scope = target.scope(&principal_of(tenant)).await?;
        let read_path = target.read_path();
        let embedded = read_path.queries().embed(scope.tenant(), scope.user(), &query.text).await?.as_ref().clone();
        let ask = |vector: Option<Vec<f32>>, lexical_candidates: usize| RetrievalQuery {
            text: query.text.clone(),
            vector,
            lexical_candidates,
            vector_candidates: params.vector_candidates,
        };
        let runs = [
            (&mut lexical, ask(None, params.lexical_candidates)),
            (&mut vector, ask(Some(embedded.clone()), 0)),
            (&mut hybrid, ask(Some(embedded), params.lexical_candidates)),
        ];
        let judged = &dataset.qrels[&query.id];
        let mut ndcg = [0.0; 3];
        for ((total, request), ndcg) in runs.into_iter().zip(&mut ndcg) {
            let retrieved = read_path.retrieve_query(&scope, request, None).await?;
            cross_tenant_hits +=
                retrieved.candidates.iter().filter(|candidate| candidate.chunk.tenant != tenant).count();
            let metrics = RetrieverMetrics::of(&documents_of(&retrieved.candidates), judged);
            *ndcg = metrics.ndcg_at_10;
            RetrieverMetrics::add(total, metrics);
        }
        let [lexical, vector, hybrid] = ndcg;
        per_query.push(QueryScores { query_id: query.id.clone(), lexical, vector, hybrid });
    }
    let count = queries.len();
    Ok(RetrievalReport {
        backend: target.backend(),
        embedder: target.embedder_name(),
        dataset: dataset.name.clone(),
        queries: count,
        lexical: RetrieverMetrics::mean(lexical, count),
        vector: RetrieverMetrics::mean(vector, count),
        hybrid: RetrieverMetrics::mean(hybrid, count),
        confidence: Confidence::of(&per_query),
        cross_tenant_hits,
        per_query,
        params,
        query_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Errors of an evaluation run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The dataset could not be read.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The embedder could not be built.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// Ingestion or retrieval failed.
    #[error(transparent)]
    Retrieval(#[from] RetrievalError),
    /// The configuration does not allow the run (e.g. no URL for the postgres backend).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The answer pipeline failed (a server fault, not an abstention).
    #[error("answer pipeline failed: {0}")]
    Answer(String),
    /// The embedding cache could not be written.
    #[error("cannot write the embedding cache {path}: {source}")]
    Cache {
        /// The cache file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Options of `warrant eval retrieval` beyond the settings.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Score only the first N judged queries.
    pub limit_queries: Option<usize>,
    /// Folder of the on-disk embedding cache (`None`: no cache).
    pub cache_dir: Option<PathBuf>,
}

/// Batches between two checkpoints of the embedding cache during ingestion.
const CACHE_CHECKPOINT_BATCHES: usize = 8;

/// Forwards progress and checkpoints the embedding cache every few batches, so an interrupted
/// run keeps what it embedded.
pub(super) struct Checkpointing<'a> {
    inner: &'a dyn Progress,
    cache: Option<&'a CachingEmbedder>,
    batches: AtomicUsize,
}

impl<'a> Checkpointing<'a> {
    /// Forwards to `inner`, checkpointing `cache` (when there is one).
    pub(super) fn new(inner: &'a dyn Progress, cache: Option<&'a CachingEmbedder>) -> Self {
        Self { inner, cache, batches: AtomicUsize::new(0) }
    }
}

impl Progress for Checkpointing<'_> {
    fn start(&self, total: usize) {
        self.inner.start(total);
    }

    fn advance(&self, documents: usize) {
        self.inner.advance(documents);
        let batches = self.batches.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(cache) = self.cache.filter(|_| batches.is_multiple_of(CACHE_CHECKPOINT_BATCHES))
            && let Err(error) = cache.save()
        {
            tracing::warn!(%error, path = %cache.path().display(), "cannot checkpoint the embedding cache");
        }
    }

    fn finish(&self) {
        self.inner.finish();
    }
}

pub(super) fn save(cache: Option<&CachingEmbedder>) -> Result<(), EvalError> {
    match cache {
        Some(cache) => cache.save().map_err(|source| EvalError::Cache { path: cache.path().to_path_buf(), source }),
        None => Ok(()),
    }
}

/// An embedder for an evaluation, with the on-disk cache behind it when there is one.
pub(super) type EvalEmbedder = (Arc<dyn Embedder>, Option<Arc<CachingEmbedder>>);

/// The configured embedder, behind the on-disk cache unless it is the cheap hashed one.
async fn eval_embedder(
    settings: &Settings,
    dataset: &Dataset,
    options: &RunOptions,
) -> Result<EvalEmbedder, EvalError> {
    let embedder = crate::providers::embedder(settings).await?;
    cached(embedder, dataset, options.cache_dir.as_deref())
}

/// `embedder` behind the on-disk cache in `cache_dir` for `dataset`, unless there is no folder or
/// the embedder is the cheap hashed one.
pub(super) fn cached(
    embedder: Arc<dyn Embedder>,
    dataset: &Dataset,
    cache_dir: Option<&Path>,
) -> Result<EvalEmbedder, EvalError> {
    match cache_dir {
        Some(dir) if !embedder.name().starts_with("hashed") => {
            let cache = Arc::new(CachingEmbedder::open(Arc::clone(&embedder), dir, &dataset.corpus_sha256()?));
            tracing::info!(path = %cache.path().display(), vectors = cache.loaded(), "embedding cache");
            Ok((Arc::clone(&cache) as Arc<dyn Embedder>, Some(cache)))
        }
        _ => Ok((embedder, None)),
    }
}

/// The whole `warrant eval retrieval` run on the backend `storage.backend` names: the configured
/// embedder (behind the on-disk cache unless it is the cheap hashed one), the backend with the
/// evaluation candidate budget, the corpus ingested, every judged query asked three ways. The
/// postgres backend connects to the URL in the variable `storage.postgres.url_env` names (see
/// [`run_postgres`]). Must run inside an actix System.
pub async fn run(
    settings: &Settings,
    dataset: &Dataset,
    options: &RunOptions,
    progress: &dyn Progress,
) -> Result<(IngestSummary, RetrievalReport), EvalError> {
    if settings.storage.backend == StorageBackend::Postgres {
        let params = PostgresParams::from_settings(settings)?;
        return run_postgres(settings, params, dataset, options, progress).await;
    }
    let (embedder, cache) = eval_embedder(settings, dataset, options).await?;
    let params = with_eval_budget(EngineParams::from_settings(settings, embedder.dimension()));
    let engine = Engine::start(params, embedder)?;
    let checkpointing = Checkpointing::new(progress, cache.as_deref());
    let summary = ingest(&engine, dataset, INGEST_BATCH, &checkpointing).await?;
    save(cache.as_deref())?;
    let report = evaluate(&engine, dataset, EvalOptions { limit_queries: options.limit_queries }).await?;
    save(cache.as_deref())?;
    Ok((summary, report))
}

/// [`run`] on the postgres backend at `params.url`: connects (applying pending migrations),
/// ingests the corpus into the database (the same inputs and batches as the embedded run; a
/// document already there gets a new version), and asks the queries with the evaluation
/// candidate budget and an `hnsw.ef_search` of at least [`EF_SEARCH_PER_CANDIDATE`] times the
/// vector candidates. Other documents of the dataset's tenants in that database would be ranked
/// too: use a database of its own.
pub async fn run_postgres(
    settings: &Settings,
    params: PostgresParams,
    dataset: &Dataset,
    options: &RunOptions,
    progress: &dyn Progress,
) -> Result<(IngestSummary, RetrievalReport), EvalError> {
    let (embedder, cache) = eval_embedder(settings, dataset, options).await?;
    let backend = PostgresBackend::connect(with_postgres_eval_budget(params), embedder).await?;
    let checkpointing = Checkpointing::new(progress, cache.as_deref());
    let summary = ingest(&backend, dataset, INGEST_BATCH, &checkpointing).await?;
    save(cache.as_deref())?;
    let report = evaluate_postgres(&backend, dataset, EvalOptions { limit_queries: options.limit_queries }).await?;
    save(cache.as_deref())?;
    Ok((summary, report))
}

/// `hnsw.ef_search` per vector candidate asked in an evaluation: at 100 candidates, `ef_search`
/// 100 kept nDCG@10 0.2992 of the exact 0.3304 on SciFact and 400 all of it (BENCHMARKS.md).
pub const EF_SEARCH_PER_CANDIDATE: usize = 4;

/// The postgres backend's counterpart of [`with_eval_budget`]: the candidate budgets raised to
/// [`DEEP_CUTOFF`] and `hnsw.ef_search` to [`EF_SEARCH_PER_CANDIDATE`] per vector candidate.
pub fn with_postgres_eval_budget(mut params: PostgresParams) -> PostgresParams {
    params.lexical_candidates = params.lexical_candidates.max(DEEP_CUTOFF);
    params.vector_candidates = params.vector_candidates.max(DEEP_CUTOFF);
    params.ef_search = params.ef_search.max(EF_SEARCH_PER_CANDIDATE * params.vector_candidates);
    params
}

/// Raises the per-shard candidate budgets of `params` so that every retriever can return
/// [`DEEP_CUTOFF`] documents (Recall@100 needs them).
pub fn with_eval_budget(mut params: EngineParams) -> EngineParams {
    params.lexical_candidates = params.lexical_candidates.max(DEEP_CUTOFF);
    params.vector_candidates = params.vector_candidates.max(DEEP_CUTOFF);
    params
}

#[cfg(test)]
mod tests;
