//! A batch's rows in the embedded engine: the chunks cut under their final ordinals, paired with
//! the vectors they were embedded to, and the store rows a durable engine commits
//! ([`EncodedDocument`]); and where that CPU work runs ([`off_thread`]).

use std::sync::Arc;

use crate::domain::{Chunk, ChunkingConfig, Document, SentenceVectors, chunk_document};
use crate::retrieval::RetrievalResult;
use crate::retrieval::batch::invalid;
use crate::storage::EncodedDocument;

/// Documents of a batch below which its CPU work stays on the calling task.
const OFF_THREAD_DOCUMENTS: usize = 8;

/// Runs the CPU work of a write (chunking, encoding: milliseconds per hundred documents) on the
/// blocking pool, so the async thread stays free for other requests — a revoke among them.
/// Small batches, and callers outside a tokio runtime, run it inline.
pub(crate) async fn off_thread<T: Send + 'static>(documents: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    if documents < OFF_THREAD_DOCUMENTS || tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// A batch's rows: each document's chunks with their vectors, the encoded store rows (durable
/// engines), and the chunk count.
pub(crate) struct BatchRows {
    pub(crate) items: Vec<Vec<(Chunk, Vec<f32>)>>,
    pub(crate) encoded: Vec<EncodedDocument>,
    pub(crate) chunk_count: usize,
}

/// Chunks `documents` under `ordinals`, checks the cut is the one that was embedded
/// (`provisional`), pairs chunks with `vectors` (and `sentences`, when made) and encodes the
/// store rows when `encode`.
pub(crate) fn batch_rows(
    documents: &[Document],
    ordinals: std::ops::Range<crate::domain::DocOrdinal>,
    provisional: &[Vec<Chunk>],
    (vectors, sentences): (&[Vec<f32>], &[Option<Arc<SentenceVectors>>]),
    chunking: &ChunkingConfig,
    encode: bool,
) -> RetrievalResult<BatchRows> {
    let chunks: Vec<Vec<Chunk>> = documents
        .iter()
        .zip(ordinals.clone())
        .map(|(document, ordinal)| chunk_document(document, ordinal, chunking))
        .collect();
    let same_cut = chunks.iter().zip(provisional).all(|(real, first)| {
        real.len() == first.len() && real.iter().zip(first).all(|(a, b)| a.start == b.start && a.end == b.end)
    });
    if !same_cut {
        return Err(invalid("", "chunking changed between embedding and indexing (internal error)"));
    }
    let chunk_count = chunks.iter().map(Vec::len).sum();
    let mut vectors_left = vectors.iter();
    let mut sentences_left = sentences.iter();
    let items: Vec<Vec<(Chunk, Vec<f32>)>> = chunks
        .into_iter()
        .map(|document| {
            document
                .into_iter()
                .map(|mut chunk| {
                    chunk.sentence_vectors = sentences_left.next().cloned().flatten();
                    (chunk, vectors_left.next().cloned().unwrap_or_default())
                })
                .collect()
        })
        .collect();
    let encoded = if encode {
        items
            .iter()
            .zip(ordinals)
            .map(|(document, ordinal)| {
                let refs: Vec<(&Chunk, &[f32])> =
                    document.iter().map(|(chunk, vector)| (chunk, vector.as_slice())).collect();
                EncodedDocument::encode(ordinal, &refs)
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(BatchRows { items, encoded, chunk_count })
}
