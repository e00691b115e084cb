//! In-RAM tantivy BM25 index (Robertson & Zaragoza 2009) over one shard's chunks, searched
//! *inside* an authorization scope.
//!
//! Every chunk is one tantivy document holding its shard `slot` (fast field), its document
//! `ordinal` (indexed + fast field, the key ACL bitmaps are over), its analyzed `title` and
//! `text` (not stored: the shard keeps the text itself) and the exact number of analyzed tokens
//! of each (fast fields `title_tokens`, `text_tokens`).
//!
//! Invariants kept by this module:
//! - user query text never reaches tantivy's query grammar: it is analyzed with the index's own
//!   English analyzer and turned into a disjunction of term queries, so any input is safe;
//! - a search scores only documents whose ordinal is in the `allowed` bitmap and that are alive:
//!   the scope is a per-segment [`BitSet`] used as a zero-score required clause, so nothing
//!   outside it is ever scored into the top-k (no post-filtering);
//! - scores depend only on documents inside the caller's scope: the BM25 statistics (document
//!   count, average field length, document frequency of each term) are computed over the alive
//!   docs of the scope ([`ScopeStatistics`]), never over the whole shard, so another tenant's
//!   documents, documents the caller may not read and revoked or deleted documents not yet merged
//!   away change neither the order nor the value of any score (tantivy's own statistics count
//!   every doc of every segment, deleted ones included). A search over scope `S` returns exactly
//!   what plain BM25 over an index holding only `S` would;
//! - the searcher, the per-segment ordinal/slot/token-count columns and a small cache of recent
//!   scopes (bitsets, token totals, document frequencies of recent terms) are pinned together in
//!   one [`Snapshot`], rebuilt after every commit, so a search never mixes generations and a
//!   cached scope never outlives the segments it was built on;
//! - results are ordered by BM25 score descending, ties broken by slot ascending;
//! - scores across shards are comparable when every shard is searched with the same
//!   [`LexicalStatistics`]: [`LexicalIndex::statistics`] reports a query's statistics inside a
//!   scope as plain counts, their sum over the shards ([`LexicalStatistics::merge`]) is the
//!   statistics of the scope over the whole corpus, and [`LexicalIndex::search_with_statistics`]
//!   scores with them (two-phase, like a distributed search's DFS phase), so the scores do not
//!   depend on how the chunks are spread over shards.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use roaring::RoaringBitmap;
use tantivy::collector::TopDocs;
use tantivy::directory::RamDirectory;
use tantivy::index::SegmentId;
use tantivy::postings::SegmentPostings;
use tantivy::query::{
    BitSetDocSet, Bm25StatisticsProvider, BooleanQuery, BoostQuery, ConstScorer, EmptyScorer, EnableScoring,
    Explanation, Occur, Query, Scorer, TermQuery, Weight,
};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer, TextAnalyzerBuilder,
};
use tantivy::{
    BitSet, DocId, DocSet, Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, Score, Searcher,
    SegmentReader, TERMINATED, TantivyDocument, TantivyError, Term,
};

use super::{Hit, IndexError, IndexResult, Slot};
use crate::domain::DocOrdinal;

mod image;

pub use image::{LEXICAL_MAGIC, LEXICAL_VERSION};

/// Name under which the English analyzer is registered in the index's tokenizer manager.
const ANALYZER: &str = "warrant_en";
/// Tokens longer than this many bytes are dropped (base64 blobs, hashes, URLs).
const MAX_TOKEN_BYTES: usize = 40;
/// Writer memory budget (tantivy requires at least 15 MB per thread).
const WRITER_BUDGET_BYTES: usize = 32_000_000;
/// Weight of a title match relative to a body-text match. Every chunk of a document repeats its
/// title, so the title should inform but not drown out the chunk's own text.
const TITLE_BOOST: Score = 0.5;

/// Result of one lexical search.
#[derive(Clone, Debug)]
pub struct LexicalSearch {
    /// Best first; score = BM25, ties broken by slot ascending.
    pub hits: Vec<Hit>,
    /// Number of live tantivy documents (chunks) inside the scope.
    pub allowed_docs: usize,
}

/// A scored text field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LexicalField {
    /// The chunk's document title.
    Title,
    /// The chunk's text.
    Text,
}

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

