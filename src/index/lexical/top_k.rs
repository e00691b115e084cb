//! The scoped BM25 top-k of one lexical search, scored by warrant over tantivy's postings with
//! MaxScore pruning (Turtle & Flood 1995) instead of by tantivy's collector, which scores every
//! doc of the union once a tie-break is attached (`TopDocs::tweak_score`).
//!
//! A query is a list of clauses (term, field, BM25 weight), in the order the query was built.
//! Per segment, the scope's docs are reached one of three ways ([`Way`]):
//! - **scope first**, when the scope holds far fewer docs than the clauses' postings: the scope's
//!   docs are walked and every clause's postings sought (skip lists) to each;
//! - **MaxScore**, when some clause's postings are sparse (held by under a quarter of the
//!   segment's docs: a rarer term, or the title field, whose bounds let pruning drop the dense
//!   clauses): the postings of the clauses are walked doc by doc
//!   (document at a time), each doc checked against the scope's bitset before it is scored. Once
//!   `k` hits are held, the clauses whose summed upper bounds cannot lift a doc to the worst held
//!   hit become *non-essential*: they are no longer walked, only sought for docs an essential
//!   clause holds, and a doc is dropped as soon as its score so far plus the bounds still unread
//!   cannot reach the worst hit;
//! - **union** when every clause is dense (MaxScore then prunes little, and its walk, a
//!   data-dependent branch per clause and doc, measured twice the time of tantivy's windowed
//!   union): tantivy's buffered union of the clauses scores them window by window, and only the
//!   docs of the scope's bitset are offered to the top-k.
//!
//! Invariants kept by this module:
//! - only docs of the scope are offered to the top-k or returned;
//! - the hits are exactly the best `k` by (score descending, slot ascending) of every doc of the
//!   scope holding a clause: pruning drops a doc only when an upper bound of its score is below
//!   the worst held hit (a tie could still win on its slot, so ties are never pruned), and the
//!   bounds carry a margin for the rounding of summing them in another order;
//! - a doc's score is the sum of its clauses' scores in clause order, starting from 0, whichever
//!   way the doc was reached and whatever `k` or the scope: a score is the same to the bit in
//!   every search that scores that doc with the same statistics (it is also what tantivy's
//!   buffered union sums, in the same order).

use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::SegmentId;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::query::{BitSetDocSet, Bm25Weight, Weight};
use tantivy::schema::IndexRecordOption;
use tantivy::{BitSet, DocId, DocSet, Score, Searcher, TERMINATED, Term};

use super::lexical;
use super::scope::SegmentColumns;
use crate::index::{Hit, IndexResult, Slot, WorseFirst, sort_best_first};

/// One scored clause of a query: a term of one field with its BM25 weight (boost included).
pub(super) struct Clause {
    pub(super) term: Term,
    pub(super) weight: Bm25Weight,
}

impl Clause {
    /// An upper bound of this clause's score in any doc: BM25's term-frequency factor
    /// `tf / (tf + norm)` is below 1, so a score never exceeds the weight, which is the score of
    /// the shortest field with the largest term frequency.
    fn bound(&self) -> Score {
        self.weight.score(0, u32::MAX)
    }
}

/// A scope at least this many times smaller than the postings it would be walked against
/// (summed over the clauses) is walked first, seeking the postings.
const SCOPE_FIRST_RATIO: usize = 4;

/// A clause whose postings hold at least one in this many docs of the segment is dense: when
/// every clause is dense, MaxScore's doc-at-a-time walk (a data-dependent branch per clause and
/// doc) costs about twice tantivy's windowed union and prunes little (measured), so the union
/// runs instead.
const DENSE_RATIO: usize = 4;

/// How a segment's docs of the scope are reached (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Way {
    ScopeFirst,
    MaxScore,
    Union,
}

impl Way {
    /// The way for a scope of `scope_docs` docs in a segment of `segment_docs` docs against
    /// clauses whose postings hold `doc_freqs` docs.
    fn choose(scope_docs: usize, segment_docs: usize, doc_freqs: &[usize]) -> Self {
        let postings: usize = doc_freqs.iter().sum();
        if scope_docs.saturating_mul(doc_freqs.len()).saturating_mul(SCOPE_FIRST_RATIO) < postings {
            return Way::ScopeFirst;
        }
        let sparsest = doc_freqs.iter().copied().min().unwrap_or(0);
        if sparsest.saturating_mul(DENSE_RATIO) < segment_docs { Way::MaxScore } else { Way::Union }
    }
}

