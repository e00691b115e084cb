//! Text analysis of the lexical index: the English analyzer shared by both text fields and by
//! queries (tokenize, drop long tokens, lowercase, drop stop words, stem), and the exact token
//! count the index records per field.
//!
//! Invariant kept by this module: [`token_count`] counts exactly the tokens the analyzer makes
//! (stemming maps each token to exactly one stem).

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer, TextAnalyzerBuilder,
};

/// Name under which the English analyzer is registered in the index's tokenizer manager.
pub(super) const ANALYZER: &str = "warrant_en";
/// Tokens longer than this many bytes are dropped (base64 blobs, hashes, URLs).
const MAX_TOKEN_BYTES: usize = 40;

/// The English analysis chain up to, not including, stemming.
pub(super) fn unstemmed_analyzer() -> TextAnalyzerBuilder {
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
pub(super) fn english_analyzer() -> TextAnalyzer {
    unstemmed_analyzer().filter_dynamic(Stemmer::new(Language::English)).build()
}

/// Number of tokens the index records for `text`, counted with `counter`
/// ([`unstemmed_analyzer`]): stemming maps each token to exactly one stem, so the chain without
/// it makes as many tokens at a fraction of the cost; and tantivy indexes every token it is given
/// (it only drops tokens over 65 530 bytes, [`RemoveLongFilter`] already dropped those over
/// [`MAX_TOKEN_BYTES`]).
pub(super) fn token_count(counter: &mut TextAnalyzer, text: &str) -> u64 {
    let mut stream = counter.token_stream(text);
    let mut count = 0;
    while stream.advance() {
        count += 1;
    }
    count
}