/// Field handles of the schema.
#[derive(Clone, Copy)]
struct Fields {
    slot: Field,
    ordinal: Field,
    title: Field,
    text: Field,
    /// Exact number of analyzed tokens of `title` (tantivy's fieldnorms are lossy above 40).
    title_tokens: Field,
    /// Exact number of analyzed tokens of `text`.
    text_tokens: Field,
}

impl Fields {
    /// Which scored field `field` is; any other field is an error (only title and text are scored).
    fn scored(&self, field: Field) -> tantivy::Result<LexicalField> {
        if field == self.title {
            Ok(LexicalField::Title)
        } else if field == self.text {
            Ok(LexicalField::Text)
        } else {
            Err(TantivyError::InvalidArgument(format!("field {field:?} is not scored")))
        }
    }
}

/// Analyzed-token totals of the two text fields over a set of docs (BM25's average field length
/// is the total over the doc count).
#[derive(Clone, Copy, Debug, Default)]
struct TokenTotals {
    title: u64,
    text: u64,
}

/// Per-segment columns read once per searcher generation.
struct SegmentColumns {
    /// `slots[doc]` is the slot of tantivy doc `doc` (dead docs included).
    slots: Vec<Slot>,
    /// `title_tokens[doc]`: exact analyzed-token count of the doc's title (dead docs included).
    title_tokens: Vec<u32>,
    /// `text_tokens[doc]`: exact analyzed-token count of the doc's text (dead docs included).
    text_tokens: Vec<u32>,
    /// `(ordinal, doc)` of the *alive* docs, sorted: the scope bitset is built by a lookup per
    /// allowed ordinal or a scan, whichever is cheaper.
    by_ordinal: Vec<(DocOrdinal, DocId)>,
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
struct Scope {
    docs: Arc<HashMap<SegmentId, BitSet>>,
    /// Total number of set bits.
    allowed_docs: usize,
    /// Token totals of the title and text fields over the set bits.
    tokens: TokenTotals,
    /// Document frequencies inside the scope of the terms most recently asked for.
    doc_freqs: Mutex<LruCache<Term, u64>>,
}

/// How many recent scopes a snapshot keeps (the same principal usually asks several queries).
const SCOPE_CACHE_LEN: usize = 8;

/// How many document frequencies a cached scope keeps (a principal's queries share terms, and
/// counting a broad term's postings inside a scope costs about as much as scoring them).
const DOC_FREQ_CACHE_LEN: NonZeroUsize = NonZeroUsize::new(256).expect("not zero");

/// A searcher pinned together with the columns of its segments and the scopes recently built
/// over them (dropped with the snapshot, so a cached scope never outlives its generation).
struct Snapshot {
    searcher: Searcher,
    columns: Arc<HashMap<SegmentId, Arc<SegmentColumns>>>,
    /// Most recently used last.
    scopes: Mutex<VecDeque<(RoaringBitmap, Arc<Scope>)>>,
}

impl Snapshot {
    /// Reads the columns of `searcher`, reusing those of `previous` for unchanged segments.
    fn build(searcher: Searcher, previous: Option<&Snapshot>) -> IndexResult<Self> {
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
    fn scope(&self, allowed: &RoaringBitmap) -> Arc<Scope> {
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

/// In-RAM BM25 index over one shard's chunks. See the module docs for its invariants.
pub struct LexicalIndex {
    index: Index,
    /// The RAM directory under `index`'s managed directory: its files are the raw segment files,
    /// footers included, which the index image ([`image`]) copies.
    directory: RamDirectory,
    writer: IndexWriter,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    /// Counts the tokens `analyzer` makes (see [`token_count`]).
    counter: TextAnalyzer,
    snapshot: Snapshot,
}

impl fmt::Debug for LexicalIndex {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("LexicalIndex").field("docs", &self.len()).finish_non_exhaustive()
    }
}

fn lexical(error: TantivyError) -> IndexError {
    IndexError::Lexical(error.to_string())
}

/// The English analysis chain up to, not including, stemming.
fn unstemmed_analyzer() -> TextAnalyzerBuilder {
    let builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .dynamic();
    match StopWordFilter::new(Language::English) {
        Some(stop_words) => builder.filter_dynamic(stop_words),
        None => builder,
    }
}

/// The analyzer of both text fields and of queries.
fn english_analyzer() -> TextAnalyzer {
    unstemmed_analyzer().filter_dynamic(Stemmer::new(Language::English)).build()
}

/// Number of tokens the index records for `text`, counted with `counter`
/// ([`unstemmed_analyzer`]): stemming maps each token to exactly one stem, so the chain without
/// it makes as many tokens at a fraction of the cost; and tantivy indexes every token it is given
/// (it only drops tokens over 65 530 bytes, [`RemoveLongFilter`] already dropped those over
/// [`MAX_TOKEN_BYTES`]).
fn token_count(counter: &mut TextAnalyzer, text: &str) -> u64 {
    let mut stream = counter.token_stream(text);
    let mut count = 0;
    while stream.advance() {
        count += 1;
    }
    count
}

/// The schema of every lexical index, with its fields.
fn schema() -> (Schema, Fields) {
    let mut schema_builder = Schema::builder();
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        slot: schema_builder.add_u64_field("slot", FAST),
        ordinal: schema_builder.add_u64_field("ordinal", INDEXED | FAST),
        title: schema_builder.add_text_field("title", text_options.clone()),
        text: schema_builder.add_text_field("text", text_options),
        title_tokens: schema_builder.add_u64_field("title_tokens", FAST),
        text_tokens: schema_builder.add_u64_field("text_tokens", FAST),
    };
    (schema_builder.build(), fields)
}

impl LexicalIndex {
    /// Creates an empty in-RAM index with one single-threaded writer.
    pub fn new() -> IndexResult<Self> {
        let (schema, fields) = schema();
        let directory = RamDirectory::create();
        let index = Index::create(directory.clone(), schema, IndexSettings::default()).map_err(lexical)?;
        Self::over(index, directory, fields)
    }

