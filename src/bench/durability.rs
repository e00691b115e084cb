//! Durability benchmark (`warrant-bench durability`): what making every acknowledged write
//! durable costs, measured side by side with an in-memory engine in one run, and what restarting
//! from the data directory saves over re-ingesting.
//!
//! - ACL changes (alternating grant and revoke of one user on one document, sequential, each
//!   committed with fsync before it is acknowledged): changes per second, p50 and p99 latency;
//! - document batches (hashed embedder): batches per second;
//! - restart: opening the data directory after a graceful shutdown (recovery + loading the
//!   index set written at shutdown), opening it without an index set (recovery + index rebuild
//!   from stored chunks and vectors, no re-embedding), and re-ingesting the same corpus into a
//!   fresh engine.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::acl::AclMutation;
use crate::config::Settings;
use crate::embed::{Embedder, HashedEmbedder};
use crate::embedded::{Engine, EngineParams};
use crate::retrieval::DocumentInput;

use super::snapshot::{SnapshotBenchConfig, corpus};

/// What to run.
#[derive(Clone, Debug)]
pub struct DurabilityBenchConfig {
    /// ACL changes timed.
    pub acl_changes: usize,
    /// Document batches timed.
    pub batches: usize,
    /// Documents per batch.
    pub batch_documents: usize,
    /// Concurrent uploaders of 500-document batches while ACL changes are timed (0: skip).
    pub uploaders: usize,
    /// Batches each uploader sends.
    pub upload_batches: usize,
    /// Corpus of the restart comparison (documents and words per document).
    pub corpus: SnapshotBenchConfig,
}

/// Latency figures of one kind of write.
#[derive(Clone, Debug, Serialize)]
pub struct WriteFigures {
    /// Writes per second (sequential).
    pub per_second: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// Measured figures.
#[derive(Clone, Debug, Serialize)]
pub struct DurabilityBenchReport {
    /// ACL changes with fsync (durable engine).
    pub acl_durable: WriteFigures,
    /// The same changes on an in-memory engine.
    pub acl_in_memory: WriteFigures,
    /// ACL changes with fsync while `uploaders` clients upsert 500-document batches.
    pub acl_durable_under_uploads: Option<WriteFigures>,
    /// Concurrent uploaders during `acl_durable_under_uploads`.
    pub uploaders: usize,
    /// Document batches, durable engine.
    pub batches_durable: WriteFigures,
    /// Document batches, in-memory engine.
    pub batches_in_memory: WriteFigures,
    /// Documents per batch.
    pub batch_documents: usize,
    /// Chunks in the restart corpus.
    pub restart_chunks: usize,
    /// Opening the data directory after a graceful shutdown (recovery + loading the index set
    /// written at shutdown), milliseconds.
    pub restart_ms: f64,
    /// Opening it without an index set (recovery + index rebuild from the rows), milliseconds.
    pub restart_rebuild_ms: f64,
    /// Re-ingesting the corpus into a fresh in-memory engine, milliseconds.
    pub reingest_ms: f64,
    /// `reingest_ms / restart_ms`.
    pub restart_speedup: f64,
    /// Size of the data directory's store after the corpus, bytes.
    pub store_bytes: u64,
}

fn percentile(sorted: &[f64], quantile: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * quantile).round() as usize]
}

fn figures(mut latencies: Vec<f64>, total_ms: f64) -> WriteFigures {
    latencies.sort_by(f64::total_cmp);
    WriteFigures {
        per_second: latencies.len() as f64 / (total_ms / 1000.0).max(f64::MIN_POSITIVE),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
    }
}

async fn engine(settings: &Settings, directory: Option<&Path>) -> Result<Arc<Engine>, String> {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let params = EngineParams::from_settings(settings, settings.embedder.dim);
    match directory {
        Some(directory) => Engine::open(params, embedder, directory).await.map(|(engine, _)| engine),
        None => Engine::start(params, embedder),
    }
    .map_err(|error| error.to_string())
}

