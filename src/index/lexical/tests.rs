//! Unit tests of `index/lexical`.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use proptest::prelude::*;
use tantivy::collector::TopDocs;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::SegmentId;
use tantivy::query::{BitSetDocSet, ConstScorer, EmptyScorer, EnableScoring, Explanation, Scorer, Weight};
use tantivy::tokenizer::Token;
use tantivy::{BitSet, DocId, SegmentReader};

use super::top_k::{Way, forced};
use super::*;

/// Matches exactly the documents of a precomputed per-segment bitset, with score 0, so that as
/// a required clause it restricts a query without changing its scores: the scope of
/// [`tantivy_reference`].
#[derive(Clone)]
pub(super) struct ScopeQuery {
    pub(super) docs: Arc<HashMap<SegmentId, BitSet>>,
}

impl fmt::Debug for ScopeQuery {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let docs: usize = self.docs.values().map(BitSet::len).sum();
        formatter.debug_struct("ScopeQuery").field("docs", &docs).finish()
    }
}

impl Query for ScopeQuery {
    fn weight(&self, _enable_scoring: EnableScoring<'_>) -> tantivy::Result<Box<dyn Weight>> {
        Ok(Box::new(self.clone()))
    }
}

impl Weight for ScopeQuery {
    fn scorer(&self, reader: &SegmentReader, _boost: Score) -> tantivy::Result<Box<dyn Scorer>> {
        Ok(match self.docs.get(&reader.segment_id()) {
            Some(docs) => Box::new(ConstScorer::new(BitSetDocSet::from(docs.clone()), 0.0)),
            None => Box::new(EmptyScorer),
        })
    }

    fn explain(&self, reader: &SegmentReader, doc: DocId) -> tantivy::Result<Explanation> {
        let inside =
            self.docs.get(&reader.segment_id()).is_some_and(|docs| doc < docs.max_value() && docs.contains(doc));
        if !inside {
            return Err(TantivyError::InvalidArgument(format!("document #({doc}) is outside the scope")));
        }
        Ok(Explanation::new("AuthorizationScope", 0.0))
    }
}

/// The search as tantivy's collector runs it (what [`LexicalIndex::search`] did before it scored
/// with [`top_k`]): the union of the clauses, the scope as a zero-score required clause, every
/// doc scored, ties by slot; scored with the scope's statistics on this index.
fn tantivy_reference(index: &LexicalIndex, query: &str, k: usize, allowed: &RoaringBitmap) -> Vec<Hit> {
    let snapshot = &index.snapshot;
    let terms = index.analyze(query);
    let scope = snapshot.scope(allowed);
    if k == 0 || scope.allowed_docs == 0 || terms.is_empty() {
        return Vec::new();
    }
    let query = BooleanQuery::new(vec![
        (Occur::Must, index.text_query(&terms)),
        (Occur::Must, Box::new(ScopeQuery { docs: Arc::clone(&scope.docs) })),
    ]);
    let columns = Arc::clone(&snapshot.columns);
    let collector = TopDocs::with_limit(k).tweak_score(move |segment: &SegmentReader| {
        let slots = columns.get(&segment.segment_id()).map(Arc::clone);
        move |doc: DocId, score: Score| {
            let slot = slots.as_ref().and_then(|columns| columns.slots.get(doc as usize)).copied();
            (score, Reverse(slot.unwrap_or(Slot::MAX)))
        }
    });
    let provider = ScopeStatistics { searcher: &snapshot.searcher, scope: &scope, fields: index.fields };
    let top = snapshot.searcher.search_with_statistics_provider(&query, &collector, &provider).expect("search");
    top.into_iter().map(|((score, Reverse(slot)), _)| Hit { slot, score }).collect()
}

/// Runs `search` with every segment's docs reached `way` (`None`: chosen by cost).
fn reached<T>(way: Option<Way>, search: impl FnOnce() -> T) -> T {
    forced::WAY.with(|cell| cell.set(way));
    let result = search();
    forced::WAY.with(|cell| cell.set(None));
    result
}

/// `(slot, ordinal, title, text)` owned rows.
type Row = (Slot, DocOrdinal, String, String);

fn index_with(batches: &[Vec<Row>]) -> LexicalIndex {
    let mut index = LexicalIndex::new().expect("create index");
    for batch in batches {
        let items: Vec<(Slot, DocOrdinal, &str, &str)> =
            batch.iter().map(|(slot, ordinal, title, text)| (*slot, *ordinal, title.as_str(), text.as_str())).collect();
        index.add_batch(&items).expect("add batch");
    }
    index
}

fn rows(texts: &[(DocOrdinal, &str)]) -> Vec<Row> {
    texts
        .iter()
        .enumerate()
        .map(|(slot, (ordinal, text))| (slot as Slot, *ordinal, String::new(), text.to_string()))
        .collect()
}

fn everything() -> RoaringBitmap {
    RoaringBitmap::from_iter(0..1_000u32)
}

