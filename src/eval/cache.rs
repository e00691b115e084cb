//! An on-disk embedding cache for evaluation runs, so tuning iterations do not re-embed a corpus
//! (MiniLM embeds ~15 passages/s here; SciFact takes minutes).
//!
//! The cache is content-addressed: one file per (embedder name, SHA-256 of the corpus file),
//! mapping the SHA-256 of every embedded text (chunk title + text, or a query) to its vector. A
//! chunk's vector depends only on its text, so runs with other chunking parameters reuse every
//! chunk whose text did not change and embed only the new ones. File layout: the magic
//! `WEMB1\n`, the dimension (u32 LE), then records of 16 key bytes + `dimension` f32 LE. A file
//! that does not parse is ignored (and rewritten on [`CachingEmbedder::save`]).
//!
//! Never used on the serving path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::embed::{EmbedResult, Embedder};

const MAGIC: &[u8] = b"WEMB1\n";

type Key = [u8; 16];

/// An [`Embedder`] that answers from (and records into) an on-disk cache.
pub struct CachingEmbedder {
    inner: Arc<dyn Embedder>,
    path: PathBuf,
    entries: Mutex<HashMap<Key, Vec<f32>>>,
    loaded: usize,
    saved: AtomicUsize,
}

impl CachingEmbedder {
    /// Wraps `inner` with the cache file for `corpus_sha256` under `dir` (created on save).
    pub fn open(inner: Arc<dyn Embedder>, dir: &Path, corpus_sha256: &str) -> Self {
        let name: String = inner
            .name()
            .chars()
            .map(|character| if character.is_ascii_alphanumeric() || character == '-' { character } else { '_' })
            .collect();
        let prefix: String = corpus_sha256.chars().take(16).collect();
        let path = dir.join(format!("{name}-{prefix}.bin"));
        let entries = std::fs::read(&path).ok().and_then(|bytes| decode(&bytes, inner.dimension())).unwrap_or_default();
        let loaded = entries.len();
        Self { inner, path, entries: Mutex::new(entries), loaded, saved: AtomicUsize::new(loaded) }
    }

    /// The cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Vectors read from disk when opened.
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// Vectors held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the cache file (atomically: a temporary file renamed over it) when it grew since
    /// it was opened or last saved.
    pub fn save(&self) -> std::io::Result<()> {
        let (bytes, count) = {
            let entries = self.lock();
            if entries.len() == self.saved.load(Ordering::Relaxed) {
                return Ok(());
            }
            (encode(&entries, self.inner.dimension()), entries.len())
        };
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let temporary = self.path.with_extension("tmp");
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &self.path)?;
        self.saved.store(count, Ordering::Relaxed);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<f32>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn key(text: &str) -> Key {
    Sha256::digest(text.as_bytes())[..16].try_into().expect("16 bytes")
}

fn encode(entries: &HashMap<Key, Vec<f32>>, dimension: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + entries.len() * (16 + 4 * dimension));
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(dimension as u32).to_le_bytes());
    let mut keys: Vec<&Key> = entries.keys().collect();
    keys.sort();
    for key in keys {
        bytes.extend_from_slice(key);
        for value in &entries[key] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    bytes
}

fn decode(bytes: &[u8], dimension: usize) -> Option<HashMap<Key, Vec<f32>>> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (header, records) = rest.split_at_checked(4)?;
    if u32::from_le_bytes(header.try_into().ok()?) as usize != dimension {
        return None;
    }
    let record = 16 + 4 * dimension;
    if records.len() % record != 0 {
        return None;
    }
    Some(
        records
            .chunks_exact(record)
            .map(|record| {
                let key: Key = record[..16].try_into().expect("16 bytes");
                let vector = record[16..]
                    .chunks_exact(4)
                    .map(|value| f32::from_le_bytes(value.try_into().expect("4 bytes")))
                    .collect();
                (key, vector)
            })
            .collect(),
    )
}

#[async_trait]
impl Embedder for CachingEmbedder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn semantic(&self) -> bool {
        self.inner.semantic()
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        let keys: Vec<Key> = texts.iter().map(|text| key(text)).collect();
        let mut vectors: Vec<Option<Vec<f32>>> = {
            let entries = self.lock();
            keys.iter().map(|key| entries.get(key).cloned()).collect()
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&index| vectors[index].is_none()).collect();
        if !missing.is_empty() {
            let batch: Vec<String> = missing.iter().map(|&index| texts[index].clone()).collect();
            let embedded = self.inner.embed(&batch).await?;
            if embedded.len() != batch.len() {
                return Err(crate::embed::EmbedError::Shape { expected: batch.len(), got: embedded.len() });
            }
            let mut entries = self.lock();
            for (index, vector) in missing.into_iter().zip(embedded) {
                entries.insert(keys[index], vector.clone());
                vectors[index] = Some(vector);
            }
        }
        Ok(vectors.into_iter().map(|vector| vector.expect("every text embedded")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashedEmbedder;

    #[tokio::test]
    async fn cache_round_trips_through_disk() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(16));
        let texts = vec!["alpha beta".to_owned(), "gamma".to_owned()];
        let expected = inner.embed(&texts).await.unwrap();
        let cache = CachingEmbedder::open(Arc::clone(&inner), dir.path(), "abc");
        assert_eq!(cache.embed(&texts).await.unwrap(), expected);
        cache.save().unwrap();
        let reopened = CachingEmbedder::open(inner, dir.path(), "abc");
        assert_eq!(reopened.loaded(), 2);
        assert_eq!(reopened.embed(&texts).await.unwrap(), expected);
    }
}
