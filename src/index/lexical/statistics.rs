//! BM25 statistics of a lexical search: [`LexicalStatistics`], the plain counts a shard reports
//! for a query inside a scope and that sum over shards, and the two statistics providers tantivy
//! scores with: [`ScopeStatistics`] (the scope's own, counted over its alive docs) and
//! [`GivenStatistics`] (handed in, typically summed over every shard).
//!
//! Invariants kept by this module:
//! - a document frequency counts only docs of the scope (never deleted or out-of-scope ones) and
//!   never exceeds the document count it is scored against (tantivy's `idf` asserts it);
//! - the document count and token totals handed to tantivy are at least 1 (no 0/0 average field
//!   length), identically in both providers, so a shard's own statistics handed back in give its
//!   own scores to the bit.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use tantivy::postings::SegmentPostings;
use tantivy::query::{BitSetDocSet, Bm25StatisticsProvider};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{BitSet, DocSet, Searcher, TERMINATED, Term};

use super::scope::Scope;
use super::{Fields, LexicalField};

/// The BM25 statistics of one query inside one scope, as plain counts: what a shard reports in
/// the first phase of a search across shards, summed over the shards with [`Self::merge`] and
/// handed back to each shard's [`LexicalIndex::search_with_statistics`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LexicalStatistics {
    /// Live chunks inside the scope.
    pub docs: u64,
    /// Analyzed tokens of the titles of those chunks.
    pub title_tokens: u64,
    /// Analyzed tokens of the texts of those chunks.
    pub text_tokens: u64,
    /// Chunks of the scope holding each analyzed query term in each field; a term absent from the
    /// map is held by none.
    pub doc_freqs: BTreeMap<(LexicalField, String), u64>,
}

impl LexicalStatistics {
    /// Adds the statistics of a disjoint part of the corpus (another shard's), in place.
    pub fn merge(&mut self, other: &LexicalStatistics) {
        self.docs += other.docs;
        self.title_tokens += other.title_tokens;
        self.text_tokens += other.text_tokens;
        for (key, doc_freq) in &other.doc_freqs {
            *self.doc_freqs.entry(key.clone()).or_default() += doc_freq;
        }
    }
}

/// BM25 statistics over the alive docs of one scope only: the document count and the token
/// totals come from the cached [`Scope`], the document frequency of a term is counted in its
/// postings, per segment, over the scope's bitset (and kept in the scope's bounded cache). Deleted docs are never counted (tantivy's
/// [`Searcher`] statistics count every doc of every segment, deleted ones included), so a full
/// scope yields the statistics of the live shard.
pub(super) struct ScopeStatistics<'a> {
    pub(super) searcher: &'a Searcher,
    pub(super) scope: &'a Scope,
    pub(super) fields: Fields,
}

impl Bm25StatisticsProvider for ScopeStatistics<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let total = match self.fields.scored(field)? {
            LexicalField::Title => self.scope.tokens.title,
            LexicalField::Text => self.scope.tokens.text,
        };
        // A total of 0 means no doc of the scope has a token in this field, so no doc of the
        // scope can match there; 1 keeps tantivy's average field length away from 0/0 = NaN.
        Ok(total.max(1))
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.scope.allowed_docs as u64)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        // A poisoned cache only means another search panicked mid-update; it holds no invariant.
        let cached = self.scope.doc_freqs.lock().unwrap_or_else(PoisonError::into_inner).get(term).copied();
        if let Some(doc_freq) = cached {
            return Ok(doc_freq);
        }
        let mut doc_freq = 0u64;
        for segment in self.searcher.segment_readers() {
            let Some(docs) = self.scope.docs.get(&segment.segment_id()) else {
                continue;
            };
            let inverted_index = segment.inverted_index(term.field())?;
            if docs.len() == segment.max_doc() as usize {
                // Every doc of the segment is alive and inside the scope: the dictionary's count.
                doc_freq += u64::from(inverted_index.doc_freq(term)?);
                continue;
            }
            let Some(postings) = inverted_index.read_postings(term, IndexRecordOption::Basic)? else {
                continue;
            };
            doc_freq += count_in_scope(postings, docs);
        }
        // Each counted doc is a distinct set bit of the scope; tantivy's `idf` asserts this bound.
        debug_assert!(doc_freq <= self.scope.allowed_docs as u64);
        let doc_freq = doc_freq.min(self.scope.allowed_docs as u64);
        self.scope.doc_freqs.lock().unwrap_or_else(PoisonError::into_inner).put(term.clone(), doc_freq);
        Ok(doc_freq)
    }
}

/// BM25 statistics handed in ([`LexicalIndex::search_with_statistics`]), typically the scope's
/// summed over every shard. They are trusted only as far as scoring stays defined: a term
/// missing from them is held by no doc, a document frequency above the document count is capped
/// at it (tantivy's `idf` asserts `doc_freq <= doc_count`), and the document count and token
/// totals are at least 1 (no 0/0 average field length).
pub(super) struct GivenStatistics<'a> {
    pub(super) statistics: &'a LexicalStatistics,
    pub(super) fields: Fields,
}

impl Bm25StatisticsProvider for GivenStatistics<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let total = match self.fields.scored(field)? {
            LexicalField::Title => self.statistics.title_tokens,
            LexicalField::Text => self.statistics.text_tokens,
        };
        // As in `ScopeStatistics`, so a shard's own statistics give its own scores to the bit.
        Ok(total.max(1))
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        // Only scored when this shard has a doc in scope, so consistent statistics count >= 1.
        Ok(self.statistics.docs.max(1))
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let field = self.fields.scored(term.field())?;
        let value = term.value();
        let Some(text) = value.as_str() else {
            return Ok(0);
        };
        let doc_freq = self.statistics.doc_freqs.get(&(field, text.to_owned())).copied().unwrap_or(0);
        Ok(doc_freq.min(self.total_num_docs()?))
    }
}

/// A scope at least this many times smaller than a term's postings is walked doc by doc, seeking
/// the postings (skip lists), instead of walking the postings.
const SEEK_RATIO: usize = 8;

/// Number of docs of `postings` that are in `docs`.
fn count_in_scope(mut postings: SegmentPostings, docs: &BitSet) -> u64 {
    let mut count = 0;
    if docs.len().saturating_mul(SEEK_RATIO) < postings.doc_freq() as usize {
        let mut scope = BitSetDocSet::from(docs.clone());
        let (mut in_scope, mut posted) = (scope.doc(), postings.doc());
        // Leapfrog: the one behind seeks the other (`seek` only moves forward).
        while in_scope != TERMINATED && posted != TERMINATED {
            if in_scope < posted {
                in_scope = scope.seek(posted);
            } else if posted < in_scope {
                posted = postings.seek(in_scope);
            } else {
                count += 1;
                in_scope = scope.advance();
            }
        }
        return count;
    }
    let mut doc = postings.doc();
    // Postings never exceed the segment's `max_doc`, the bitset's capacity; checked all the same.
    while doc != TERMINATED && doc < docs.max_value() {
        if docs.contains(doc) {
            count += 1;
        }
        doc = postings.advance();
    }
    count
}
