//! Embedding throughput and query latency of the configured embedder, measured through the real
//! [`Engine`] (`warrant-bench embed`).
//!
//! Texts are seeded synthetic English: passages of ~150 words (the size of a default chunk) and
//! distinct short questions of ~10 words, so no shared data is needed and runs are comparable.
//! Measured: passages per second (median of rounds, batches of the engine's embedding batch
//! size), query latency on a cache miss (one text per call, as the answer path embeds a question)
//! and on a query-cache hit ([`Engine::embed_query`] twice on the same text).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::embedded::Engine;
use crate::retrieval::RetrievalResult;

/// A small English vocabulary, enough for realistic WordPiece lengths.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "that",
    "for",
    "with",
    "as",
    "was",
    "on",
    "by",
    "are",
    "this",
    "from",
    "at",
    "be",
    "or",
    "which",
    "an",
    "were",
    "these",
    "cells",
    "patients",
    "protein",
    "expression",
    "increased",
    "reduced",
    "associated",
    "risk",
    "treatment",
    "study",
    "analysis",
    "results",
    "levels",
    "clinical",
    "activity",
    "response",
    "function",
    "gene",
    "mice",
    "human",
    "cancer",
    "disease",
    "effect",
    "significant",
    "data",
    "model",
    "policy",
    "travel",
    "expenses",
    "hotel",
    "reimbursed",
    "night",
    "approval",
    "manager",
    "employees",
    "company",
    "contract",
    "payment",
    "invoice",
    "quarter",
    "revenue",
    "budget",
    "report",
    "security",
    "access",
    "network",
    "server",
    "laptop",
    "password",
    "account",
    "training",
    "schedule",
    "meeting",
    "project",
    "deadline",
    "customer",
    "support",
    "request",
    "software",
    "release",
    "version",
    "database",
    "backup",
    "storage",
    "performance",
    "latency",
    "throughput",
    "measured",
    "compared",
    "observed",
    "higher",
    "lower",
    "between",
    "during",
    "after",
    "before",
    "including",
    "however",
    "therefore",
    "although",
    "because",
    "whereas",
    "mechanism",
    "pathway",
    "receptor",
    "infection",
    "immune",
    "tumor",
    "mutation",
    "sequencing",
    "population",
    "cohort",
    "randomized",
    "trial",
];

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct EmbedBenchConfig {
    /// Passages per throughput round.
    pub passages: usize,
    /// Throughput rounds (the median is reported).
    pub rounds: usize,
    /// Distinct queries timed one by one.
    pub queries: usize,
    /// Seed of the synthetic texts.
    pub seed: u64,
}

impl Default for EmbedBenchConfig {
    fn default() -> Self {
        Self { passages: 64, rounds: 3, queries: 200, seed: 7 }
    }
}

/// Figures of one run.
#[derive(Clone, Debug, Serialize)]
pub struct EmbedBenchReport {
    /// Embedder name.
    pub embedder: String,
    /// Global allocator of the running binary.
    pub allocator: &'static str,
    /// Passages per round.
    pub passages: usize,
    /// Mean words per passage.
    pub passage_words: f64,
    /// Median passages per second over the rounds.
    pub passages_per_s: f64,
    /// Every round's passages per second.
    pub passages_per_s_rounds: Vec<f64>,
    /// Queries timed.
    pub queries: usize,
    /// Median query embedding latency (cache miss), ms.
    pub query_p50_ms: f64,
    /// 99th percentile query embedding latency (cache miss), ms.
    pub query_p99_ms: f64,
    /// Median query latency on a query-cache hit, ms.
    pub query_cache_hit_p50_ms: f64,
    /// Embedding batch size used for passages.
    pub batch_size: usize,
}

fn sentence(rng: &mut SmallRng, words: usize) -> String {
    let mut text: Vec<&str> = (0..words).map(|_| WORDS[rng.gen_range(0..WORDS.len())]).collect();
    if let Some(first) = text.first_mut() {
        *first = match *first {
            "the" => "The",
            "a" => "A",
            other => other,
        };
    }
    text.join(" ") + "."
}

