//! [`LexicalSupportVerifier`]: the embedded default [`SupportVerifier`].
//!
//! A claim is supported when (1) enough of its content terms (stopwords removed, light stemming,
//! numbers exact) occur in the cited texts (`min_coverage`), (2) with an embedder, its best
//! matching cited sentence is close enough in embedding space (`min_similarity`), (3) with the
//! polarity check on, the claim and that sentence agree on negation (`not`, `no`, `never`, …) and
//! on the direction of change (`increase` vs `decrease`, …), and (4) every number of the claim
//! occurs in the cited texts. Calibrated on SciFact claims (see `crate::eval::verifier`): lexical
//! signals separate unrelated evidence well but cannot see most contradictions, so the
//! thresholds trade recall for precision.
//!
//! With several cited texts, each must first support part of the claim on its own: one of its
//! sentences holds at least two of the claim's distinct content terms and at least a fifth of
//! them. The claim is then judged as above against those texts only, so an unrelated extra
//! citation neither helps a claim pass nor rides along with one. A single cited text is judged
//! exactly as before (this is what the SciFact calibration measures).
//!
//! A cited chunk's sentence vectors made at ingestion ([`CitedText::sentence_vectors`]) are used
//! first, so with a store that has them only the claim is embedded, and not even the claim when
//! it repeats a cited sentence word for word (the vector of a sentence the caller may read).
//! Sentences without a stored vector (chunks ingested without them, a truncated last sentence)
//! are kept across requests in a bounded LRU keyed by (cited chunk id, SHA-256
//! of the sentence's exact text): a chunk id is tenant-bound, and a lookup happens only while a
//! citation of that chunk is verified, which `crate::answer::grounding::validate` does only for chunks of the
//! caller's final context that the ACL still allows, so an entry is only ever served to a caller
//! who may read its sentence. Claim vectors are never kept across calls: a claim's text can be
//! steered by the asker, and a cache of arbitrary text would let hit timing reveal what other
//! users' claims said. Within one call, the claim and every sentence not cached are embedded in
//! one embedder call, each distinct text once.
//!
//! Invariants: total on any input (never panics); quotes are character ranges (Unicode scalar
//! values) of one sentence of the cited text; an embedder failure falls back to the lexical
//! decision alone (logged), never to "supported" without the coverage test, and caches nothing;
//! verdicts are the same with and without the cache as long as a text's vector does not depend
//! on the other texts of its batch (exactly for the hashed embedder, to float rounding for MiniLM).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use lru::LruCache;

use super::verifier::{CitedText, ClaimSupport, SourceSupport, SupportVerifier};
use crate::answer::text::{SentenceSpan, content_terms, direction, has_negation, sentences};
use crate::domain::{ChunkId, SentenceVectors, sentence_digest};
use crate::embed::{Embedder, dot};

/// Most sentences compared per claim (bounds the cost of very long cited texts).
const MAX_EMBEDDED_SENTENCES: usize = 128;
/// With several citations, a cited text counts only if one of its sentences holds at least this
/// many of the claim's distinct terms (all of them for shorter claims): one shared word is not
/// support of a part.
const MIN_PART_TERMS: usize = 2;
/// … and at least this fraction of them (a third of a three-part claim passes).
const MIN_PART_COVERAGE: f32 = 0.2;

/// Content-word coverage plus optional embedding similarity and a polarity check.
///
/// Clones share one sentence cache (vectors depend only on the embedder and the text).
#[derive(Clone)]
pub struct LexicalSupportVerifier {
    min_coverage: f32,
    min_similarity: f32,
    check_polarity: bool,
    embedder: Option<Arc<dyn Embedder>>,
    sentence_cache: Option<Arc<Mutex<SentenceCache>>>,
}

/// Sentence vectors by [`SentenceKey`].
type SentenceCache = LruCache<SentenceKey, Arc<[f32]>>;

/// Sentence-cache key: the cited chunk (tenant-bound) and a digest of the sentence's exact text.
/// The digest, rather than offsets, keeps an entry right even when a caller shows a prefix of
/// the chunk or a different text under the same id: a hit is always the vector of this text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SentenceKey {
    chunk: ChunkId,
    /// [`sentence_digest`] of the sentence.
    sentence: [u8; 16],
}

impl SentenceKey {
    fn new(chunk: ChunkId, sentence: &str) -> Self {
        Self { chunk, sentence: sentence_digest(sentence) }
    }
}