/// BM25 parameters of tantivy (Robertson & Zaragoza 2009 defaults).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The test oracle: a naive BM25 over the `visible` rows only, as if nothing else were
/// indexed (tantivy's k1, b, title boost and quantized field lengths), every hit, best first.
fn model(index: &LexicalIndex, rows: &[Row], query: &str, visible: impl Fn(&Row) -> bool) -> Vec<Hit> {
    let analyze = |text: &str| -> Vec<String> {
        let mut analyzer = index.analyzer.clone();
        let mut tokens = Vec::new();
        analyzer.token_stream(text).process(&mut |token: &Token| tokens.push(token.text.clone()));
        tokens
    };
    let visible: Vec<(Slot, [Vec<String>; 2])> =
        rows.iter().filter(|row| visible(row)).map(|row| (row.0, [analyze(&row.2), analyze(&row.3)])).collect();
    let docs = visible.len() as f64;
    let mut scores: HashMap<Slot, f64> = HashMap::new();
    for (field, boost) in [(0, f64::from(TITLE_BOOST)), (1, 1.0)] {
        let total_tokens: usize = visible.iter().map(|(_, fields)| fields[field].len()).sum();
        let average_length = total_tokens as f64 / docs;
        for term in index.analyze(query) {
            let doc_freq = visible.iter().filter(|(_, fields)| fields[field].contains(&term)).count() as f64;
            let idf = (1.0 + (docs - doc_freq + 0.5) / (doc_freq + 0.5)).ln();
            for (slot, fields) in &visible {
                let term_freq = fields[field].iter().filter(|token| **token == term).count() as f64;
                if term_freq == 0.0 {
                    continue;
                }
                let quantized = FieldNormReader::fieldnorm_to_id(fields[field].len() as u32);
                let length = f64::from(FieldNormReader::id_to_fieldnorm(quantized));
                let norm = K1 * (1.0 - B + B * length / average_length);
                *scores.entry(*slot).or_default() += boost * idf * (1.0 + K1) * term_freq / (term_freq + norm);
            }
        }
    }
    let mut hits: Vec<Hit> = scores.into_iter().map(|(slot, score)| Hit { slot, score: score as Score }).collect();
    hits.sort_by(|left, right| right.score.total_cmp(&left.score).then(left.slot.cmp(&right.slot)));
    hits
}

/// `got` holds the model's hits with the model's scores (f32 vs f64 arithmetic aside), best
/// first, ties by slot ascending.
fn assert_matches_model(got: &[Hit], expected: &[Hit]) {
    let expected_scores: HashMap<Slot, Score> = expected.iter().map(|hit| (hit.slot, hit.score)).collect();
    assert_eq!(got.len(), expected.len(), "{got:?} vs {expected:?}");
    for hit in got {
        let expected_score = expected_scores.get(&hit.slot).copied();
        assert!(
            expected_score.is_some_and(|score| (hit.score - score).abs() <= 1e-5 * score.abs().max(1.0)),
            "slot {}: {} vs {expected_score:?}",
            hit.slot,
            hit.score
        );
    }
    for pair in got.windows(2) {
        assert!(pair[0].score > pair[1].score || (pair[0].score == pair[1].score && pair[0].slot < pair[1].slot));
    }
}

/// Same slots in the same order with the same scores (to the bit).
fn assert_identical_hits(got: &[Hit], expected: &[Hit]) {
    let got: Vec<(Slot, u32)> = got.iter().map(|hit| (hit.slot, hit.score.to_bits())).collect();
    let expected: Vec<(Slot, u32)> = expected.iter().map(|hit| (hit.slot, hit.score.to_bits())).collect();
    assert_eq!(got, expected);
}

#[test]
fn bm25_ranks_the_more_relevant_chunk_first() {
    let index = index_with(&[rows(&[
        (0, "the cat sat on the mat"),
        (1, "cats chase mice; a cat is a cat"),
        (2, "dogs bark at the mailman"),
    ])]);
    let result = index.search("Cat", 10, &everything()).expect("search");
    let slots: Vec<Slot> = result.hits.iter().map(|hit| hit.slot).collect();
    assert_eq!(slots, vec![1, 0], "stemmed, lowercased match; higher tf first");
    assert!(result.hits[0].score > result.hits[1].score);
    assert_eq!(result.allowed_docs, 3);
}

#[test]
fn title_matches_count_but_less_than_text() {
    let index = index_with(&[vec![
        (0, 0, "zebra".to_string(), "an animal".to_string()),
        (1, 1, "an animal".to_string(), "zebra".to_string()),
        (2, 2, "nothing".to_string(), "here".to_string()),
    ]]);
    let slots: Vec<Slot> =
        index.search("zebra", 10, &everything()).expect("search").hits.iter().map(|hit| hit.slot).collect();
    assert_eq!(slots, vec![1, 0]);
}

#[test]
fn equal_scores_are_ordered_by_slot_ascending() {
    let texts: Vec<(DocOrdinal, &str)> = (0..40).map(|ordinal| (ordinal, "identical words here")).collect();
    // Several batches make several segments; ties must still come out by slot.
    let all = rows(&texts);
    let batches: Vec<Vec<Row>> = all.chunks(7).rev().map(<[Row]>::to_vec).collect();
    let index = index_with(&batches);
    let result = index.search("identical", 5, &everything()).expect("search");
    let slots: Vec<Slot> = result.hits.iter().map(|hit| hit.slot).collect();
    assert_eq!(slots, vec![0, 1, 2, 3, 4]);
}