    /// The index over `index` (stored in `directory`) with the analyzer registered, a writer, a
    /// reader and a pinned snapshot.
    fn over(index: Index, directory: RamDirectory, fields: Fields) -> IndexResult<Self> {
        let analyzer = english_analyzer();
        index.tokenizers().register(ANALYZER, analyzer.clone());
        let writer = index.writer_with_num_threads(1, WRITER_BUDGET_BYTES).map_err(lexical)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(lexical)?;
        let snapshot = Snapshot::build(reader.searcher(), None)?;
        Ok(Self { index, directory, writer, reader, fields, analyzer, counter: unstemmed_analyzer().build(), snapshot })
    }

    /// Adds chunks `(slot, doc ordinal, title, text)`, commits and reloads the reader so the batch
    /// is searchable on return. All or nothing: on error the uncommitted batch is rolled back.
    pub fn add_batch(&mut self, items: &[(Slot, DocOrdinal, &str, &str)]) -> IndexResult<()> {
        if items.is_empty() {
            return Ok(());
        }
        let fields = self.fields;
        let mut counter = self.counter.clone();
        let staged = items.iter().try_for_each(|&(slot, ordinal, title, text)| {
            let mut document = TantivyDocument::new();
            document.add_u64(fields.slot, u64::from(slot));
            document.add_u64(fields.ordinal, u64::from(ordinal));
            document.add_u64(fields.title_tokens, token_count(&mut counter, title));
            document.add_u64(fields.text_tokens, token_count(&mut counter, text));
            document.add_text(fields.title, title);
            document.add_text(fields.text, text);
            self.writer.add_document(document).map(|_| ())
        });
        self.commit_or_rollback(staged)
    }

    /// Physically removes every chunk of these doc ordinals (index cleanup after deletes and
    /// upserts; correctness never depends on it because scopes exclude tombstoned ordinals).
    pub fn delete_ordinals(&mut self, ordinals: &RoaringBitmap) -> IndexResult<()> {
        if ordinals.is_empty() {
            return Ok(());
        }
        for ordinal in ordinals {
            self.writer.delete_term(Term::from_field_u64(self.fields.ordinal, u64::from(ordinal)));
        }
        self.commit_or_rollback(Ok(()))
    }

    /// Commits the staged operations if `staged` succeeded, otherwise (or if the commit fails)
    /// rolls them back; then pins a fresh snapshot.
    fn commit_or_rollback(&mut self, staged: tantivy::Result<()>) -> IndexResult<()> {
        let committed = staged.and_then(|()| self.writer.commit().map(|_| ()));
        if let Err(error) = committed {
            // The rollback error, if any, is secondary to the one that caused it.
            let _ = self.writer.rollback();
            return Err(lexical(error));
        }
        self.reader.reload().map_err(lexical)?;
        self.snapshot = Snapshot::build(self.reader.searcher(), Some(&self.snapshot))?;
        Ok(())
    }

