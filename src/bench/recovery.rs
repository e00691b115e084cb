//! `warrant-bench recovery-fill`: fills a data directory the way a steadily ingesting server
//! does (one-chunk documents of 60 words over 20 tenants, 500-document batches, two in flight,
//! an index set at the start, and a checkpoint after every `--checkpoint-every` chunks as the
//! server's checkpointer writes them),
//! prints what the writes cost (documents per second, batch latency, bytes of index journal and
//! of the store per chunk), then ends the process without closing anything: what a `kill -9`
//! right after the last acknowledged batch leaves (the store not shut down, the journals as
//! written). `benches/recovery.sh` then times `warrant serve` on that directory, and on a copy
//! of it with a build from before the journal (BENCHMARKS.md, "Recovery").

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::config::Settings;
use crate::domain::DocAcl;
use crate::embed::{Embedder, HashedEmbedder};
use crate::embedded::{Engine, EngineParams};
use crate::retrieval::DocumentInput;
use crate::snapshot::directory_bytes;

/// What to fill.
#[derive(Clone, Debug)]
pub struct FillConfig {
    /// One-chunk documents to write.
    pub chunks: usize,
    /// Tenants they are spread over.
    pub tenants: usize,
    /// Words per document.
    pub words: usize,
    /// Documents per batch.
    pub batch: usize,
    /// Batches in flight.
    pub in_flight: usize,
    /// A checkpoint, as the server's checkpointer writes one (the ACL checkpoint in the store,
    /// the change log kept for `storage.log_retention_epochs`, an index set), after every this
    /// many chunks (0: none; index sets are then written at the start and when the journals
    /// reach `storage.index_journal_max_mb`).
    pub checkpoint_every: usize,
    /// Random seed.
    pub seed: u64,
}

/// What the fill measured.
#[derive(Clone, Debug, Serialize)]
pub struct FillReport {
    /// Chunks written.
    pub chunks: usize,
    /// Seconds of writing (index sets included).
    pub seconds: f64,
    /// Documents per second.
    pub documents_per_second: f64,
    /// Batch latency p50 / p99, milliseconds.
    pub batch_ms_p50: f64,
    /// See `batch_ms_p50`.
    pub batch_ms_p99: f64,
    /// Bytes of index journal on disk now (since the last index set).
    pub journal_bytes: u64,
    /// `journal_bytes / chunks` when the newest index set is the first one (every chunk is in
    /// the journal); `None` when a later set was written (by `--checkpoint-every` or because the
    /// journals reached `storage.index_journal_max_mb`).
    pub journal_bytes_per_chunk: Option<f64>,
    /// Directory name of the newest index set (`<epoch>-<unix ms>`).
    pub newest_set: String,
    /// Bytes of the store file.
    pub store_bytes: u64,
    /// Bytes of the newest index set.
    pub index_set_bytes: u64,
}

fn newest(path: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| !path.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.')))
        .max()
}

/// Documents `first..first + count` of the seeded corpus: (tenant, document).
fn documents(config: &FillConfig, vocabulary: &[String], first: usize, count: usize) -> Vec<(String, DocumentInput)> {
    let mut rng = SmallRng::seed_from_u64(config.seed ^ first as u64);
    (first..first + count)
        .map(|index| {
            let text: Vec<&str> = (0..config.words)
                .map(|_| {
                    // Skewed: frequent and rare words, like real text.
                    let pick = (rng.gen_range(0.0f64..1.0).powi(3) * vocabulary.len() as f64) as usize;
                    vocabulary[pick.min(vocabulary.len() - 1)].as_str()
                })
                .collect();
            // One tenant per batch, as an admin token uploads.
            let tenant = format!("tenant-{}", (index / config.batch.max(1)) % config.tenants.max(1));
            let document = DocumentInput {
                doc_id: format!("doc-{index}"),
                title: String::new(),
                text: text.join(" "),
                acl: DocAcl { groups: vec![format!("group-{}", index % 10), "everyone".to_owned()], users: vec![] },
                version: None,
                layout: None,
            };
            (tenant, document)
        })
        .collect()
}

/// Fills `directory` (see the module docs) and returns the figures; the caller then ends the
/// process without closing the engine. Must run inside an actix System.
pub async fn fill(settings: &Settings, config: &FillConfig, directory: &Path) -> Result<FillReport, String> {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let params = EngineParams::from_settings(settings, settings.embedder.dim);
    let (engine, _) = Engine::open(params, embedder, directory).await.map_err(|error| error.to_string())?;
    engine.write_indexes().await;
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let vocabulary: Arc<Vec<String>> = Arc::new(
        (0..5000)
            .map(|_| {
                const SYLLABLES: &[&str] =
                    &["ka", "lo", "mi", "ter", "san", "vo", "rel", "pa", "qui", "dor", "en", "tas", "bri", "ul"];
                (0..rng.gen_range(2..=4)).map(|_| SYLLABLES[rng.gen_range(0..SYLLABLES.len())]).collect()
            })
            .collect(),
    );
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut written = 0;
    let mut since_set = 0;
    while written < config.chunks {
        let mut round = Vec::new();
        for _ in 0..config.in_flight.max(1) {
            let count = config.batch.min(config.chunks - written);
            if count == 0 {
                break;
            }
            let batch = documents(config, &vocabulary, written, count);
            written += count;
            let engine = Arc::clone(&engine);
            since_set += count;
            round.push(async move {
                let begun = Instant::now();
                let tenant = batch.first().map(|(tenant, _)| tenant.clone()).unwrap_or_default();
                let documents = batch.into_iter().map(|(_, document)| document).collect();
                engine.upsert(&tenant, documents).await.map_err(|error| error.to_string())?;
                Ok::<f64, String>(begun.elapsed().as_secs_f64() * 1000.0)
            });
        }
        for latency in futures::future::join_all(round).await {
            latencies.push(latency?);
        }
        if config.checkpoint_every > 0 && since_set >= config.checkpoint_every {
            let up_to = engine.acl().epoch().saturating_sub(settings.storage.log_retention_epochs);
            engine.checkpoint(up_to).await.map_err(|error| error.to_string())?;
            since_set = 0;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let at = |quantile: f64| latencies.get(((latencies.len() as f64 - 1.0) * quantile) as usize).copied();
    let journal =
        newest(&directory.join(crate::storage::journal::JOURNAL_DIR)).map_or(0, |path| directory_bytes(&path));
    let newest_set = newest(&directory.join(crate::storage::indexes::INDEXES_DIR))
        .and_then(|path| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let first_set = newest_set.starts_with("000000000000-");
    Ok(FillReport {
        chunks: written,
        seconds,
        documents_per_second: written as f64 / seconds,
        batch_ms_p50: at(0.5).unwrap_or(0.0),
        batch_ms_p99: at(0.99).unwrap_or(0.0),
        journal_bytes: journal,
        journal_bytes_per_chunk: first_set.then(|| journal as f64 / written.max(1) as f64),
        newest_set,
        store_bytes: std::fs::metadata(directory.join(crate::storage::STORE_FILE)).map_or(0, |meta| meta.len()),
        index_set_bytes: newest(&directory.join(crate::storage::indexes::INDEXES_DIR))
            .map_or(0, |path| directory_bytes(&path)),
    })
}
