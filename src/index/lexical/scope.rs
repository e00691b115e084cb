//! The authorization scope of a lexical search: the per-segment columns (slots, ordinals, exact
//! token counts) read once per searcher generation, the per-segment bitsets of the alive docs whose
//! ordinal is allowed ([`Scope`], with the scope's token totals and a cache of document
//! frequencies), and the [`Snapshot`] that pins a searcher with its columns and recent scopes.
//!
//! Invariants kept by this module:
//! - a scope holds only alive docs whose ordinal is in the `allowed` bitmap, and its token totals
//!   are exactly those of its docs;
//! - a cached scope lives in the snapshot it was built over and is dropped with it, so it never
//!   outlives its segments.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use roaring::RoaringBitmap;
use tantivy::index::SegmentId;
use tantivy::{BitSet, DocId, Searcher, SegmentReader, Term};

use super::lexical;
use crate::domain::DocOrdinal;
use crate::index::{IndexResult, Slot};

/// Analyzed-token totals of the two text fields over a set of docs (BM25's average field length
/// is the total over the doc count).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TokenTotals {
    pub(super) title: u64,
    pub(super) text: u64,
}

/// Per-segment columns read once per searcher generation.
pub(super) struct SegmentColumns {
    /// `slots[doc]` is the slot of tantivy doc `doc` (dead docs included).
    pub(super) slots: Vec<Slot>,
    /// `title_tokens[doc]`: exact analyzed-token count of the doc's title (dead docs included).
    title_tokens: Vec<u32>,
    /// `text_tokens[doc]`: exact analyzed-token count of the doc's text (dead docs included).
    text_tokens: Vec<u32>,
    /// `(ordinal, doc)` of the *alive* docs, sorted: the scope bitset is built by a lookup per
    /// allowed ordinal or a scan, whichever is cheaper.
    pub(super) by_ordinal: Vec<(DocOrdinal, DocId)>,
    /// `max_doc` of the segment (bitset capacity).
    max_doc: DocId,
    /// Delete opstamp the columns were read at (a reused segment with new deletes is re-read).
    delete_opstamp: Option<u64>,
}

impl SegmentColumns {
    fn read(segment: &SegmentReader) -> IndexResult<Self> {
        let max_doc = segment.max_doc();
        let read_all = |name: &str| -> IndexResult<Vec<u64>> {
            let column = segment.fast_fields().u64(name).map_err(lexical)?.first_or_default_col(0);
            let mut values = vec![0u64; max_doc as usize];
            column.get_range(0, &mut values);
            Ok(values)
        };
        let slots: Vec<Slot> = read_all("slot")?.into_iter().map(|value| value as Slot).collect();
        let read_counts = |name: &str| -> IndexResult<Vec<u32>> {
            Ok(read_all(name)?.into_iter().map(|value| u32::try_from(value).unwrap_or(u32::MAX)).collect())
        };
        let title_tokens = read_counts("title_tokens")?;
        let text_tokens = read_counts("text_tokens")?;
        let ordinals = read_all("ordinal")?;
        let mut by_ordinal: Vec<(DocOrdinal, DocId)> = match segment.alive_bitset() {
            Some(alive) => alive.iter_alive().map(|doc| (ordinals[doc as usize] as DocOrdinal, doc)).collect(),
            None => (0..max_doc).map(|doc| (ordinals[doc as usize] as DocOrdinal, doc)).collect(),
        };
        by_ordinal.sort_unstable();
        Ok(Self { slots, title_tokens, text_tokens, by_ordinal, max_doc, delete_opstamp: segment.delete_opstamp() })
    }

    /// The alive docs of this segment whose ordinal is allowed, and their token totals.
    fn scope(&self, allowed: &RoaringBitmap) -> (BitSet, TokenTotals) {
        let mut docs = BitSet::with_max_value(self.max_doc);
        let mut tokens = TokenTotals::default();
        let mut insert = |doc: DocId| {
            docs.insert(doc);
            tokens.title += u64::from(self.title_tokens[doc as usize]);
            tokens.text += u64::from(self.text_tokens[doc as usize]);
        };
        let (Some(first), Some(last)) = (self.by_ordinal.first(), self.by_ordinal.last()) else {
            return (docs, tokens);
        };
        if allowed.contains_range(first.0..=last.0) {
            for &(_, doc) in &self.by_ordinal {
                insert(doc);
            }
            return (docs, tokens);
        }
        let candidates = allowed.range(first.0..=last.0);
        // Looking up each allowed ordinal costs ~log2(n) per ordinal; a scan costs n checks.
        let lookup_cost =
            candidates.size_hint().0 as u64 * u64::from(usize::BITS - self.by_ordinal.len().leading_zeros());
        if lookup_cost < self.by_ordinal.len() as u64 {
            for ordinal in candidates {
                let start = self.by_ordinal.partition_point(|&(value, _)| value < ordinal);
                for &(_, doc) in self.by_ordinal[start..].iter().take_while(|&&(value, _)| value == ordinal) {
                    insert(doc);
                }
            }
        } else {
            let mut memo: Option<(DocOrdinal, bool)> = None;
            for &(ordinal, doc) in &self.by_ordinal {
                let is_allowed = match memo {
                    Some((last_ordinal, answer)) if last_ordinal == ordinal => answer,
                    _ => {
                        let answer = allowed.contains(ordinal);
                        memo = Some((ordinal, answer));
                        answer
                    }
                };
                if is_allowed {
                    insert(doc);
                }
            }
        }
        (docs, tokens)
    }
}