    /// Distinct analyzed terms of `query` (sorted, so query construction is deterministic).
    fn analyze(&self, query: &str) -> BTreeSet<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(query);
        let mut terms = BTreeSet::new();
        while stream.advance() {
            terms.insert(stream.token().text.clone());
        }
        terms
    }

    /// The disjunction of `terms` over title (boost [`TITLE_BOOST`]) and text.
    fn text_query(&self, terms: &BTreeSet<String>) -> Box<dyn Query> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(terms.len() * 2);
        for term in terms {
            let title = TermQuery::new(Term::from_field_text(self.fields.title, term), IndexRecordOption::WithFreqs);
            clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(title), TITLE_BOOST))));
            let text = TermQuery::new(Term::from_field_text(self.fields.text, term), IndexRecordOption::WithFreqs);
            clauses.push((Occur::Should, Box::new(text)));
        }
        Box::new(BooleanQuery::new(clauses))
    }

    /// BM25 top-`k` over title (boost [`TITLE_BOOST`]) and text, restricted to chunks whose doc
    /// ordinal is in `allowed` and scored with the statistics of that scope only (see the
    /// module docs). A query with no terms left after analysis matches nothing.
    pub fn search(&self, query: &str, k: usize, allowed: &RoaringBitmap) -> IndexResult<LexicalSearch> {
        self.search_scored_by(query, k, allowed, None)
    }

    /// The BM25 statistics of `query` inside `allowed` on this index: the counts [`Self::search`]
    /// scores with (same analysis of the query, same scope).
    pub fn statistics(&self, query: &str, allowed: &RoaringBitmap) -> IndexResult<LexicalStatistics> {
        let snapshot = &self.snapshot;
        let terms = self.analyze(query);
        let scope = snapshot.scope(allowed);
        let mut statistics = LexicalStatistics {
            docs: scope.allowed_docs as u64,
            title_tokens: scope.tokens.title,
            text_tokens: scope.tokens.text,
            doc_freqs: BTreeMap::new(),
        };
        if scope.allowed_docs == 0 {
            return Ok(statistics);
        }
        let provider = ScopeStatistics { searcher: &snapshot.searcher, scope: &scope, fields: self.fields };
        for term in terms {
            for (field, handle) in [(LexicalField::Title, self.fields.title), (LexicalField::Text, self.fields.text)] {
                let doc_freq = provider.doc_freq(&Term::from_field_text(handle, &term)).map_err(lexical)?;
                if doc_freq > 0 {
                    statistics.doc_freqs.insert((field, term.clone()), doc_freq);
                }
            }
        }
        Ok(statistics)
    }

    /// [`Self::search`] scored with the given `statistics` instead of this index's own: with the
    /// statistics of the scope summed over every shard, scores are those of one index holding
    /// every shard's chunks. Statistics of this index alone give exactly [`Self::search`]'s scores.
    pub fn search_with_statistics(
        &self,
        query: &str,
        k: usize,
        allowed: &RoaringBitmap,
        statistics: &LexicalStatistics,
    ) -> IndexResult<LexicalSearch> {
        self.search_scored_by(query, k, allowed, Some(statistics))
    }

    /// The search, scored with `statistics` or else with the scope's statistics on this index.
    fn search_scored_by(
        &self,
        query: &str,
        k: usize,
        allowed: &RoaringBitmap,
        statistics: Option<&LexicalStatistics>,
    ) -> IndexResult<LexicalSearch> {
        let snapshot = &self.snapshot;
        let terms = self.analyze(query);
        let scope = snapshot.scope(allowed);
        let allowed_docs = scope.allowed_docs;
        if k == 0 || allowed_docs == 0 || terms.is_empty() {
            return Ok(LexicalSearch { hits: Vec::new(), allowed_docs });
        }

        let text_query = self.text_query(&terms);
        // A scope holding every live doc restricts nothing: skip the clause so tantivy can use
        // its dynamic pruning (block-max WAND) on the plain disjunction.
        let query: Box<dyn Query> = if allowed_docs as u64 == snapshot.searcher.num_docs() {
            text_query
        } else {
            Box::new(BooleanQuery::new(vec![
                (Occur::Must, text_query),
                (Occur::Must, Box::new(ScopeQuery { docs: Arc::clone(&scope.docs) })),
            ]))
        };

        let columns = Arc::clone(&snapshot.columns);
        let collector = TopDocs::with_limit(k).tweak_score(move |segment: &SegmentReader| {
            let slots = columns.get(&segment.segment_id()).map(Arc::clone);
            move |doc: DocId, score: Score| {
                let slot = slots.as_ref().and_then(|columns| columns.slots.get(doc as usize)).copied();
                (score, Reverse(slot.unwrap_or(Slot::MAX)))
            }
        });
        let top = match statistics {
            Some(statistics) => {
                let provider = GivenStatistics { statistics, fields: self.fields };
                snapshot.searcher.search_with_statistics_provider(query.as_ref(), &collector, &provider)
            }
            None => {
                let provider = ScopeStatistics { searcher: &snapshot.searcher, scope: &scope, fields: self.fields };
                snapshot.searcher.search_with_statistics_provider(query.as_ref(), &collector, &provider)
            }
        }
        .map_err(lexical)?;
        let hits = top.into_iter().map(|((score, Reverse(slot)), _)| Hit { slot, score }).collect();
        Ok(LexicalSearch { hits, allowed_docs })
    }

    /// Number of live tantivy documents (chunks).
    pub fn len(&self) -> u64 {
        self.snapshot.searcher.num_docs()
    }

    /// Whether the index holds no live chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(slot, ordinal)` of every alive document (checks of a loaded image against its slots).
    pub fn alive_slots(&self) -> Vec<(Slot, DocOrdinal)> {
        self.snapshot
            .columns
            .values()
            .flat_map(|columns| columns.by_ordinal.iter().map(|&(ordinal, doc)| (columns.slots[doc as usize], ordinal)))
            .collect()
    }

    /// The underlying tantivy index (diagnostics).
    pub fn tantivy_index(&self) -> &Index {
        &self.index
    }
}