/// The best `k` docs of `scope` by the summed scores of `clauses` over every segment of
/// `searcher` (see the module docs), with the slots of `columns`; `union` makes tantivy's
/// weight of the same clauses with the same statistics (built once, when a segment needs it).
pub(super) fn top_k(
    searcher: &Searcher,
    columns: &HashMap<SegmentId, Arc<SegmentColumns>>,
    scope: &HashMap<SegmentId, BitSet>,
    clauses: &[Clause],
    union: &dyn Fn() -> tantivy::Result<Box<dyn Weight>>,
    k: usize,
) -> IndexResult<Vec<Hit>> {
    if k == 0 || clauses.is_empty() {
        return Ok(Vec::new());
    }
    let mut best = Best::new(k);
    let mut union_weight: Option<Box<dyn Weight>> = None;
    // Summing the bounds in another order than a score's own sum can round either way by at
    // most one unit in the last place per addition: the margin covers it.
    let margin = 1.0 + (clauses.len() as f64 + 1.0) * f64::from(f32::EPSILON);
    for segment in searcher.segment_readers() {
        let id = segment.segment_id();
        let (Some(docs), Some(columns)) = (scope.get(&id), columns.get(&id)) else {
            continue;
        };
        // The clauses this segment holds, found in its term dictionaries; their postings are
        // opened only when warrant walks them (tantivy's union opens its own).
        let mut held = Vec::with_capacity(clauses.len());
        for (position, clause) in clauses.iter().enumerate() {
            let inverted = segment.inverted_index(clause.term.field()).map_err(lexical)?;
            if let Some(info) = inverted.get_term_info(&clause.term).map_err(|error| lexical(error.into()))? {
                held.push((position, inverted, info));
            }
        }
        if held.is_empty() {
            continue;
        }
        let segment_scope = SegmentScope { docs, slots: &columns.slots, margin };
        let doc_freqs: Vec<usize> = held.iter().map(|(_, _, info)| info.doc_freq as usize).collect();
        let way = Way::choose(docs.len(), segment.max_doc() as usize, &doc_freqs);
        #[cfg(test)]
        let way = forced::WAY.with(|forced| forced.get()).unwrap_or(way);
        let mut cursors = Vec::with_capacity(if way == Way::Union { 0 } else { held.len() });
        if way != Way::Union {
            for (position, inverted, info) in &held {
                let postings = inverted
                    .read_postings_from_terminfo(info, IndexRecordOption::WithFreqs)
                    .map_err(|error| lexical(error.into()))?;
                let clause = &clauses[*position];
                let fieldnorms = segment.get_fieldnorms_reader(clause.term.field()).map_err(lexical)?;
                cursors.push(Cursor { postings, fieldnorms, weight: clause.weight.clone(), bound: clause.bound() });
            }
        }
        match way {
            Way::ScopeFirst => segment_scope.scope_first(&mut cursors, &mut best),
            Way::MaxScore => segment_scope.postings_first(&mut cursors, &mut best),
            Way::Union => {
                if union_weight.is_none() {
                    union_weight = Some(union().map_err(lexical)?);
                }
                let weight = union_weight.as_ref().expect("built above");
                weight
                    .for_each(segment, &mut |doc, score| {
                        if segment_scope.contains(doc) {
                            best.offer(score, segment_scope.slot(doc));
                        }
                    })
                    .map_err(lexical)?;
            }
        }
    }
    Ok(best.into_hits())
}

/// The postings of one clause in one segment, with what scores them.
struct Cursor {
    postings: SegmentPostings,
    fieldnorms: FieldNormReader,
    weight: Bm25Weight,
    bound: Score,
}

impl Cursor {
    fn doc(&self) -> DocId {
        self.postings.doc()
    }

    /// The clause's score in the doc the postings are on.
    fn score(&self) -> Score {
        self.weight.score(self.fieldnorms.fieldnorm_id(self.postings.doc()), self.postings.term_freq())
    }

    /// Moves to the first posted doc at or after `target` (never backwards) and returns it.
    fn seek(&mut self, target: DocId) -> DocId {
        if self.postings.doc() < target { self.postings.seek(target) } else { self.postings.doc() }
    }
}

/// A doc's score: its clauses' scores summed in clause order from 0 (`parts[i]` is clause `i`'s
/// score, 0 where the doc does not hold it: adding 0 changes no sum).
fn sum_in_clause_order(parts: &[Score]) -> Score {
    parts.iter().fold(0.0, |sum, part| sum + part)
}

/// One segment's docs of the scope, with their slots.
struct SegmentScope<'a> {
    docs: &'a BitSet,
    slots: &'a [Slot],
    margin: f64,
}