async fn time_acl_changes(engine: &Engine, changes: usize) -> Result<WriteFigures, String> {
    time_acl_changes_while(engine, changes, || false).await
}

/// Times ACL changes until `changes` were made, or, when `changes` is 0, while `busy()` holds.
async fn time_acl_changes_while(
    engine: &Engine,
    changes: usize,
    busy: impl Fn() -> bool,
) -> Result<WriteFigures, String> {
    let document = DocumentInput {
        doc_id: "bench-acl".into(),
        title: String::new(),
        text: "A document whose readers change.".into(),
        acl: Default::default(),
        version: None,
        layout: None,
    };
    if engine.acl().load().entry("bench", "bench-acl").is_none() {
        engine.upsert("bench", vec![document]).await.map_err(|error| error.to_string())?;
    }
    let mut latencies = Vec::with_capacity(changes);
    let started = Instant::now();
    let mut index = 0;
    while if changes == 0 { busy() } else { index < changes } {
        index += 1;
        let granted = engine
            .acl()
            .load()
            .entry("bench", "bench-acl")
            .is_some_and(|entry| entry.acl.users.iter().any(|user| user == "bench-user"));
        let users = vec!["bench-user".to_owned()];
        let mutation = if !granted {
            AclMutation::Grant { tenant: "bench".into(), doc_id: "bench-acl".into(), groups: vec![], users }
        } else {
            AclMutation::Revoke { tenant: "bench".into(), doc_id: "bench-acl".into(), groups: None, users: Some(users) }
        };
        let one = Instant::now();
        let before = engine.acl().epoch();
        let epoch = engine.mutate(mutation).await.map_err(|error| error.to_string())?;
        assert!(epoch > before, "every timed change publishes a new epoch");
        latencies.push(one.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(figures(latencies, started.elapsed().as_secs_f64() * 1000.0))
}

async fn time_batches(
    engine: &Engine,
    documents: &[(String, DocumentInput)],
    size: usize,
) -> Result<WriteFigures, String> {
    let mut latencies = Vec::new();
    let started = Instant::now();
    for batch in documents.chunks(size.max(1)) {
        let inputs: Vec<DocumentInput> = batch.iter().map(|(_, document)| document.clone()).collect();
        let one = Instant::now();
        let outcome = engine.upsert("bench-batches", inputs).await.map_err(|error| error.to_string())?;
        assert_eq!(outcome.documents, batch.len());
        latencies.push(one.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(figures(latencies, started.elapsed().as_secs_f64() * 1000.0))
}

/// ACL changes timed while `uploaders` tasks upsert 500-document batches into their own tenants.
async fn acl_under_uploads(engine: &Arc<Engine>, config: &DurabilityBenchConfig) -> Result<WriteFigures, String> {
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(config.uploaders));
    let mut uploads = Vec::new();
    for uploader in 0..config.uploaders {
        let documents = corpus(&SnapshotBenchConfig {
            documents: 500 * config.upload_batches,
            words_per_document: 120,
            seed: config.corpus.seed ^ (uploader as u64 + 1),
        });
        let engine = Arc::clone(engine);
        let running = Arc::clone(&running);
        uploads.push(actix_rt::spawn(async move {
            let tenant = format!("upload-{uploader}");
            let mut result = Ok(());
            for batch in documents.chunks(500) {
                let inputs: Vec<DocumentInput> = batch.iter().map(|(_, document)| document.clone()).collect();
                if let Err(error) = engine.upsert(&tenant, inputs).await {
                    result = Err(error.to_string());
                    break;
                }
            }
            running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            result
        }));
    }
    // Let the uploads get going before timing.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let figures = time_acl_changes_while(engine, 0, || running.load(std::sync::atomic::Ordering::SeqCst) > 0).await?;
    for upload in uploads {
        upload.await.map_err(|error| error.to_string())??;
    }
    Ok(figures)
}

async fn ingest(engine: &Engine, documents: &[(String, DocumentInput)]) -> Result<(), String> {
    for tenant in ["tenant-0", "tenant-1", "tenant-2"] {
        let batch: Vec<DocumentInput> =
            documents.iter().filter(|(owner, _)| owner == tenant).map(|(_, document)| document.clone()).collect();
        for slice in batch.chunks(500) {
            engine.upsert(tenant, slice.to_vec()).await.map_err(|error| error.to_string())?;
        }
    }
    Ok(())
}

/// Runs the benchmark with `settings` (shards, HNSW, chunking; hashed embedder of
/// `embedder.dim`), with data directories under `directory`. Must run inside an actix System.
pub async fn run(
    settings: &Settings,
    config: &DurabilityBenchConfig,
    directory: &Path,
) -> Result<DurabilityBenchReport, String> {
    let durable = engine(settings, Some(&directory.join("acl"))).await?;
    let in_memory = engine(settings, None).await?;
    // Interleaved halves so a load change on a shared machine hits both sides alike.
    let half = config.acl_changes.div_ceil(2);
    let mut durable_acl = time_acl_changes(&durable, half).await?;
    let memory_acl = time_acl_changes(&in_memory, config.acl_changes).await?;
    let second = time_acl_changes(&durable, half).await?;
    durable_acl = WriteFigures {
        per_second: (durable_acl.per_second + second.per_second) / 2.0,
        p50_ms: (durable_acl.p50_ms + second.p50_ms) / 2.0,
        p99_ms: durable_acl.p99_ms.max(second.p99_ms),
    };
    let batch_corpus = corpus(&SnapshotBenchConfig {
        documents: config.batches * config.batch_documents,
        words_per_document: 120,
        seed: config.corpus.seed ^ 0xba7c4,
    });
    let acl_durable_under_uploads =
        if config.uploaders > 0 { Some(acl_under_uploads(&durable, config).await?) } else { None };
    let batches_durable = time_batches(&durable, &batch_corpus, config.batch_documents).await?;
    let batches_in_memory = time_batches(&in_memory, &batch_corpus, config.batch_documents).await?;
    drop((durable, in_memory));

    let documents = corpus(&config.corpus);
    let data = directory.join("restart");
    let writer = engine(settings, Some(&data)).await?;
    ingest(&writer, &documents).await?;
    let epoch = writer.acl().epoch();
    let chunks: usize = writer.stats().iter().map(|shard| shard.chunks).sum();
    writer.close().await;
    drop(writer);
    let store_bytes = std::fs::metadata(data.join(crate::storage::STORE_FILE)).map(|meta| meta.len()).unwrap_or(0);

    let started = Instant::now();
    let reopened = engine(settings, Some(&data)).await?;
    let restart_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(reopened.acl().epoch(), epoch, "a restart resumes at the last acknowledged epoch");
    assert_eq!(reopened.stats().iter().map(|shard| shard.chunks).sum::<usize>(), chunks);
    drop(reopened);
    std::fs::remove_dir_all(data.join(crate::storage::indexes::INDEXES_DIR)).map_err(|error| error.to_string())?;
    let started = Instant::now();
    let rebuilt = engine(settings, Some(&data)).await?;
    let restart_rebuild_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(rebuilt.stats().iter().map(|shard| shard.chunks).sum::<usize>(), chunks);
    drop(rebuilt);

    let started = Instant::now();
    let fresh = engine(settings, None).await?;
    ingest(&fresh, &documents).await?;
    let reingest_ms = started.elapsed().as_secs_f64() * 1000.0;

    Ok(DurabilityBenchReport {
        acl_durable: durable_acl,
        acl_in_memory: memory_acl,
        acl_durable_under_uploads,
        uploaders: config.uploaders,
        batches_durable,
        batches_in_memory,
        batch_documents: config.batch_documents,
        restart_chunks: chunks,
        restart_ms,
        restart_rebuild_ms,
        reingest_ms,
        restart_speedup: reingest_ms / restart_ms.max(f64::MIN_POSITIVE),
        store_bytes,
    })
}