#[test]
fn filtered_search_returns_only_allowed_ordinals_and_matches_the_oracle() {
    let corpus = rows(&[
        (0, "rust borrow checker"),
        (0, "rust lifetimes"),
        (1, "rust async runtime"),
        (2, "python garbage collector"),
        (3, "rust and python interop"),
    ]);
    let ordinal_of: HashMap<Slot, DocOrdinal> = corpus.iter().map(|row| (row.0, row.1)).collect();
    let index = index_with(std::slice::from_ref(&corpus));
    let allowed = RoaringBitmap::from_iter([0u32, 3]);
    let result = index.search("rust python", 10, &allowed).expect("search");
    assert!(result.hits.iter().all(|hit| allowed.contains(ordinal_of[&hit.slot])));
    assert_matches_model(&result.hits, &model(&index, &corpus, "rust python", |row| allowed.contains(row.1)));
    assert_eq!(result.hits.len(), 3);
    assert_eq!(result.allowed_docs, 3);

    let nothing = index.search("rust", 10, &RoaringBitmap::new()).expect("search");
    assert!(nothing.hits.is_empty());
    assert_eq!(nothing.allowed_docs, 0);
}

#[test]
fn delete_ordinals_removes_their_chunks() {
    let corpus = rows(&[(0, "alpha beta"), (1, "alpha gamma"), (1, "alpha delta"), (2, "alpha")]);
    let mut index = index_with(&[corpus]);
    assert_eq!(index.len(), 4);
    index.delete_ordinals(&RoaringBitmap::from_iter([1u32])).expect("delete");
    assert_eq!(index.len(), 2);
    let result = index.search("alpha", 10, &everything()).expect("search");
    let mut slots: Vec<Slot> = result.hits.iter().map(|hit| hit.slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 3]);
    assert_eq!(result.allowed_docs, 2, "deleted chunks are outside every scope");
    index.delete_ordinals(&RoaringBitmap::from_iter([0u32, 2])).expect("delete");
    assert!(index.is_empty());
}

