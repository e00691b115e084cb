//! The chunker: deterministic, sentence-aware, overlapping windows over a document's text.
//!
//! Invariants: every chunk's text is exactly `doc.text[start..end]` in characters; a chunk holds
//! at most `max_tokens` tokens of [`count_tokens`](super::tokens::count_tokens) and at most
//! [`ChunkingConfig::max_chunk_chars`] characters (so at most 4x that many bytes), whatever the
//! text — a sentence over either bound is split where a token starts, inside a long word every
//! [`MAX_TOKEN_CHARS`] characters; consecutive chunks start strictly later.
//!
//! Structure: a document extracted from a file carries a layout map; a chunk then never holds
//! sentences of two top-level sections (where the outermost heading changes), and its overlap
//! never reaches back into the previous one, so a section that fits one chunk is one chunk.
//! Every chunk keeps the part of the map it overlaps ([`Chunk::layout`]). Without a map the cut
//! is exactly the one of plain text.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::document::Document;
use super::ids::{ChunkId, DocOrdinal};
use super::layout::Layout;
use super::sentences::SentenceVectors;
use super::tokens::{MAX_TOKEN_CHARS, TokenCounter, count_tokens_in};

/// Chunking parameters, in tokens of [`super::tokens::count_tokens`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkingConfig {
    /// Largest chunk, in tokens (a single longer sentence is split where a token starts).
    pub max_tokens: usize,
    /// Tokens of trailing whole sentences repeated at the start of the next chunk.
    pub overlap_tokens: usize,
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        Self { max_tokens: 160, overlap_tokens: 32 }
    }
}

impl ChunkingConfig {
    /// Most characters of one chunk: `max_tokens` tokens of at most [`MAX_TOKEN_CHARS`]
    /// characters each. Whitespace counts here too, so a chunk is never longer than this even
    /// when its text is mostly whitespace.
    pub fn max_chunk_chars(&self) -> usize {
        self.max_tokens.max(1) * MAX_TOKEN_CHARS
    }

    /// Most bytes of one chunk's text (UTF-8 uses at most 4 bytes per character).
    pub fn max_chunk_bytes(&self) -> usize {
        self.max_chunk_chars() * 4
    }
}

/// One retrievable unit of a document with its provenance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Canonical identity.
    pub id: ChunkId,
    /// Owning tenant.
    pub tenant: String,
    /// Document id.
    pub doc_id: String,
    /// Document version the chunk was cut from.
    pub doc_version: u64,
    /// Internal ordinal of that document version (the ACL key).
    pub doc_ordinal: DocOrdinal,
    /// Position of the chunk inside its document (0-based).
    pub ordinal: u32,
    /// Character offset of the chunk's first character in the document text.
    pub start: usize,
    /// Character offset one past the chunk's last character.
    pub end: usize,
    /// Document title (display only).
    pub title: String,
    /// The chunk text, exactly `doc.text[start..end]` in characters.
    pub text: String,
    /// Vectors of the chunk's sentences, made at ingestion (see [`SentenceVectors`]); `None`
    /// where they were not made (the hashed embedder, the setting off, data written before
    /// them): the verifier then embeds the sentences it compares. Stored beside the chunk (a
    /// store table and a snapshot file of their own), never inside the chunk's encoding.
    #[serde(skip)]
    pub sentence_vectors: Option<Arc<SentenceVectors>>,
    /// The document's layout map restricted to the chunk (document offsets), when its document
    /// was extracted from a file: the pages and sections a citation of it names. Stored beside
    /// the chunk like the sentence vectors (a store table and a snapshot file of their own).
    #[serde(skip)]
    pub layout: Option<Arc<Layout>>,
}

/// A span of characters `[start, end)` with its token count.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    end: usize,
    tokens: usize,
}

/// Splits `chars` into sentence spans: a sentence ends after `.`, `!` or `?` followed by
/// whitespace, or at a line break. Leading and trailing whitespace is not part of a span.
fn sentence_spans(chars: &[char]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    let mut index = 0;
    while index < chars.len() {
        let character = chars[index];
        let ends_sentence = character == '\n'
            || (matches!(character, '.' | '!' | '?') && chars.get(index + 1).is_none_or(|next| next.is_whitespace()));
        if ends_sentence {
            push_trimmed(chars, start, index + 1, &mut spans);
            start = index + 1;
        }
        index += 1;
    }
    push_trimmed(chars, start, chars.len(), &mut spans);
    spans
}

