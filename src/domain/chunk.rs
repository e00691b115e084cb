use serde::{Deserialize, Serialize};

use super::document::Document;
use super::ids::{ChunkId, DocOrdinal};
use super::tokens::count_tokens;

/// Chunking parameters, in tokens of [`super::tokens::count_tokens`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkingConfig {
    /// Largest chunk, in tokens (a single longer sentence is split at word boundaries).
    pub max_tokens: usize,
    /// Tokens of trailing whole sentences repeated at the start of the next chunk.
    pub overlap_tokens: usize,
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        Self { max_tokens: 160, overlap_tokens: 32 }
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

/// Splits a span longer than `max_tokens` into word-aligned pieces of at most `max_tokens`.
fn split_long(chars: &[char], start: usize, end: usize, max_tokens: usize, out: &mut Vec<Span>) {
    let mut piece_start = start;
    let mut index = start;
    let mut tokens = 0;
    while index < end {
        // Advance over one token (a run of alphanumerics or one other non-space char) and the
        // whitespace after it.
        let token_end = if chars[index].is_alphanumeric() {
            let mut cursor = index;
            while cursor < end && chars[cursor].is_alphanumeric() {
                cursor += 1;
            }
            cursor
        } else {
            index + 1
        };
        let counts = !chars[index].is_whitespace();
        if counts && tokens == max_tokens {
            let text: String = chars[piece_start..index].iter().collect();
            let trimmed_end = piece_start + text.trim_end().chars().count();
            out.push(Span { start: piece_start, end: trimmed_end, tokens });
            piece_start = index;
            tokens = 0;
        }
        if counts {
            tokens += 1;
        }
        index = token_end;
    }
    if piece_start < end {
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
    let mut sentences = Vec::new();
    for (start, end) in sentence_spans(&chars) {
        let text: String = chars[start..end].iter().collect();
        let tokens = count_tokens(&text);
        if tokens > max_tokens {
            split_long(&chars, start, end, max_tokens, &mut sentences);
        } else {
            sentences.push(Span { start, end, tokens });
        }
    }

    let mut chunks = Vec::new();
    let mut first = 0;
    while first < sentences.len() {
        let mut last = first;
        let mut tokens = sentences[first].tokens;
        while last + 1 < sentences.len() && tokens + sentences[last + 1].tokens <= max_tokens {
            last += 1;
            tokens += sentences[last].tokens;
        }
        let start = sentences[first].start;
        let end = sentences[last].end;
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
        });
        if last + 1 >= sentences.len() {
            break;
        }
        // Walk back from `last` over whole sentences that fit in the overlap, keeping progress.
        let mut next = last + 1;
        let mut overlap = 0;
        while next > first + 1 && overlap + sentences[next - 1].tokens <= config.overlap_tokens {
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
    use proptest::prelude::*;

    fn document(text: &str) -> Document {
        Document {
            tenant: "t".into(),
            doc_id: "d".into(),
            version: 1,
            title: "Title".into(),
            text: text.into(),
            acl: DocAcl::default(),
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
    }
}