/// A cached scope must not survive a commit: new chunks of an allowed ordinal are found.
#[test]
fn cached_scope_is_not_reused_after_a_commit() {
    let mut index = index_with(&[rows(&[(0, "alpha"), (1, "alpha")])]);
    let allowed = RoaringBitmap::from_iter([1u32]);
    for _ in 0..2 {
        let result = index.search("alpha", 10, &allowed).expect("search");
        assert_eq!(result.hits.iter().map(|hit| hit.slot).collect::<Vec<_>>(), vec![1]);
        assert_eq!(result.allowed_docs, 1);
    }
    index.add_batch(&[(2, 1, "", "alpha"), (3, 2, "", "alpha")]).expect("add");
    let result = index.search("alpha", 10, &allowed).expect("search");
    assert_eq!(result.hits.iter().map(|hit| hit.slot).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(result.allowed_docs, 2);
}

/// Cached document frequencies belong to their snapshot: after a commit they are counted anew.
#[test]
fn cached_doc_freqs_are_not_reused_after_a_commit() {
    let mut corpus = rows(&[(0, "alpha beta"), (1, "alpha"), (2, "gamma")]);
    let mut index = index_with(std::slice::from_ref(&corpus));
    let allowed = RoaringBitmap::from_iter([0u32, 1, 2]);
    for _ in 0..2 {
        let result = index.search("alpha", 10, &allowed).expect("search");
        assert_matches_model(&result.hits, &model(&index, &corpus, "alpha", |_| true));
    }
    index.add_batch(&[(3, 2, "", "alpha alpha")]).expect("add");
    corpus.push((3, 2, String::new(), "alpha alpha".to_string()));
    let result = index.search("alpha", 10, &allowed).expect("search");
    assert_matches_model(&result.hits, &model(&index, &corpus, "alpha", |_| true));
}

#[test]
fn queries_without_terms_return_nothing() {
    let index = index_with(&[rows(&[(0, "the quick brown fox")])]);
    for query in ["", "   ", "the and of", "!!! ???", "\u{0}"] {
        let result = index.search(query, 10, &everything()).expect("search");
        assert!(result.hits.is_empty(), "{query:?}");
    }
    assert!(index.search("fox", 0, &everything()).expect("search").hits.is_empty());
}

#[test]
fn hostile_query_strings_are_plain_text() {
    let index = index_with(&[rows(&[(0, "title x and y"), (1, "quoted words: \"hello\" 🦀 crab")])]);
    for query in [
        "title:x AND (",
        "*",
        "\"",
        "\"hello",
        "x^1000",
        "-x +y",
        "[a TO z]",
        "🦀🦀🦀",
        "text:/.*/",
        "~2 ~",
        "\\",
        "x".repeat(10_000).as_str(),
    ] {
        let result = index.search(query, 5, &everything());
        assert!(result.is_ok(), "{query:?}: {result:?}");
    }
    let slots: Vec<Slot> =
        index.search("title:x AND (", 5, &everything()).expect("search").hits.iter().map(|hit| hit.slot).collect();
    assert_eq!(slots, vec![0], "syntax characters are ignored, words still match");
}

/// With nothing deleted and everything in scope, the scope statistics are tantivy's own, to the
/// bit: the exact token counts stored at index time equal the totals of tantivy's postings
/// (texts here are longer than 40 tokens, where summing the lossy fieldnorms would drift).
#[test]
fn full_scope_scores_equal_tantivys_own_statistics_without_deletes() {
    let long = |word: &str, repeats: usize| format!("{} {}", "filler words pad the chunk ".repeat(repeats), word);
    let corpus: Vec<Row> = (0..30u32)
        .map(|slot| {
            let title = if slot % 3 == 0 { "zebra facts".to_string() } else { String::new() };
            (slot, slot, title, long(if slot % 2 == 0 { "zebra" } else { "horse" }, 4 + slot as usize * 3))
        })
        .collect();
    let index = index_with(&[corpus]);
    let query = "zebra horse filler";
    let ours = index.search(query, 100, &everything()).expect("search");
    let snapshot = &index.snapshot;
    let text_query = index.text_query(&index.analyze(query));
    let tantivy_hits = snapshot
        .searcher
        .search(text_query.as_ref(), &TopDocs::with_limit(100).order_by_score())
        .expect("search with tantivy's statistics");
    let mut theirs: Vec<Hit> = tantivy_hits
        .into_iter()
        .map(|(score, address)| {
            let segment_id = snapshot.searcher.segment_reader(address.segment_ord).segment_id();
            Hit { slot: snapshot.columns[&segment_id].slots[address.doc_id as usize], score }
        })
        .collect();
    theirs.sort_by(|left, right| right.score.total_cmp(&left.score).then(left.slot.cmp(&right.slot)));
    assert_eq!(ours.hits.len(), 30);
    assert_identical_hits(&ours.hits, &theirs);
}

/// Regression: BM25 statistics counted the whole shard, so documents the caller may not read
/// (another tenant's, say) changed the caller's scores and leaked which terms they contain.
#[test]
fn documents_outside_the_scope_do_not_change_scores() {
    let visible = rows(&[(0, "apple pie recipe"), (1, "apple cider"), (2, "banana bread")]);
    let mut packed = visible.clone();
    packed.extend((0..50).map(|slot| (100 + slot, 7, String::new(), "apple apple banana apple".to_string())));
    let alone = index_with(std::slice::from_ref(&visible));
    let crowded = index_with(&[packed]);
    let scope = RoaringBitmap::from_iter([0u32, 1, 2]);
    let expected = alone.search("apple banana", 10, &scope).expect("search");
    let got = crowded.search("apple banana", 10, &scope).expect("search");
    assert_eq!(got.hits.len(), 3);
    assert_identical_hits(&got.hits, &expected.hits);
}

/// Regression: deleted (purged) chunks stay in their segment until a merge and tantivy's own
/// statistics kept counting them, so a deleted document went on shaping scores.
#[test]
fn deleted_documents_do_not_change_scores() {
    let visible = rows(&[(0, "apple pie recipe"), (1, "apple cider"), (2, "banana bread")]);
    let mut packed = visible.clone();
    packed.extend((0..50).map(|slot| (100 + slot, 7, String::new(), "apple apple banana apple".to_string())));
    let alone = index_with(std::slice::from_ref(&visible));
    let mut purged = index_with(&[packed]);
    purged.delete_ordinals(&RoaringBitmap::from_iter([7u32])).expect("delete");
    let expected = alone.search("apple banana", 10, &everything()).expect("search");
    let got = purged.search("apple banana", 10, &everything()).expect("search");
    assert_eq!(got.allowed_docs, 3);
    assert_identical_hits(&got.hits, &expected.hits);
}

const WORDS: &[&str] = &["apple", "banana", "cherry", "date", "elder", "fig", "grape", "the", "of", "running", "runs"];

/// Words that only the invisible docs of the property tests contain.
const HIDDEN_WORDS: &[&str] = &["kiwi", "lemon", "mango"];

/// An invisible row to mix in: `(batch, ordinal, words, title words, query repeats)`.
type Invisible = (usize, u32, Vec<&'static str>, Vec<&'static str>, usize);

/// Slots of invisible rows start here (visible slots are below).
const INVISIBLE_SLOTS: Slot = 10_000;

/// `visible` with the invisible rows `(batch, ordinal, words, title words, repeats)` mixed in:
/// each goes at the start or end (by its ordinal's parity) of batch `batch % (len + 1)` (the
/// last being a batch of its own), its text followed by `query` repeated `repeats` times.
fn mix(visible: &[Vec<Row>], invisible: &[Invisible], query: &str) -> Vec<Vec<Row>> {
    let mut batches: Vec<Vec<Row>> = visible.to_vec();
    batches.push(Vec::new());
    for (position, (batch, ordinal, words, title, repeats)) in invisible.iter().enumerate() {
        let text = format!("{} {}", words.join(" "), format!("{query} ").repeat(*repeats));
        let row = (INVISIBLE_SLOTS + position as Slot, *ordinal, title.join(" "), text);
        let target = &mut batches[batch % (visible.len() + 1)];
        if ordinal % 2 == 0 { target.insert(0, row) } else { target.push(row) }
    }
    batches
}

fn invisible_strategy() -> impl Strategy<Value = Vec<Invisible>> {
    let words = prop::sample::select([WORDS, HIDDEN_WORDS].concat());
    let row = (
        0usize..4,
        100u32..106,
        prop::collection::vec(words.clone(), 0..8),
        prop::collection::vec(words, 0..3),
        0usize..4,
    );
    prop::collection::vec(row, 0..16)
}

fn corpus_strategy() -> impl Strategy<Value = Vec<Vec<Row>>> {
    let row = (
        0u32..12,
        prop::collection::vec(prop::sample::select(WORDS), 0..8),
        prop::collection::vec(prop::sample::select(WORDS), 0..3),
    );
    prop::collection::vec(prop::collection::vec(row, 0..12), 1..4).prop_map(|batches| {
        let mut slot = 0;
        batches
            .into_iter()
            .map(|batch| {
                batch
                    .into_iter()
                    .map(|(ordinal, text, title)| {
                        slot += 1;
                        (slot - 1, ordinal, title.join(" "), text.join(" "))
                    })
                    .collect()
            })
            .collect()
    })
}

/// Statistics that disagree with the shard (a term held by more docs than the count, a term
/// missing, no docs or tokens at all) score without panicking (tantivy's `idf` asserts
/// `doc_freq <= doc_count`), with finite positive scores.
#[test]
fn inconsistent_statistics_never_panic() {
    let index = index_with(&[rows(&[(0, "apple pie"), (1, "apple cider"), (2, "banana")])]);
    let mut inflated = index.statistics("apple banana", &everything()).expect("statistics");
    for doc_freq in inflated.doc_freqs.values_mut() {
        *doc_freq = 1_000;
    }
    inflated.docs = 2;
    let empty = LexicalStatistics::default();
    for statistics in [inflated, empty] {
        let result = index.search_with_statistics("apple banana cherry", 10, &everything(), &statistics);
        let hits = result.expect("search").hits;
        assert_eq!(hits.len(), 3);
        assert!(hits.iter().all(|hit| hit.score.is_finite() && hit.score > 0.0), "{hits:?}");
    }
}

#[test]
fn statistics_count_the_query_terms_inside_the_scope() {
    let index = index_with(&[vec![
        (0, 0, "Apples".to_string(), "apple pie".to_string()),
        (1, 1, String::new(), "apple cider apple".to_string()),
        (2, 2, String::new(), "banana".to_string()),
    ]]);
    let statistics =
        index.statistics("the apples, bananas and kiwis", &RoaringBitmap::from_iter([0u32, 1])).expect("statistics");
    let expected = LexicalStatistics {
        docs: 2,
        title_tokens: 1,
        text_tokens: 5,
        doc_freqs: BTreeMap::from([
            ((LexicalField::Title, "appl".to_string()), 1),
            ((LexicalField::Text, "appl".to_string()), 2),
        ]),
    };
    assert_eq!(statistics, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn filtered_search_equals_the_oracle(
        batches in corpus_strategy(),
        allowed in prop::collection::vec(0u32..14, 0..10),
        deleted in prop::collection::vec(0u32..12, 0..3),
        query in prop::collection::vec(prop::sample::select(WORDS), 0..4),
    ) {
        let mut index = index_with(&batches);
        index.delete_ordinals(&RoaringBitmap::from_iter(deleted.iter().copied())).expect("delete");
        let ordinal_of: HashMap<Slot, DocOrdinal> = batches.iter().flatten().map(|row| (row.0, row.1)).collect();
        let allowed = RoaringBitmap::from_iter(allowed);
        let query = query.join(" ");
        let result = index.search(&query, 10_000, &allowed).expect("search");
        for hit in &result.hits {
            prop_assert!(allowed.contains(ordinal_of[&hit.slot]));
            prop_assert!(!deleted.contains(&ordinal_of[&hit.slot]));
        }
        let all_rows: Vec<Row> = batches.concat();
        let expected = model(&index, &all_rows, &query, |row| allowed.contains(row.1) && !deleted.contains(&row.1));
        assert_matches_model(&result.hits, &expected);
        let expected_allowed = ordinal_of.values().filter(|&&ordinal| allowed.contains(ordinal) && !deleted.contains(&ordinal)).count();
        prop_assert_eq!(result.allowed_docs, expected_allowed);
        // A truncated top-k is a prefix of the full ranking (ties by slot make it unique).
        let top3 = index.search(&query, 3, &allowed).expect("search");
        let prefix: Vec<Slot> = result.hits.iter().take(3).map(|hit| hit.slot).collect();
        prop_assert_eq!(top3.hits.iter().map(|hit| hit.slot).collect::<Vec<_>>(), prefix);
    }

    /// A shard searched with its own statistics, handed in, scores exactly as `search` (the
    /// single-shard case of the two-phase search).
    #[test]
    fn own_statistics_give_the_scores_of_search(
        batches in corpus_strategy(),
        allowed in prop::collection::vec(0u32..14, 0..10),
        deleted in prop::collection::vec(0u32..12, 0..3),
        query in prop::collection::vec(prop::sample::select(WORDS), 0..4),
        k in 1usize..20,
    ) {
        let mut index = index_with(&batches);
        index.delete_ordinals(&RoaringBitmap::from_iter(deleted)).expect("delete");
        let query = query.join(" ");
        for scope in [RoaringBitmap::from_iter(allowed), RoaringBitmap::from_iter(0..12u32)] {
            let statistics = index.statistics(&query, &scope).expect("statistics");
            let expected = index.search(&query, k, &scope).expect("search");
            let got = index.search_with_statistics(&query, k, &scope, &statistics).expect("search");
            prop_assert_eq!(got.allowed_docs, expected.allowed_docs);
            assert_identical_hits(&got.hits, &expected.hits);
        }
    }

    /// A corpus split over two indexes, each searched with the sum of both indexes' statistics,
    /// scores every chunk as one index holding the whole corpus does.
    #[test]
    fn merged_statistics_of_a_split_corpus_score_as_one_index(
        batches in corpus_strategy(),
        sides in prop::collection::vec(any::<bool>(), 40),
        allowed in prop::option::of(prop::collection::vec(0u32..14, 0..10)),
        deleted in prop::collection::vec(0u32..12, 0..3),
        query in prop::collection::vec(prop::sample::select(WORDS), 0..4),
    ) {
        let query = query.join(" ");
        let deleted = RoaringBitmap::from_iter(deleted);
        let scope = RoaringBitmap::from_iter(allowed.unwrap_or_else(|| (0..12).collect()));
        let mut whole = index_with(&batches);
        whole.delete_ordinals(&deleted).expect("delete");
        let split = |side: bool| -> Vec<Vec<Row>> {
            batches
                .iter()
                .map(|batch| batch.iter().filter(|row| sides[row.0 as usize % sides.len()] == side).cloned().collect())
                .collect()
        };
        let mut parts = [index_with(&split(false)), index_with(&split(true))];
        let mut merged = LexicalStatistics::default();
        for part in &mut parts {
            part.delete_ordinals(&deleted).expect("delete");
            merged.merge(&part.statistics(&query, &scope).expect("statistics"));
        }
        prop_assert_eq!(&merged, &whole.statistics(&query, &scope).expect("statistics"));
        let expected = whole.search(&query, 10_000, &scope).expect("search");
        let mut got: Vec<Hit> = Vec::new();
        for part in &parts {
            got.extend(part.search_with_statistics(&query, 10_000, &scope, &merged).expect("search").hits);
        }
        got.sort_by(|left, right| right.score.total_cmp(&left.score).then(left.slot.cmp(&right.slot)));
        // Same counts, so the same arithmetic up to the order the clause scores are summed in.
        assert_matches_model(&got, &expected.hits);
    }

    /// Every way of reaching a segment's docs, MaxScore pruning at any `k` included, returns exactly
    /// what tantivy's collector returns over the same scope: same slots, same order, same
    /// scores to the bit, over corpora large enough to span several posting blocks.
    #[test]
    fn pruned_top_k_equals_tantivys_collector_either_way(
        rows in prop::collection::vec((0u32..60, prop::collection::vec(0usize..6, 0..10), prop::collection::vec(0usize..6, 0..3)), 1..400),
        segments in 1usize..4,
        allowed in prop::collection::vec(0u32..60, 0..60),
        deleted in prop::collection::vec(0u32..60, 0..4),
        query in prop::collection::vec(0usize..7, 1..5),
        k in 1usize..12,
    ) {
        // Skewed word frequencies (word i in about 1 / (i + 1) of the texts) so that term bounds
        // differ and pruning drops clauses; word 6 is in no text.
        const SKEWED: [&str; 7] = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove"];
        let words = |picks: &[usize]| -> String {
            picks.iter().enumerate().map(|(position, &pick)| SKEWED[if position % (pick + 1) == 0 { pick } else { 0 }]).collect::<Vec<_>>().join(" ")
        };
        let corpus: Vec<Row> = rows.iter().enumerate().map(|(slot, (ordinal, text, title))| (slot as Slot, *ordinal, words(title), words(text))).collect();
        let size = corpus.len().div_ceil(segments);
        let batches: Vec<Vec<Row>> = corpus.chunks(size).map(<[Row]>::to_vec).collect();
        let mut index = index_with(&batches);
        index.delete_ordinals(&RoaringBitmap::from_iter(deleted)).expect("delete");
        let query: Vec<&str> = query.iter().map(|&word| SKEWED[word]).collect();
        let query = query.join(" ");
        for scope in [RoaringBitmap::from_iter(allowed), RoaringBitmap::from_iter(0..60u32)] {
            let expected = tantivy_reference(&index, &query, k, &scope);
            for way in [None, Some(Way::ScopeFirst), Some(Way::MaxScore), Some(Way::Union)] {
                let got = reached(way, || index.search(&query, k, &scope)).expect("search");
                assert_identical_hits(&got.hits, &expected);
            }
        }
    }

    #[test]
    fn any_unicode_query_is_safe(query in "\\PC{0,40}", k in 0usize..20) {
        let index = index_with(&[rows(&[(0, "apple banana"), (1, "cherry 🦀 date")])]);
        prop_assert!(index.search(&query, k, &everything()).is_ok());
    }

    /// The unstemmed counter makes exactly as many tokens as the analyzer whose tokens the
    /// index records.
    #[test]
    fn token_count_is_the_number_of_analyzed_tokens(
        text in "\\PC{0,60}|((the|of|And|running|runs|Apple's|[a-zA-Z0-9]{1,50}|[^a-z ]{1,3}) ){0,20}",
    ) {
        let index = LexicalIndex::new().expect("create index");
        let mut analyzer = index.analyzer.clone();
        let mut analyzed = 0;
        analyzer.token_stream(&text).process(&mut |_: &Token| analyzed += 1);
        prop_assert_eq!(token_count(&mut index.counter.clone(), &text), analyzed);
    }

    /// The document frequency of a term inside a scope is the naive count, whether the
    /// postings are walked or the scope leapfrogs them (a scope much smaller than the postings).
    #[test]
    fn doc_freq_counts_the_live_docs_of_the_scope(
        holds in prop::collection::vec(prop::bool::weighted(0.8), 1..400),
        allowed in prop::collection::vec(0u32..400, 0..80),
        deleted in prop::collection::vec(0u32..400, 0..20),
    ) {
        let corpus: Vec<Row> = holds
            .iter()
            .enumerate()
            .map(|(slot, holds)| (slot as Slot, slot as DocOrdinal, String::new(), if *holds { "apple pie" } else { "pie" }.to_string()))
            .collect();
        let mut index = index_with(&[corpus]);
        index.delete_ordinals(&RoaringBitmap::from_iter(deleted.iter().copied())).expect("delete");
        let allowed = RoaringBitmap::from_iter(allowed);
        let scope = index.snapshot.scope(&allowed);
        let statistics = ScopeStatistics { searcher: &index.snapshot.searcher, scope: &scope, fields: index.fields };
        let expected = holds
            .iter()
            .enumerate()
            .filter(|&(ordinal, holds)| *holds && allowed.contains(ordinal as u32) && !deleted.contains(&(ordinal as u32)))
            .count() as u64;
        for term in index.analyze("apple") {
            prop_assert_eq!(statistics.doc_freq(&Term::from_field_text(index.fields.text, &term)).expect("doc freq"), expected);
        }
    }

    /// Scores and order inside a scope are the same whether or not documents outside it (some
    /// packed with the query's terms, some deleted) share the shard.
    #[test]
    fn scores_ignore_everything_outside_the_scope(
        visible in corpus_strategy(),
        invisible in invisible_strategy(),
        deleted in prop::collection::vec(100u32..106, 0..3),
        narrow in prop::option::of(prop::collection::vec(0u32..12, 0..12)),
        query in prop::collection::vec(prop::sample::select([WORDS, HIDDEN_WORDS].concat()), 1..4),
    ) {
        let query = query.join(" ");
        let alone = index_with(&visible);
        let mut mixed = index_with(&mix(&visible, &invisible, &query));
        mixed.delete_ordinals(&RoaringBitmap::from_iter(deleted)).expect("delete");
        // Every visible ordinal (the fast path in `alone`), or a random subset of them.
        let scope = RoaringBitmap::from_iter(narrow.unwrap_or_else(|| (0..12).collect()));
        let expected = alone.search(&query, 10_000, &scope).expect("search");
        let got = mixed.search(&query, 10_000, &scope).expect("search");
        prop_assert_eq!(got.allowed_docs, expected.allowed_docs);
        assert_identical_hits(&got.hits, &expected.hits);
        let top3 = mixed.search(&query, 3, &scope).expect("search");
        assert_identical_hits(&top3.hits, &expected.hits[..expected.hits.len().min(3)]);
    }

    /// Nothing panics (tantivy's `idf` asserts `doc_freq <= doc_count`): queries whose terms
    /// only invisible or deleted docs hold, empty scopes, scopes of purged ordinals only.
    #[test]
    fn scope_statistics_never_panic_and_stay_bounded(
        visible in corpus_strategy(),
        invisible in invisible_strategy(),
        deleted in prop::collection::vec(0u32..106, 0..8),
        allowed in prop::collection::vec(0u32..106, 0..6),
        query in prop::collection::vec(prop::sample::select([WORDS, HIDDEN_WORDS].concat()), 0..4),
        k in 0usize..5,
    ) {
        let query = query.join(" ");
        let mut index = index_with(&mix(&visible, &invisible, &query));
        index.delete_ordinals(&RoaringBitmap::from_iter(deleted.iter().copied())).expect("delete");
        let all_rows: Vec<Row> = mix(&visible, &invisible, &query).concat();
        let ordinal_of: HashMap<Slot, DocOrdinal> = all_rows.iter().map(|row| (row.0, row.1)).collect();
        for scope in [RoaringBitmap::from_iter(allowed), RoaringBitmap::from_iter(deleted.iter().copied()), RoaringBitmap::new()] {
            let result = index.search(&query, k, &scope).expect("search");
            prop_assert!(result.hits.len() <= k);
            for hit in &result.hits {
                prop_assert!(scope.contains(ordinal_of[&hit.slot]) && !deleted.contains(&ordinal_of[&hit.slot]));
                prop_assert!(hit.score.is_finite() && hit.score > 0.0);
            }
            let cached = index.snapshot.scope(&scope);
            let statistics = ScopeStatistics { searcher: &index.snapshot.searcher, scope: &cached, fields: index.fields };
            let docs = statistics.total_num_docs().expect("docs");
            for field in [index.fields.title, index.fields.text] {
                prop_assert!(statistics.total_num_tokens(field).expect("tokens") >= 1);
                for word in [WORDS, HIDDEN_WORDS].concat() {
                    for term in index.analyze(word) {
                        prop_assert!(statistics.doc_freq(&Term::from_field_text(field, &term)).expect("doc freq") <= docs);
                    }
                }
            }
        }
    }
}

/// Mean per-query time of filtered (1% of ordinals) vs unfiltered search on 50k short docs.
/// `cargo test --release --lib index::lexical -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_filtered_vs_unfiltered() {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::time::Instant;

    let mut rng = SmallRng::seed_from_u64(7);
    let vocabulary: Vec<String> = (0..5_000).map(|word| format!("w{word}x")).collect();
    let docs = 50_000u32;
    let texts: Vec<String> = (0..docs)
        .map(|_| (0..12).map(|_| vocabulary[rng.gen_range(0..vocabulary.len())].as_str()).collect::<Vec<_>>().join(" "))
        .collect();
    let mut index = LexicalIndex::new().expect("create");
    let indexing = Instant::now();
    for start in (0..docs).step_by(10_000) {
        let items: Vec<(Slot, DocOrdinal, &str, &str)> =
            (start..start + 10_000).map(|slot| (slot, slot, "", texts[slot as usize].as_str())).collect();
        index.add_batch(&items).expect("add");
    }
    println!("indexing {docs} docs: {:.0} ms", indexing.elapsed().as_secs_f64() * 1e3);
    let queries: Vec<String> = (0..500)
        .map(|_| (0..3).map(|_| vocabulary[rng.gen_range(0..vocabulary.len())].as_str()).collect::<Vec<_>>().join(" "))
        .collect();
    let allowed: RoaringBitmap = (0..docs).filter(|_| rng.gen_bool(0.01)).collect();
    let all: RoaringBitmap = (0..docs).collect();
    let fresh: Vec<RoaringBitmap> =
        queries.iter().map(|_| (0..docs).filter(|_| rng.gen_bool(0.01)).collect()).collect();
    let half: RoaringBitmap = (0..docs).filter(|_| rng.gen_bool(0.5)).collect();
    let cases: [(&str, Vec<&RoaringBitmap>); 4] = [
        ("unfiltered", vec![&all; queries.len()]),
        ("filtered 1%, same scope (cached)", vec![&allowed; queries.len()]),
        ("filtered 1%, new scope per query", fresh.iter().collect()),
        ("filtered 50%, same scope (cached)", vec![&half; queries.len()]),
    ];
    for (name, scopes) in cases {
        let started = Instant::now();
        let mut found = 0;
        let mut latencies = Vec::with_capacity(queries.len());
        for (position, query) in queries.iter().enumerate() {
            let one = Instant::now();
            let result = index.search(query, 10, scopes[position]).expect("search");
            latencies.push(one.elapsed().as_secs_f64() * 1e3);
            found += result.hits.len();
        }
        let mean = started.elapsed().as_secs_f64() * 1e3 / queries.len() as f64;
        latencies.sort_by(f64::total_cmp);
        let median = latencies[latencies.len() / 2];
        println!(
            "{name}: mean {mean:.4} ms/query, median {median:.4} ms/query, {:.2} hits/query",
            found as f64 / queries.len() as f64
        );
    }
}

/// Over many posting blocks and two segments, a top-k is exactly the head of the full ranking
/// (scores bit for bit, ties by slot), inside the scope, for a whole scope and a partial one.
#[test]
fn top_k_over_many_blocks_is_the_head_of_the_full_ranking() {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    const VOCABULARY: [&str; 12] =
        ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heath", "inlet", "jade", "knoll", "lagoon"];
    let mut rng = SmallRng::seed_from_u64(11);
    let rows: Vec<Row> = (0..1_200u32)
        .map(|slot| {
            let words: Vec<&str> = (0..rng.gen_range(3..12)).map(|_| VOCABULARY[rng.gen_range(0..12)]).collect();
            (slot, slot / 2, String::new(), words.join(" "))
        })
        .collect();
    let index = index_with(&[rows[..700].to_vec(), rows[700..].to_vec()]);
    let ordinal_of: HashMap<Slot, DocOrdinal> = rows.iter().map(|row| (row.0, row.1)).collect();
    let most: RoaringBitmap = (0..600u32).filter(|ordinal| ordinal % 5 != 0).collect();
    for scope in [everything(), most] {
        for query in ["amber birch", "cedar delta ember", "jade", "knoll lagoon amber fjord"] {
            let full = index.search(query, 10_000, &scope).expect("search");
            assert!(full.hits.len() > 100, "{query}: {}", full.hits.len());
            for k in [1, 5, 10] {
                let top = index.search(query, k, &scope).expect("search");
                let head: Vec<(Slot, u32)> =
                    full.hits.iter().take(k).map(|hit| (hit.slot, hit.score.to_bits())).collect();
                let got: Vec<(Slot, u32)> = top.hits.iter().map(|hit| (hit.slot, hit.score.to_bits())).collect();
                assert_eq!(got, head, "{query}, k = {k}");
                assert!(top.hits.iter().all(|hit| scope.contains(ordinal_of[&hit.slot])));
            }
            let expected = model(&index, &rows, query, |row| scope.contains(row.1));
            assert_matches_model(&full.hits, &expected);
        }
    }
}