fn push_trimmed(chars: &[char], mut start: usize, mut end: usize, spans: &mut Vec<(usize, usize)>) {
    while start < end && chars[start].is_whitespace() {
        start += 1;
    }
    while end > start && chars[end - 1].is_whitespace() {
        end -= 1;
    }
    if start < end {
        spans.push((start, end));
    }
}

/// Splits a span over `max_tokens` tokens or `max_chars` characters into pieces within both,
/// each starting where a token starts (inside a long word, every [`MAX_TOKEN_CHARS`]
/// characters). A piece is closed before a token that could end past `max_chars`, so no piece
/// is longer, and every piece holds at least one token (`max_chars >= MAX_TOKEN_CHARS`).
fn split_long(chars: &[char], start: usize, end: usize, max_tokens: usize, max_chars: usize, out: &mut Vec<Span>) {
    debug_assert!(max_chars >= MAX_TOKEN_CHARS);
    let mut counter = TokenCounter::default();
    let mut piece_start = start;
    let mut tokens = 0;
    for (index, &character) in chars.iter().enumerate().take(end).skip(start) {
        if !counter.starts_token(character) {
            continue;
        }
        let full = tokens == max_tokens || index + MAX_TOKEN_CHARS - piece_start > max_chars;
        if tokens > 0 && full {
            let mut piece_end = index;
            while piece_end > piece_start && chars[piece_end - 1].is_whitespace() {
                piece_end -= 1;
            }
            out.push(Span { start: piece_start, end: piece_end, tokens });
            piece_start = index;
            tokens = 0;
        }
        tokens += 1;
    }
    if tokens > 0 {
        out.push(Span { start: piece_start, end, tokens });
    }
}

