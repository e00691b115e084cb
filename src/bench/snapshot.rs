//! Snapshot benchmark: on a seeded synthetic corpus, side by side in one run, how long writing a
//! snapshot takes, restoring it in format 2 (verify + decode + load the stored graph and lexical
//! images), restoring it in format 1 (verify + decode + rebuild the indexes from stored chunks
//! and vectors) and re-ingesting the same documents from scratch (chunk + embed + index), how
//! large each snapshot is, and that the v2 restore answers like the engine it came from.
//!
//! With the hashed embedder embedding is cheap, so `rebuild_ms` here is mostly chunking and
//! indexing; with MiniLM (~15 passages/s on 2 cores) re-embedding dominates and a rebuild of a
//! few thousand documents takes minutes, while restore time does not depend on the embedder.

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

/// What to build.
#[derive(Clone, Debug)]
pub struct SnapshotBenchConfig {
    /// Documents in the corpus.
    pub documents: usize,
    /// Words per document (sentences of 6..=16 words).
    pub words_per_document: usize,
    /// Seed of all randomness.
    pub seed: u64,
}

/// Measured figures.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotBenchReport {
    /// Documents ingested.
    pub documents: usize,
    /// Chunks in the snapshot.
    pub chunks: usize,
    /// Snapshot size on disk (all files), format 2.
    pub bytes: u64,
    /// Snapshot size on disk, format 1.
    pub bytes_v1: u64,
    /// Writing the snapshot (capture + encode + fsync + rename), format 2.
    pub create_ms: f64,
    /// Writing it in format 1.
    pub create_v1_ms: f64,
    /// Verifying and restoring the format 2 snapshot: indexes loaded from their images.
    pub restore_ms: f64,
    /// Verifying and restoring the format 1 snapshot: indexes rebuilt from stored chunks and
    /// vectors.
    pub restore_v1_ms: f64,
    /// `rebuild_ms / restore_ms`.
    pub restore_speedup: f64,
    /// Re-ingesting the documents from scratch (chunk + embed + index) with the same embedder.
    pub rebuild_ms: f64,
    /// Embedder used.
    pub embedder: String,
    /// Shards.
    pub shards: usize,
}

fn vocabulary(rng: &mut SmallRng, size: usize) -> Vec<String> {
    const SYLLABLES: &[&str] =
        &["ka", "lo", "mi", "ter", "san", "vo", "rel", "pa", "qui", "dor", "en", "tas", "bri", "ul", "no", "fer"];
    (0..size)
        .map(|_| (0..rng.gen_range(2..=4)).map(|_| SYLLABLES[rng.gen_range(0..SYLLABLES.len())]).collect())
        .collect()
}

pub(crate) fn corpus(config: &SnapshotBenchConfig) -> Vec<(String, DocumentInput)> {
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let words = vocabulary(&mut rng, 3000);
    (0..config.documents)
        .map(|index| {
            let mut text = String::new();
            let mut written = 0;
            while written < config.words_per_document {
                let length = rng.gen_range(6..=16);
                for position in 0..length {
                    if position > 0 {
                        text.push(' ');
                    }
                    // A skewed pick gives the corpus frequent and rare words, like real text.
                    let pick = (rng.gen_range(0.0f64..1.0).powi(3) * words.len() as f64) as usize;
                    text.push_str(&words[pick.min(words.len() - 1)]);
                }
                text.push_str(". ");
                written += length;
            }
            let tenant = format!("tenant-{}", index % 3);
            let groups = vec![format!("group-{}", index % 10), "everyone".to_owned()];
            let document = DocumentInput {
                doc_id: format!("doc-{index}"),
                title: format!("Document {index}"),
                text,
                acl: DocAcl { groups, users: vec![] },
                version: None,
                layout: None,
            };
            (tenant, document)
        })
        .collect()
}

