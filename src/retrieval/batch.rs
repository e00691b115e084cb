//! A document batch on its way in, before anything is published: its validation
//! ([`validate_batch`]: all or nothing, every problem named by document id), the documents it
//! becomes, the text each chunk is embedded from, its sentences' texts and quantized vectors,
//! and the rows the store keeps of it. The engine's write path ([`super::write`]) and the
//! PostgreSQL backend both use them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::domain::sentences::sentences;
use crate::domain::{Chunk, ChunkingConfig, DocAcl, Document, Layout, SentenceVectors, chunk_document, schema};
use crate::storage::EncodedDocument;

use super::{RetrievalError, RetrievalResult};

/// Longest accepted document id, in characters.
pub const MAX_DOC_ID_CHARS: usize = 256;
/// Longest accepted document text, in characters.
pub const MAX_TEXT_CHARS: usize = 2_000_000;

/// Longest accepted title, in characters.
const MAX_TITLE_CHARS: usize = 1000;

/// A document as an admin submits it (the tenant comes from the caller, never from here),
/// checked by `validate_batch`. Its OpenAPI schema is the HTTP layer's, on the mirror
/// `crate::http::contract::admin::DocumentInput`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DocumentInput {
    /// Tenant-scoped id: 1..=256 characters, not blank, no control characters.
    pub doc_id: String,
    /// Display title, at most 1000 characters.
    #[serde(default)]
    pub title: String,
    /// Full text: 1..=2,000,000 characters, not blank.
    pub text: String,
    /// Readers.
    #[serde(default)]
    pub acl: DocAcl,
    /// Explicit version (at least 1); must be greater than the stored one. Default: stored + 1
    /// (or 1).
    #[serde(default, deserialize_with = "schema::optional_integer")]
    pub version: Option<u64>,
    /// Pages and heading paths of `text`, when it was extracted from a file (the HTTP layer
    /// sets it; never read from JSON).
    #[serde(skip)]
    pub layout: Option<Arc<Layout>>,
}

pub(crate) fn to_document(tenant: &str, input: &DocumentInput, version: u64) -> Document {
    Document {
        tenant: tenant.to_owned(),
        doc_id: input.doc_id.clone(),
        version,
        title: input.title.clone(),
        text: input.text.clone(),
        acl: input.acl.clone(),
        layout: input.layout.clone(),
    }
}

/// Text embedded for a chunk: title and chunk text.
pub(crate) fn embedding_text(chunk: &Chunk) -> String {
    if chunk.title.is_empty() { chunk.text.clone() } else { format!("{}\n{}", chunk.title, chunk.text) }
}

/// The sentence vectors of a batch's chunks, in chunk order (empty when none are made).
pub(crate) type BatchSentences = Vec<Option<Arc<SentenceVectors>>>;

/// The distinct sentences of a batch's chunks (overlapping chunks share sentences, so each is
/// embedded once), for the sentence vectors both backends store with their chunks.
pub(crate) struct BatchSentenceTexts {
    /// Per chunk, in order: the position in `texts` of each of its sentences.
    per_chunk: Vec<Vec<usize>>,
    /// Every distinct sentence of the batch, in first-seen order: what to embed.
    pub(crate) texts: Vec<String>,
}

impl BatchSentenceTexts {
    /// The sentences of `chunks`.
    pub(crate) fn of(chunks: &[&Chunk]) -> Self {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut texts = Vec::new();
        let per_chunk = chunks
            .iter()
            .map(|chunk| {
                sentences(&chunk.text)
                    .iter()
                    .map(|span| {
                        let sentence = span.slice(&chunk.text);
                        *index.entry(sentence).or_insert_with(|| {
                            texts.push(sentence.to_owned());
                            texts.len() - 1
                        })
                    })
                    .collect()
            })
            .collect();
        Self { per_chunk, texts }
    }

    /// Every chunk's sentence vectors, in chunk order, from `vectors` (one per text, in order).
    pub(crate) fn quantize(&self, vectors: &[Vec<f32>]) -> BatchSentences {
        self.per_chunk
            .iter()
            .map(|positions| {
                let items = positions.iter().map(|&at| (self.texts[at].as_str(), vectors[at].as_slice()));
                Some(Arc::new(SentenceVectors::quantize(items)))
            })
            .collect()
    }
}

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

pub(crate) fn invalid(doc_id: &str, reason: &str) -> RetrievalError {
    RetrievalError::InvalidDocument {
        doc_id: doc_id.chars().take(MAX_DOC_ID_CHARS).collect(),
        reason: reason.to_owned(),
    }
}

/// Validates a whole batch before anything is written.
pub(crate) fn validate_batch(inputs: &[DocumentInput]) -> RetrievalResult<()> {
    let mut seen = HashSet::new();
    for input in inputs {
        let doc_id = input.doc_id.as_str();
        if doc_id.trim().is_empty() {
            return Err(invalid(doc_id, "doc_id must not be empty"));
        }
        if doc_id.chars().count() > MAX_DOC_ID_CHARS {
            return Err(invalid(doc_id, "doc_id is longer than 256 characters"));
        }
        if doc_id.chars().any(char::is_control) {
            return Err(invalid(doc_id, "doc_id contains control characters"));
        }
        if !seen.insert(doc_id) {
            return Err(RetrievalError::Acl(crate::acl::AclError::DuplicateDocument { doc_id: doc_id.to_owned() }));
        }
        if input.text.trim().is_empty() {
            return Err(invalid(doc_id, "text must not be empty"));
        }
        if input.text.chars().count() > MAX_TEXT_CHARS {
            return Err(invalid(doc_id, "text is longer than 2000000 characters"));
        }
        if input.title.chars().count() > MAX_TITLE_CHARS {
            return Err(invalid(doc_id, "title is longer than 1000 characters"));
        }
        let names = input.acl.groups.iter().chain(&input.acl.users);
        if names.clone().any(|name| name.trim().is_empty() || name.chars().count() > schema::MAX_ACL_NAME_CHARS) {
            return Err(invalid(doc_id, "acl names must be 1..=256 characters"));
        }
        if input.version == Some(0) {
            return Err(invalid(doc_id, "version must be at least 1"));
        }
        if let Some(layout) = &input.layout {
            layout.check(input.text.chars().count()).map_err(|reason| invalid(doc_id, &reason))?;
        }
    }
    Ok(())
}