/// The raw measurements behind one verdict (exposed for calibration).
#[derive(Clone, Debug, PartialEq)]
pub struct SupportSignals {
    /// Fraction of the claim's distinct content terms found in the cited texts together.
    pub coverage: f32,
    /// Fraction found in the single best cited sentence.
    pub sentence_coverage: f32,
    /// Best cosine between the claim and a cited sentence, when an embedder answered.
    pub similarity: Option<f32>,
    /// The claim is negated and its best sentence is not, or the other way round.
    pub negation_mismatch: bool,
    /// Some number of the claim occurs in none of the cited texts.
    pub missing_number: bool,
    /// The claim states an increase and its best sentence only a decrease, or the other way round.
    pub direction_mismatch: bool,
    /// Per cited text: its own coverage and the best sentence's character range (`supports` is
    /// left false here: [`SupportVerifier::verify`] decides it).
    pub sources: Vec<SourceSupport>,
}

impl LexicalSupportVerifier {
    /// A verifier with the given thresholds (`verifier.min_coverage`, `verifier.min_similarity`)
    /// and optional embedder; the similarity threshold applies only when an embedder is present.
    /// The polarity check starts on.
    pub fn new(min_coverage: f64, min_similarity: f64, embedder: Option<Arc<dyn Embedder>>) -> Self {
        Self {
            min_coverage: min_coverage as f32,
            min_similarity: min_similarity as f32,
            check_polarity: true,
            embedder,
            sentence_cache: None,
        }
    }

    /// Keeps up to `capacity` sentence vectors across calls (`verifier.sentence_cache`; 0: off).
    /// Only useful with an embedder.
    pub fn with_sentence_cache(mut self, capacity: usize) -> Self {
        self.sentence_cache = NonZeroUsize::new(capacity).map(|capacity| Arc::new(Mutex::new(LruCache::new(capacity))));
        self
    }

    /// Sentence vectors currently cached (0 when the cache is off).
    pub fn cached_sentences(&self) -> usize {
        self.sentence_cache.as_ref().map_or(0, |cache| lock(cache).len())
    }

    /// Turns the polarity check (negation and direction mismatch) on or off.
    pub fn with_polarity_check(mut self, enabled: bool) -> Self {
        self.check_polarity = enabled;
        self
    }