/// Seeded passages of about `words` words, in sentences of 12 to 24 words.
pub fn synthetic_passages(seed: u64, count: usize, words: usize) -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut passage = Vec::new();
            let mut written = 0;
            while written < words {
                let length = rng.gen_range(12..=24).min(words - written).max(1);
                passage.push(sentence(&mut rng, length));
                written += length;
            }
            passage.join(" ")
        })
        .collect()
}

/// Seeded distinct questions of 6 to 14 words.
pub fn synthetic_queries(seed: u64, count: usize) -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_0001);
    (0..count)
        .map(|index| {
            let length = rng.gen_range(6..=14);
            format!("{} q{index}?", sentence(&mut rng, length).trim_end_matches('.'))
        })
        .collect()
}

/// Value at quantile `q` (nearest rank) of `samples`, in ms.
pub fn quantile_ms(samples: &[Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        length if length % 2 == 1 => sorted[length / 2],
        length => (sorted[length / 2 - 1] + sorted[length / 2]) / 2.0,
    }
}

/// Runs the benchmark on `engine` (its embedder, batch size and query cache).
pub async fn run(engine: &Arc<Engine>, config: EmbedBenchConfig) -> RetrievalResult<EmbedBenchReport> {
    let embedder = Arc::clone(engine.embedder());
    let batch_size = engine.params().embed_batch.max(1);
    let passages = synthetic_passages(config.seed, config.passages, 150);
    let passage_words = passages.iter().map(|passage| passage.split_whitespace().count()).sum::<usize>() as f64
        / passages.len().max(1) as f64;
    // Warm-up: first-call allocations, thread pools.
    embedder.embed(&passages[..passages.len().min(2)]).await?;

    let mut rounds = Vec::with_capacity(config.rounds);
    for _ in 0..config.rounds.max(1) {
        let started = Instant::now();
        let mut embedded = 0;
        for batch in passages.chunks(batch_size) {
            let vectors = embedder.embed(batch).await?;
            assert_eq!(vectors.len(), batch.len(), "one vector per passage");
            embedded += vectors.len();
        }
        rounds.push(embedded as f64 / started.elapsed().as_secs_f64());
    }

    let queries = synthetic_queries(config.seed, config.queries);
    let mut misses = Vec::with_capacity(queries.len());
    let mut hits = Vec::with_capacity(queries.len());
    for query in &queries {
        let started = Instant::now();
        let vector = engine.embed_query("bench", "bench", query).await?;
        misses.push(started.elapsed());
        assert_eq!(vector.len(), embedder.dimension(), "a full vector");
        let started = Instant::now();
        let again = engine.embed_query("bench", "bench", query).await?;
        hits.push(started.elapsed());
        assert!(Arc::ptr_eq(&vector, &again), "the second call is a cache hit");
    }

    Ok(EmbedBenchReport {
        embedder: embedder.name().to_owned(),
        allocator: if cfg!(feature = "jemalloc") {
            "jemalloc"
        } else if cfg!(feature = "mimalloc") {
            "mimalloc"
        } else {
            "system"
        },
        passages: passages.len(),
        passage_words,
        passages_per_s: median(&rounds),
        passages_per_s_rounds: rounds,
        queries: queries.len(),
        query_p50_ms: quantile_ms(&misses, 0.5),
        query_p99_ms: quantile_ms(&misses, 0.99),
        query_cache_hit_p50_ms: quantile_ms(&hits, 0.5),
        batch_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_texts_are_seeded_and_distinct() {
        assert_eq!(synthetic_passages(1, 3, 150), synthetic_passages(1, 3, 150));
        let passage = &synthetic_passages(1, 1, 150)[0];
        assert_eq!(passage.split_whitespace().count(), 150);
        let queries = synthetic_queries(1, 50);
        let distinct: std::collections::HashSet<_> = queries.iter().collect();
        assert_eq!(distinct.len(), 50);
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&samples, 0.5), 50.0);
        assert_eq!(quantile_ms(&samples, 0.99), 99.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
