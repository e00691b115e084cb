//! A document batch on its way in, before anything is published: its validation
//! ([`validate_batch`]: all or nothing, every problem named by document id), the documents it
//! becomes, the text each chunk is embedded from, and its sentences' texts and quantized
//! vectors. Both backends' write paths use them (the embedded engine's, `crate::embedded`, and
//! the PostgreSQL backend's); the rows the embedded store keeps of a batch are
//! `crate::embedded`'s own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::domain::sentences::sentences;
use crate::domain::{Chunk, DocAcl, Document, Layout, SentenceVectors, schema};

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
