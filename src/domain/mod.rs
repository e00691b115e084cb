//! Plain domain types shared by every layer: identities, documents, chunks, principals, the
//! layout map of extracted documents (pages and heading paths, [`Layout`]), the one token-counting rule, the one sentence splitter and the sentence vectors kept from
//! ingestion, and the input rules the wire types share with validation (`schema`). No IO lives
//! here.
//!
//! Invariants kept by this module:
//! - a [`ChunkId`] is derived only from content and provenance (tenant, doc_id, version,
//!   offsets, normalized text), never from display titles or insertion order, so the lexical and
//!   vector indexes agree on it and re-ingesting the same document yields the same ids;
//! - chunk offsets are character (Unicode scalar value) offsets into the document text and
//!   `doc.text.chars().skip(start).take(end - start)` is exactly the chunk text.

mod chunk;
mod document;
mod ids;
mod layout;
mod principal;
pub mod schema;
pub(crate) mod sentences;
pub mod tokens;

pub use chunk::{Chunk, ChunkingConfig, chunk_document};
pub use document::{DocAcl, Document};
pub use ids::{ChunkId, DocOrdinal};
pub use layout::{Layout, Location, PageSpan, SectionSpan};
pub use principal::{Principal, Role};
pub use sentences::{SentenceVectors, sentence_digest};