/// Per-segment bitsets of the live docs inside one scope, with the scope's BM25 statistics that
/// do not depend on the query.
pub(super) struct Scope {
    pub(super) docs: Arc<HashMap<SegmentId, BitSet>>,
    /// Total number of set bits.
    pub(super) allowed_docs: usize,
    /// Token totals of the title and text fields over the set bits.
    pub(super) tokens: TokenTotals,
    /// Document frequencies inside the scope of the terms most recently asked for.
    pub(super) doc_freqs: Mutex<LruCache<Term, u64>>,
}

/// How many recent scopes a snapshot keeps (the same principal usually asks several queries).
const SCOPE_CACHE_LEN: usize = 8;

/// How many document frequencies a cached scope keeps (a principal's queries share terms, and
/// counting a broad term's postings inside a scope costs about as much as scoring them).
const DOC_FREQ_CACHE_LEN: NonZeroUsize = NonZeroUsize::new(256).expect("not zero");

/// A searcher pinned together with the columns of its segments and the scopes recently built
/// over them (dropped with the snapshot, so a cached scope never outlives its generation).
pub(super) struct Snapshot {
    pub(super) searcher: Searcher,
    pub(super) columns: Arc<HashMap<SegmentId, Arc<SegmentColumns>>>,
    /// Most recently used last.
    scopes: Mutex<VecDeque<(RoaringBitmap, Arc<Scope>)>>,
}

impl Snapshot {
    /// Reads the columns of `searcher`, reusing those of `previous` for unchanged segments.
    pub(super) fn build(searcher: Searcher, previous: Option<&Snapshot>) -> IndexResult<Self> {
        let mut columns = HashMap::with_capacity(searcher.segment_readers().len());
        for segment in searcher.segment_readers() {
            let id = segment.segment_id();
            let reusable = previous.and_then(|snapshot| snapshot.columns.get(&id)).filter(|cached| {
                cached.delete_opstamp == segment.delete_opstamp() && cached.max_doc == segment.max_doc()
            });
            let segment_columns = match reusable {
                Some(cached) => Arc::clone(cached),
                None => Arc::new(SegmentColumns::read(segment)?),
            };
            columns.insert(id, segment_columns);
        }
        Ok(Self { searcher, columns: Arc::new(columns), scopes: Mutex::new(VecDeque::new()) })
    }

    /// The scope of `allowed` over this snapshot, from the cache or built and cached.
    pub(super) fn scope(&self, allowed: &RoaringBitmap) -> Arc<Scope> {
        // A poisoned cache only means another search panicked mid-update; it holds no invariant.
        let mut cache = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(position) = cache.iter().position(|(bitmap, _)| bitmap.len() == allowed.len() && bitmap == allowed)
        {
            let entry = cache.remove(position).expect("position is in range");
            let scope = Arc::clone(&entry.1);
            cache.push_back(entry);
            return scope;
        }
        drop(cache);
        let mut docs = HashMap::with_capacity(self.columns.len());
        let mut allowed_docs = 0;
        let mut tokens = TokenTotals::default();
        if !allowed.is_empty() {
            for (id, columns) in self.columns.iter() {
                let (segment_docs, segment_tokens) = columns.scope(allowed);
                let count = segment_docs.len();
                allowed_docs += count;
                tokens.title += segment_tokens.title;
                tokens.text += segment_tokens.text;
                if count > 0 {
                    docs.insert(*id, segment_docs);
                }
            }
        }
        let doc_freqs = Mutex::new(LruCache::new(DOC_FREQ_CACHE_LEN));
        let scope = Arc::new(Scope { docs: Arc::new(docs), allowed_docs, tokens, doc_freqs });
        let mut cache = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() == SCOPE_CACHE_LEN {
            cache.pop_front();
        }
        cache.push_back((allowed.clone(), Arc::clone(&scope)));
        scope
    }
}
