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
mod tests;
