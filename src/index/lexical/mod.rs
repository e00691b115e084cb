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
//!   English analyzer and turned into a disjunction of (term, field) clauses, so any input is safe;
//! - a search scores only documents whose ordinal is in the `allowed` bitmap and that are alive:
//!   the scope is a per-segment [`BitSet`] that the top-k walk ([`top_k`]) checks before it
//!   scores a doc, so nothing outside it is ever scored into the top-k (no post-filtering);
//! - the top-k is exact whichever way [`top_k`] reaches a segment's docs (the scope first,
//!   MaxScore pruning over per-clause bounds that never drops a doc that could still enter, or
//!   tantivy's union), and a doc's score is the sum of its clauses' scores in clause order: the
//!   same to the bit whatever `k`, the scope or the way, and equal to what tantivy's own
//!   collector computes over the same scope (the tests hold it to that);
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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use roaring::RoaringBitmap;
use tantivy::directory::RamDirectory;
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, BoostQuery, EnableScoring, Occur, Query, TermQuery,
};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{
    Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, Score, TantivyDocument, TantivyError, Term,
};

use super::{Hit, IndexError, IndexResult, Slot};
use crate::domain::DocOrdinal;

mod analysis;
mod image;
mod scope;
mod statistics;
mod top_k;

use analysis::{ANALYZER, english_analyzer, token_count, unstemmed_analyzer};
pub use image::{LEXICAL_MAGIC, LEXICAL_VERSION, LexicalDelta, LexicalFiles};
use scope::Snapshot;
pub use statistics::LexicalStatistics;
use statistics::{GivenStatistics, ScopeStatistics};

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

    /// The disjunction of `terms` over title (boost [`TITLE_BOOST`]) and text, as a tantivy
    /// query: the clauses of [`Self::clauses`] in the same order, for tantivy's buffered union.
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

    /// The scored clauses of `terms`, in the order of [`Self::text_query`]: each term's title
    /// (boost [`TITLE_BOOST`]) then its text, with the BM25 weights of `statistics`.
    fn clauses(
        &self,
        terms: &BTreeSet<String>,
        statistics: &dyn Bm25StatisticsProvider,
    ) -> tantivy::Result<Vec<top_k::Clause>> {
        let mut clauses = Vec::with_capacity(terms.len() * 2);
        for term in terms {
            for (field, boost) in [(self.fields.title, TITLE_BOOST), (self.fields.text, 1.0)] {
                let term = Term::from_field_text(field, term);
                let weight = Bm25Weight::for_terms(statistics, std::slice::from_ref(&term))?.boost_by(boost);
                clauses.push(top_k::Clause { term, weight });
            }
        }
        Ok(clauses)
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

        let (given, own);
        let provider: &dyn Bm25StatisticsProvider = match statistics {
            Some(statistics) => {
                given = GivenStatistics { statistics, fields: self.fields };
                &given
            }
            None => {
                own = ScopeStatistics { searcher: &snapshot.searcher, scope: &scope, fields: self.fields };
                &own
            }
        };
        let clauses = self.clauses(&terms, provider).map_err(lexical)?;
        let union = || {
            self.text_query(&terms)
                .weight(EnableScoring::enabled_from_statistics_provider(provider, &snapshot.searcher))
        };
        let hits = top_k::top_k(&snapshot.searcher, &snapshot.columns, &scope.docs, &clauses, &union, k)?;
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

#[cfg(test)]
mod tests;