/// BM25 statistics over the alive docs of one scope only: the document count and the token
/// totals come from the cached [`Scope`], the document frequency of a term is counted in its
/// postings, per segment, over the scope's bitset (and kept in the scope's bounded cache). Deleted docs are never counted (tantivy's
/// [`Searcher`] statistics count every doc of every segment, deleted ones included), so a full
/// scope yields the statistics of the live shard.
struct ScopeStatistics<'a> {
    searcher: &'a Searcher,
    scope: &'a Scope,
    fields: Fields,
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
struct GivenStatistics<'a> {
    statistics: &'a LexicalStatistics,
    fields: Fields,
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

/// Matches exactly the documents of a precomputed per-segment bitset, with score 0, so that as
/// a required clause it restricts a query without changing its scores.
#[derive(Clone)]
struct ScopeQuery {
    docs: Arc<HashMap<SegmentId, BitSet>>,
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use tantivy::fieldnorm::FieldNormReader;
    use tantivy::tokenizer::Token;

    use super::*;

    /// `(slot, ordinal, title, text)` owned rows.
    type Row = (Slot, DocOrdinal, String, String);

    fn index_with(batches: &[Vec<Row>]) -> LexicalIndex {
        let mut index = LexicalIndex::new().expect("create index");
        for batch in batches {
            let items: Vec<(Slot, DocOrdinal, &str, &str)> = batch
                .iter()
                .map(|(slot, ordinal, title, text)| (*slot, *ordinal, title.as_str(), text.as_str()))
                .collect();
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

    const WORDS: &[&str] =
        &["apple", "banana", "cherry", "date", "elder", "fig", "grape", "the", "of", "running", "runs"];

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
        let statistics = index
            .statistics("the apples, bananas and kiwis", &RoaringBitmap::from_iter([0u32, 1]))
            .expect("statistics");
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
            .map(|_| {
                (0..12).map(|_| vocabulary[rng.gen_range(0..vocabulary.len())].as_str()).collect::<Vec<_>>().join(" ")
            })
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
            .map(|_| {
                (0..3).map(|_| vocabulary[rng.gen_range(0..vocabulary.len())].as_str()).collect::<Vec<_>>().join(" ")
            })
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
}