impl SegmentScope<'_> {
    fn contains(&self, doc: DocId) -> bool {
        doc < self.docs.max_value() && self.docs.contains(doc)
    }

    fn slot(&self, doc: DocId) -> Slot {
        self.slots.get(doc as usize).copied().unwrap_or(Slot::MAX)
    }

    /// Walks the scope's docs, seeking every clause's postings to each.
    fn scope_first(&self, cursors: &mut [Cursor], best: &mut Best) {
        let mut parts = vec![0.0; cursors.len()];
        let mut docs = BitSetDocSet::from(self.docs.clone());
        let mut doc = docs.doc();
        while doc != TERMINATED {
            let mut held = false;
            for (part, cursor) in parts.iter_mut().zip(cursors.iter_mut()) {
                *part = if cursor.seek(doc) == doc {
                    held = true;
                    cursor.score()
                } else {
                    0.0
                };
            }
            if held {
                best.offer(sum_in_clause_order(&parts), self.slot(doc));
            }
            doc = docs.advance();
        }
    }

    /// Walks the essential clauses' postings doc by doc (MaxScore), checking each doc against
    /// the scope before scoring it and seeking the non-essential clauses only for docs that may
    /// still enter.
    fn postings_first(&self, cursors: &mut [Cursor], best: &mut Best) {
        // Clause positions by bound ascending; `below[i]` bounds the clauses `order[..i]`.
        let mut order: Vec<usize> = (0..cursors.len()).collect();
        order.sort_by(|&left, &right| cursors[left].bound.total_cmp(&cursors[right].bound).then(left.cmp(&right)));
        let mut below = vec![0.0f64; order.len() + 1];
        for (rank, &position) in order.iter().enumerate() {
            below[rank + 1] = below[rank] + f64::from(cursors[position].bound);
        }
        // `order[..essential]` are non-essential: their bounds together cannot lift a doc into
        // `best`, so a doc none of the others holds is never a hit.
        let mut essential = 0;
        let mut parts = vec![0.0; cursors.len()];
        // What a doc's bound must reach to enter `best` (margin included), once it is full.
        let mut floor = self.floor(best);
        loop {
            while essential < order.len() && below[essential + 1] < floor {
                essential += 1;
            }
            let Some(doc) = order[essential..].iter().map(|&position| cursors[position].doc()).min() else {
                return;
            };
            if doc == TERMINATED {
                return;
            }
            if !self.contains(doc) {
                for &position in &order[essential..] {
                    if cursors[position].doc() == doc {
                        cursors[position].postings.advance();
                    }
                }
                continue;
            }
            parts.fill(0.0);
            let mut upper = below[essential];
            for &position in &order[essential..] {
                let cursor = &mut cursors[position];
                if cursor.doc() == doc {
                    let part = cursor.score();
                    parts[position] = part;
                    upper += f64::from(part);
                    cursor.postings.advance();
                }
            }
            if upper < floor {
                continue;
            }
            // Non-essential clauses, largest bound first, while the doc may still enter.
            let mut dropped = false;
            for &position in order[..essential].iter().rev() {
                let cursor = &mut cursors[position];
                upper -= f64::from(cursor.bound);
                if cursor.seek(doc) == doc {
                    let part = cursor.score();
                    parts[position] = part;
                    upper += f64::from(part);
                }
                if upper < floor {
                    dropped = true;
                    break;
                }
            }
            if !dropped {
                best.offer(sum_in_clause_order(&parts), self.slot(doc));
                floor = self.floor(best);
            }
        }
    }

    /// The bound a doc must reach to possibly enter `best`: the worst held hit's score less
    /// the margin once `k` are held (a tie may still enter on its slot), else nothing.
    fn floor(&self, best: &Best) -> f64 {
        best.threshold().map_or(f64::NEG_INFINITY, |worst| f64::from(worst) / self.margin)
    }
}

/// The best `k` hits offered so far, the worst on top.
struct Best {
    k: usize,
    heap: BinaryHeap<WorseFirst>,
}

impl Best {
    fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k.min(4_096) + 1) }
    }

    /// The score of the worst held hit once `k` are held: a doc must reach it to enter.
    fn threshold(&self) -> Option<Score> {
        if self.heap.len() < self.k { None } else { self.heap.peek().map(|worst| worst.0.score) }
    }

    fn offer(&mut self, score: Score, slot: Slot) {
        let hit = WorseFirst(Hit { slot, score });
        if self.heap.len() < self.k {
            self.heap.push(hit);
        } else if self.heap.peek().is_some_and(|worst| hit < *worst) {
            self.heap.pop();
            self.heap.push(hit);
        }
    }

    /// Best first.
    fn into_hits(self) -> Vec<Hit> {
        let mut hits: Vec<Hit> = self.heap.into_iter().map(|WorseFirst(hit)| hit).collect();
        sort_best_first(&mut hits);
        hits
    }
}

/// Tests choose the way a segment's docs are reached, to hold both to the same reference.
#[cfg(test)]
pub(super) mod forced {
    use std::cell::Cell;

    thread_local! {
        /// `Some(way)`: every segment that way; `None`: chosen by cost.
        pub(in crate::index::lexical) static WAY: Cell<Option<super::Way>> = const { Cell::new(None) };
    }
}