async fn ingest(settings: &Settings, documents: &[(String, DocumentInput)]) -> Result<Arc<Engine>, String> {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let engine = Engine::start(EngineParams::from_settings(settings, settings.embedder.dim), embedder)
        .map_err(|error| error.to_string())?;
    for tenant in ["tenant-0", "tenant-1", "tenant-2"] {
        let batch: Vec<DocumentInput> =
            documents.iter().filter(|(owner, _)| owner == tenant).map(|(_, document)| document.clone()).collect();
        for slice in batch.chunks(500) {
            engine.upsert(tenant, slice.to_vec()).await.map_err(|error| error.to_string())?;
        }
    }
    Ok(engine)
}

/// Runs the benchmark with `settings` (shards, HNSW, chunking; the embedder is always the hashed
/// one of `embedder.dim`), writing snapshots under `directory`. Must run inside an actix System.
pub async fn run(
    settings: &Settings,
    config: &SnapshotBenchConfig,
    directory: &Path,
) -> Result<SnapshotBenchReport, String> {
    let documents = corpus(config);
    let started = Instant::now();
    let engine = ingest(settings, &documents).await?;
    let rebuild_ms = started.elapsed().as_secs_f64() * 1000.0;
    let stored: usize = engine.stats().iter().map(|shard| shard.chunks).sum();

    let started = Instant::now();
    let created =
        crate::snapshot::create(&engine, &directory.join("v2"), 1).await.map_err(|error| error.to_string())?;
    let create_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(created.chunks, stored, "the snapshot must hold every chunk of a corpus without deletions");
    let started = Instant::now();
    let created_v1 = crate::snapshot::create_in_format(&engine, &directory.join("v1"), 1, 1)
        .await
        .map_err(|error| error.to_string())?;
    let create_v1_ms = started.elapsed().as_secs_f64() * 1000.0;

    let embedder = engine.embedder();
    let vector = engine.params().vector;
    let started = Instant::now();
    let restored = crate::snapshot::restore(&created.path, embedder.name(), embedder.dimension(), vector)
        .map_err(|error| error.to_string())?;
    let restore_ms = started.elapsed().as_secs_f64() * 1000.0;
    let started = Instant::now();
    let restored_v1 = crate::snapshot::restore(&created_v1.path, embedder.name(), embedder.dimension(), vector)
        .map_err(|error| error.to_string())?;
    let restore_v1_ms = started.elapsed().as_secs_f64() * 1000.0;
    for shards in [&restored.shards, &restored_v1.shards] {
        let restored_chunks: usize = shards.iter().map(|shard| shard.stats().chunks).sum();
        assert_eq!(restored_chunks, stored, "a restore must hold every stored chunk");
    }
    assert_eq!(restored.acl.epoch(), engine.acl().epoch());
    // The loaded indexes answer like the engine's own: same hits, same score bits.
    let acl = engine.acl().load();
    let scope: roaring::RoaringBitmap =
        acl.tenant_names().flat_map(|tenant| acl.entries(tenant).map(|entry| entry.ordinal)).collect();
    for (original, loaded) in engine.shards().iter().zip(&restored.shards) {
        for query in ["ka lo", "ter san vo", "mi"] {
            let expected = original.search_lexical(query, 10, &scope, None).map_err(|error| error.to_string())?;
            let got = loaded.search_lexical(query, 10, &scope, None).map_err(|error| error.to_string())?;
            let key = |hits: &[crate::index::shard::ShardHit]| {
                hits.iter().map(|hit| (hit.chunk.id.to_string(), hit.score.to_bits())).collect::<Vec<_>>()
            };
            assert_eq!(key(&expected), key(&got), "a loaded lexical index must score like the original");
        }
    }

    Ok(SnapshotBenchReport {
        documents: documents.len(),
        chunks: created.chunks,
        bytes: created.bytes,
        bytes_v1: created_v1.bytes,
        create_ms,
        create_v1_ms,
        restore_ms,
        restore_v1_ms,
        restore_speedup: rebuild_ms / restore_ms.max(f64::MIN_POSITIVE),
        rebuild_ms,
        embedder: embedder.name().to_owned(),
        shards: restored.shards.len(),
    })
}