    /// Measures `claim` against all of `cited` without deciding.
    pub async fn signals(&self, claim: &str, cited: &[CitedText<'_>]) -> SupportSignals {
        let measured = self.measure(claim, cited).await;
        measured.signals(claim, cited, &vec![true; cited.len()])
    }

    /// Splits the cited texts into sentences with their terms and (with an embedder) compares
    /// every sentence with the claim: the work shared by all verdicts of one call.
    async fn measure(&self, claim: &str, cited: &[CitedText<'_>]) -> Measured {
        let mut measured = Self::measure_terms(claim, cited);
        measured.similarities = self.sentence_similarities(claim, cited, &measured.split).await;
        measured
    }

    /// [`Self::measure`] without comparing embeddings.
    fn measure_terms(claim: &str, cited: &[CitedText<'_>]) -> Measured {
        let claim_terms: Vec<String> = {
            let mut seen = HashSet::new();
            content_terms(claim).into_iter().filter(|term| seen.insert(term.clone())).collect()
        };
        let split: Vec<Vec<(SentenceSpan, HashSet<String>)>> = cited
            .iter()
            .map(|source| {
                sentences(source.text)
                    .into_iter()
                    .map(|span| (span, content_terms(span.slice(source.text)).into_iter().collect()))
                    .collect()
            })
            .collect();
        Measured { claim_terms, split, similarities: None }
    }

    /// Applies the thresholds to measured signals.
    pub fn decide(&self, signals: &SupportSignals) -> bool {
        signals.coverage >= self.min_coverage
            && signals.similarity.is_none_or(|similarity| similarity >= self.min_similarity)
            && !(self.check_polarity && (signals.negation_mismatch || signals.direction_mismatch))
            && !signals.missing_number
    }

    /// Cosine of the claim with each cited sentence (the first [`MAX_EMBEDDED_SENTENCES`] in
    /// citation order), per cited text; `None` without an embedder or when it fails.
    async fn sentence_similarities(
        &self,
        claim: &str,
        cited: &[CitedText<'_>],
        split: &[Vec<(SentenceSpan, HashSet<String>)>],
    ) -> Option<Vec<Vec<f32>>> {
        let embedder = self.embedder.as_ref()?;
        let mut budget = MAX_EMBEDDED_SENTENCES;
        let compared: Vec<Vec<(&str, SentenceKey)>> = cited
            .iter()
            .zip(split)
            .map(|(source, text_sentences)| {
                let taken = text_sentences.len().min(budget);
                budget -= taken;
                text_sentences[..taken]
                    .iter()
                    .map(|(span, _)| {
                        let sentence = span.slice(source.text);
                        (sentence, SentenceKey::new(source.chunk, sentence))
                    })
                    .collect()
            })
            .collect();

        // Vectors kept from ingestion first: a compared sentence found in its chunk's stored
        // vectors, and the claim when it is word for word a sentence of a cited chunk (the
        // extractive generator's claims are), which then needs no embedding at all.
        let dimension = embedder.dimension();
        let stored = |vectors: &SentenceVectors, digest: &[u8; 16]| {
            vectors.vector(digest).filter(|vector| vector.len() == dimension).map(Arc::<[f32]>::from)
        };
        let mut known: HashMap<SentenceKey, Arc<[f32]>> = HashMap::new();
        for (source, text_sentences) in cited.iter().zip(&compared) {
            let Some(vectors) = source.sentence_vectors else { continue };
            for &(_, key) in text_sentences {
                if let Some(vector) = stored(vectors, &key.sentence) {
                    known.insert(key, vector);
                }
            }
        }
        let claim_digest = sentence_digest(claim);
        let stored_claim = cited
            .iter()
            .filter_map(|source| source.sentence_vectors)
            .find_map(|vectors| stored(vectors, &claim_digest));
        metrics::counter!("warrant_verifier_sentence_cache_total", "result" => "stored").increment(known.len() as u64);
        let cached =
            self.cached_vectors(compared.iter().flatten().map(|(_, key)| *key).filter(|key| !known.contains_key(key)));
        known.extend(cached);
        // One batch: the claim first (unless stored), then each distinct text still missing (a
        // sentence equal to the claim or shared by two cited texts is embedded once).
        let mut texts = Vec::new();
        let mut batch_index: HashMap<&str, usize> = HashMap::new();
        if stored_claim.is_none() {
            texts.push(claim.to_owned());
            batch_index.insert(claim, 0);
        }
        let mut missing: HashMap<SentenceKey, usize> = HashMap::new();
        for &(sentence, key) in compared.iter().flatten() {
            if known.contains_key(&key) || missing.contains_key(&key) {
                continue;
            }
            let index = *batch_index.entry(sentence).or_insert_with(|| {
                texts.push(sentence.to_owned());
                texts.len() - 1
            });
            missing.insert(key, index);
        }
        let vectors: Vec<Arc<[f32]>> = if texts.is_empty() {
            Vec::new()
        } else {
            match embedder.embed(&texts).await {
                Ok(vectors) if vectors.len() == texts.len() => vectors.into_iter().map(Arc::from).collect(),
                Ok(vectors) => {
                    tracing::warn!(
                        expected = texts.len(),
                        got = vectors.len(),
                        "verifier embedder returned a wrong count"
                    );
                    return None;
                }
                Err(error) => {
                    tracing::warn!(code = error.code(), "verifier embedder failed; deciding on coverage alone");
                    return None;
                }
            }
        };
        let fresh: Vec<(SentenceKey, Arc<[f32]>)> =
            missing.into_iter().map(|(key, index)| (key, Arc::clone(&vectors[index]))).collect();
        self.remember(&fresh, dimension);
        known.extend(fresh);

        let claim_vector = match &stored_claim {
            Some(vector) => vector,
            None => &vectors[0],
        };
        let cosine = |vector: &[f32]| {
            if vector.len() == claim_vector.len() { dot(claim_vector, vector) } else { 0.0 }
        };
        Some(
            compared
                .iter()
                .map(|text_sentences| {
                    text_sentences.iter().map(|(_, key)| known.get(key).map_or(0.0, |vector| cosine(vector))).collect()
                })
                .collect(),
        )
    }

    /// The cached vectors among `keys` (counted as hits and misses); empty when the cache is off.
    fn cached_vectors(&self, keys: impl Iterator<Item = SentenceKey>) -> HashMap<SentenceKey, Arc<[f32]>> {
        let Some(cache) = &self.sentence_cache else { return HashMap::new() };
        let unique: HashSet<SentenceKey> = keys.collect();
        let mut found = HashMap::with_capacity(unique.len());
        {
            let mut cache = lock(cache);
            for key in &unique {
                if let Some(vector) = cache.get(key) {
                    found.insert(*key, Arc::clone(vector));
                }
            }
        }
        metrics::counter!("warrant_verifier_sentence_cache_total", "result" => "hit").increment(found.len() as u64);
        metrics::counter!("warrant_verifier_sentence_cache_total", "result" => "miss")
            .increment((unique.len() - found.len()) as u64);
        found
    }

    /// Caches freshly embedded sentence vectors of the embedder's dimension.
    fn remember(&self, fresh: &[(SentenceKey, Arc<[f32]>)], dimension: usize) {
        let Some(cache) = &self.sentence_cache else { return };
        let mut cache = lock(cache);
        for (key, vector) in fresh.iter().filter(|(_, vector)| vector.len() == dimension) {
            cache.put(*key, Arc::clone(vector));
        }
    }
}

/// One call's measurements: the claim's distinct terms, every cited text's sentences with their
/// terms, and the claim's cosine with each compared sentence (per cited text).
struct Measured {
    claim_terms: Vec<String>,
    split: Vec<Vec<(SentenceSpan, HashSet<String>)>>,
    similarities: Option<Vec<Vec<f32>>>,
}

impl Measured {
    /// Fraction of the claim's distinct terms in `terms`.
    fn fraction(&self, terms: &HashSet<String>) -> f32 {
        self.matched(terms) as f32 / self.claim_terms.len().max(1) as f32
    }

    /// Number of the claim's distinct terms in `terms`.
    fn matched(&self, terms: &HashSet<String>) -> usize {
        self.claim_terms.iter().filter(|term| terms.contains(*term)).count()
    }

    /// Whether cited text `index` on its own supports part of the claim: one of its sentences
    /// holds at least [`MIN_PART_TERMS`] of the claim's distinct terms (all of them when the
    /// claim has fewer) and at least [`MIN_PART_COVERAGE`] of them.
    fn supports_part(&self, index: usize) -> bool {
        let needed = MIN_PART_TERMS.min(self.claim_terms.len());
        needed > 0
            && self.split[index].iter().any(|(_, terms)| {
                let matched = self.matched(terms);
                matched >= needed && self.fraction(terms) >= MIN_PART_COVERAGE
            })
    }

    /// The signals of the cited texts with `included[i]` set, taken together; `sources` has an
    /// entry for every cited text (its own coverage and best sentence) whether included or not.
    fn signals(&self, claim: &str, cited: &[CitedText<'_>], included: &[bool]) -> SupportSignals {
        let mut all_terms: HashSet<&String> = HashSet::new();
        let mut sources = Vec::with_capacity(cited.len());
        let mut best: Option<(f32, f32)> = None; // (coverage, similarity) of the best included sentence
        for (text_index, text_sentences) in self.split.iter().enumerate() {
            let counts = included.get(text_index).copied().unwrap_or(false);
            let mut text_terms: HashSet<String> = HashSet::new();
            let mut text_best: Option<(f32, f32, usize)> = None;
            for (sentence_index, (_, terms)) in text_sentences.iter().enumerate() {
                text_terms.extend(terms.iter().cloned());
                let coverage = self.fraction(terms);
                let similarity = self
                    .similarities
                    .as_ref()
                    .and_then(|values| values.get(text_index)?.get(sentence_index).copied())
                    .unwrap_or(0.0);
                let better = |current: Option<(f32, f32)>| {
                    current.is_none_or(|(best_coverage, best_similarity)| {
                        coverage > best_coverage || (coverage == best_coverage && similarity > best_similarity)
                    })
                };
                if better(text_best.map(|(c, s, _)| (c, s))) {
                    text_best = Some((coverage, similarity, sentence_index));
                }
                if counts && better(best) {
                    best = Some((coverage, similarity));
                }
            }
            let quote = text_best.map_or((0, 0), |(_, _, sentence_index)| {
                let span = text_sentences[sentence_index].0;
                (span.char_start, span.char_end)
            });
            sources.push(SourceSupport { supports: false, score: self.fraction(&text_terms), quote });
            if counts {
                all_terms.extend(text_sentences.iter().flat_map(|(_, terms)| terms.iter()));
            }
        }

        let claim_terms = &self.claim_terms;
        let coverage = if claim_terms.is_empty() {
            0.0
        } else {
            claim_terms.iter().filter(|term| all_terms.contains(term)).count() as f32 / claim_terms.len() as f32
        };
        let sentence_coverage = best.map_or(0.0, |(coverage, _)| coverage);
        // Polarity is judged against every sentence tied for the best coverage: a mismatch needs
        // all of them to disagree (a verbatim quote must not lose to an earlier near-copy).
        let best_sentences: Vec<&str> = self
            .split
            .iter()
            .zip(cited)
            .zip(included)
            .filter(|(_, counts)| **counts)
            .flat_map(|((text_sentences, source), _)| {
                text_sentences
                    .iter()
                    .filter(|(_, terms)| self.fraction(terms) == sentence_coverage)
                    .map(|(span, _)| span.slice(source.text))
            })
            .collect();
        let claim_negated = has_negation(claim);
        let claim_direction = direction(claim);
        let negation_mismatch =
            !best_sentences.is_empty() && best_sentences.iter().all(|sentence| has_negation(sentence) != claim_negated);
        let direction_mismatch = !best_sentences.is_empty()
            && best_sentences.iter().all(
                |sentence| matches!((claim_direction, direction(sentence)), (Some(left), Some(right)) if left != right),
            );
        let missing_number =
            claim_terms.iter().any(|term| term.chars().any(char::is_numeric) && !all_terms.contains(term));
        let similarity = self.similarities.as_ref().map(|values| {
            values
                .iter()
                .zip(included)
                .filter(|(_, counts)| **counts)
                .flat_map(|(text, _)| text.iter().copied())
                .fold(-1.0f32, f32::max)
        });
        SupportSignals {
            coverage,
            sentence_coverage,
            similarity,
            negation_mismatch,
            missing_number,
            direction_mismatch,
            sources,
        }
    }
}

fn lock(cache: &Mutex<SentenceCache>) -> MutexGuard<'_, SentenceCache> {
    cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl SupportVerifier for LexicalSupportVerifier {
    fn name(&self) -> &str {
        if self.embedder.is_some() { "lexical+embedding" } else { "lexical" }
    }

    /// With one cited text, the verdict on it alone. With several, each text first has to
    /// support part of the claim on its own ([`Measured::supports_part`]); the claim is then
    /// judged, with the same thresholds, against the texts that do.
    async fn verify(&self, claim: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        let measured = self.measure(claim, cited).await;
        self.verdict(claim, cited, &measured)
    }

    /// As [`Self::verify`] without the embedding similarity: the answer's content terms and
    /// numbers must be in the quotes (and agree on polarity). A few words compared with a whole
    /// sentence score a low cosine however exactly the sentence says them, so the similarity
    /// floor calibrated for claims would reject the answer a quote states word for word.
    async fn verify_answer(&self, answer: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        let measured = Self::measure_terms(answer, cited);
        self.verdict(answer, cited, &measured)
    }
}

impl LexicalSupportVerifier {
    /// The verdict of [`SupportVerifier::verify`], and the signals of every cited text taken on
    /// its own, from one measurement (what a verifier that judges further reads, e.g. the
    /// judge's floor).
    pub async fn verify_each(&self, claim: &str, cited: &[CitedText<'_>]) -> (ClaimSupport, Vec<SupportSignals>) {
        let measured = self.measure(claim, cited).await;
        let each = (0..cited.len())
            .map(|index| {
                let only: Vec<bool> = (0..cited.len()).map(|other| other == index).collect();
                measured.signals(claim, cited, &only)
            })
            .collect();
        (self.verdict(claim, cited, &measured), each)
    }

    /// [`SupportVerifier::verify`] on measured texts.
    fn verdict(&self, claim: &str, cited: &[CitedText<'_>], measured: &Measured) -> ClaimSupport {
        let single = cited.len() <= 1;
        let included: Vec<bool> = (0..cited.len()).map(|index| single || measured.supports_part(index)).collect();
        let signals = measured.signals(claim, cited, &included);
        let supported = included.iter().any(|counts| *counts) && self.decide(&signals);
        let score = match signals.similarity {
            Some(similarity) => (signals.coverage + similarity.max(0.0)) / 2.0,
            None => signals.coverage,
        };
        let sources = signals
            .sources
            .into_iter()
            .zip(&included)
            .map(|(source, counts)| SourceSupport { supports: if single { supported } else { *counts }, ..source })
            .collect();
        ClaimSupport { supported, score: score.clamp(0.0, 1.0), sources }
    }
}

#[cfg(test)]
mod tests;