/// Cuts a document into deterministic, sentence-aware, overlapping windows.
///
/// Sentences are packed greedily up to `max_tokens`; the next window starts with the trailing
/// whole sentences of the previous one that fit in `overlap_tokens` (never the whole previous
/// window, so every window makes progress).
pub fn chunk_document(document: &Document, doc_ordinal: DocOrdinal, config: &ChunkingConfig) -> Vec<Chunk> {
    let chars: Vec<char> = document.text.chars().collect();
    let max_tokens = config.max_tokens.max(1);
    let max_chars = config.max_chunk_chars();
    let mut sentences = Vec::new();
    for (start, end) in sentence_spans(&chars) {
        let tokens = count_tokens_in(chars[start..end].iter().copied());
        if tokens > max_tokens || end - start > max_chars {
            split_long(&chars, start, end, max_tokens, max_chars, &mut sentences);
        } else {
            sentences.push(Span { start, end, tokens });
        }
    }

    // Top-level section of each sentence (all 0 without a layout map).
    let boundaries = document.layout.as_ref().map(|layout| layout.top_level_boundaries()).unwrap_or_default();
    let region = |span: &Span| boundaries.partition_point(|&boundary| boundary <= span.start);
    let mut chunks = Vec::new();
    let mut first = 0;
    while first < sentences.len() {
        let mut last = first;
        let mut tokens = sentences[first].tokens;
        let start = sentences[first].start;
        let first_region = region(&sentences[first]);
        while last + 1 < sentences.len()
            && tokens + sentences[last + 1].tokens <= max_tokens
            && sentences[last + 1].end - start <= max_chars
            && region(&sentences[last + 1]) == first_region
        {
            last += 1;
            tokens += sentences[last].tokens;
        }
        let end = sentences[last].end;
        debug_assert!(end - start <= max_chars, "chunk of {} chars over {max_chars}", end - start);
        let text: String = chars[start..end].iter().collect();
        chunks.push(Chunk {
            id: ChunkId::derive(&document.tenant, &document.doc_id, document.version, start, end, &text),
            tenant: document.tenant.clone(),
            doc_id: document.doc_id.clone(),
            doc_version: document.version,
            doc_ordinal,
            ordinal: chunks.len() as u32,
            start,
            end,
            title: document.title.clone(),
            text,
            sentence_vectors: None,
            layout: document
                .layout
                .as_ref()
                .map(|layout| layout.restrict(start, end))
                .filter(|part| !part.is_empty())
                .map(Arc::new),
        });
        if last + 1 >= sentences.len() {
            break;
        }
        // Walk back from `last` over whole sentences that fit in the overlap, keeping progress.
        let mut next = last + 1;
        let mut overlap = 0;
        let next_region = region(&sentences[next]);
        while next > first + 1
            && overlap + sentences[next - 1].tokens <= config.overlap_tokens
            && region(&sentences[next - 1]) == next_region
        {
            next -= 1;
            overlap += sentences[next].tokens;
        }
        first = next;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::DocAcl;
    use crate::domain::tokens::count_tokens;
    use proptest::prelude::*;

    fn document(text: &str) -> Document {
        Document {
            tenant: "t".into(),
            doc_id: "d".into(),
            version: 1,
            title: "Title".into(),
            text: text.into(),
            acl: DocAcl::default(),
            layout: None,
        }
    }

    #[test]
    fn offsets_point_at_the_chunk_text() {
        let doc = document("Café au lait. Ünïcödé sentence two! Third one? Fourth.\nFifth line");
        let config = ChunkingConfig { max_tokens: 6, overlap_tokens: 3 };
        let chunks = chunk_document(&doc, 0, &config);
        assert!(chunks.len() > 2);
        for chunk in &chunks {
            let slice: String = doc.text.chars().skip(chunk.start).take(chunk.end - chunk.start).collect();
            assert_eq!(slice, chunk.text);
        }
    }

    /// Regression: one 2,000,000-letter word became one 2 MB chunk.
    #[test]
    fn a_two_million_letter_word_is_cut_into_bounded_chunks() {
        let doc = document(&format!("Short start. {} end.", "x".repeat(2_000_000)));
        let config = ChunkingConfig::default();
        let chunks = chunk_document(&doc, 0, &config);
        assert!(chunks.len() > 300);
        for chunk in &chunks {
            assert!(count_tokens(&chunk.text) <= config.max_tokens);
            assert!(chunk.text.len() <= config.max_tokens * 32 * 4);
        }
        let letters: usize = chunks.iter().map(|chunk| chunk.text.matches('x').count()).sum();
        assert_eq!(letters, 2_000_000);
    }

    #[test]
    fn chunking_is_deterministic() {
        let doc = document("One two three. Four five six. Seven eight nine. Ten eleven twelve.");
        let config = ChunkingConfig { max_tokens: 8, overlap_tokens: 4 };
        assert_eq!(chunk_document(&doc, 3, &config), chunk_document(&doc, 3, &config));
    }

    proptest! {
        #[test]
        fn chunks_cover_text_within_budget(text in "[a-zA-Zé .!?\n,]{0,400}", max in 1usize..40, overlap in 0usize..20) {
            let doc = document(&text);
            let config = ChunkingConfig { max_tokens: max, overlap_tokens: overlap };
            let chunks = chunk_document(&doc, 0, &config);
            let mut previous_start = None;
            for chunk in &chunks {
                let slice: String = doc.text.chars().skip(chunk.start).take(chunk.end - chunk.start).collect();
                prop_assert_eq!(&slice, &chunk.text);
                prop_assert!(count_tokens(&chunk.text) <= max);
                if let Some(previous) = previous_start {
                    prop_assert!(chunk.start > previous);
                }
                previous_start = Some(chunk.start);
            }
            // Every non-space character belongs to some chunk.
            let total: usize = text.chars().filter(|c| !c.is_whitespace()).count();
            if total > 0 {
                prop_assert!(!chunks.is_empty());
            }
        }

        /// Regression: a long word was one token, so one chunk could hold megabytes.
        #[test]
        fn chunks_of_long_words_stay_within_token_and_byte_bounds(
            words in proptest::collection::vec(("[a-zé]{1,300}", "[ .\n,]{1,3}"), 0..12),
            max in 1usize..40,
            overlap in 0usize..20,
        ) {
            let text: String = words.iter().map(|(word, separator)| format!("{word}{separator}")).collect();
            let doc = document(&text);
            let config = ChunkingConfig { max_tokens: max, overlap_tokens: overlap };
            let chunks = chunk_document(&doc, 0, &config);
            let chars: Vec<char> = text.chars().collect();
            let mut covered = vec![false; chars.len()];
            for chunk in &chunks {
                let slice: String = chars[chunk.start..chunk.end].iter().collect();
                prop_assert_eq!(&slice, &chunk.text);
                prop_assert!(count_tokens(&chunk.text) <= max, "{} tokens", count_tokens(&chunk.text));
                prop_assert!(chunk.text.chars().count() <= max * 32, "{} chars", chunk.text.chars().count());
                prop_assert!(chunk.text.len() <= max * 32 * 4);
                covered[chunk.start..chunk.end].iter_mut().for_each(|flag| *flag = true);
            }
            // No character is lost: every non-space character is in some chunk.
            for (index, character) in chars.iter().enumerate() {
                prop_assert!(character.is_whitespace() || covered[index], "{character:?} at {index} in no chunk");
            }
        }
    }
}
