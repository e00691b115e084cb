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
//! citation of that chunk is verified, which `super::validate` does only for chunks of the
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

use super::text::{SentenceSpan, content_terms, direction, has_negation, sentences};
use super::verifier::{CitedText, ClaimSupport, SourceSupport, SupportVerifier};
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
        let similarities = self.sentence_similarities(claim, cited, &split).await;
        Measured { claim_terms, split, similarities }
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
mod tests {
    use futures::executor::block_on;
    use proptest::prelude::*;

    use super::*;
    use crate::answer::extractive::ExtractiveGenerator;
    use crate::embed::{EmbedError, EmbedResult, HashedEmbedder};

    /// How [`FakeCountingEmbedder`] answers.
    #[derive(Clone, Copy, PartialEq)]
    enum FakeMode {
        /// The hashed embedder's vectors.
        Answer,
        /// A provider error.
        Fail,
        /// One vector too few.
        DropLast,
    }

    /// FAKE embedder: the hashed embedder, recording the number of texts of every call.
    struct FakeCountingEmbedder {
        inner: HashedEmbedder,
        mode: FakeMode,
        calls: std::sync::Mutex<Vec<usize>>,
    }

    impl FakeCountingEmbedder {
        fn new(mode: FakeMode) -> Arc<Self> {
            Arc::new(Self { inner: HashedEmbedder::new(64), mode, calls: std::sync::Mutex::new(Vec::new()) })
        }

        /// Texts per call since the last `take`.
        fn take(&self) -> Vec<usize> {
            std::mem::take(&mut self.calls.lock().expect("calls"))
        }
    }

    #[async_trait]
    impl Embedder for FakeCountingEmbedder {
        fn name(&self) -> &str {
            "fake-counting"
        }

        fn dimension(&self) -> usize {
            self.inner.dimension()
        }

        async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
            self.calls.lock().expect("calls").push(texts.len());
            let mut vectors = self.inner.embed(texts).await?;
            match self.mode {
                FakeMode::Answer => Ok(vectors),
                FakeMode::Fail => Err(EmbedError::Provider("fake failure".into())),
                FakeMode::DropLast => {
                    vectors.pop();
                    Ok(vectors)
                }
            }
        }
    }

    #[test]
    fn stored_sentence_vectors_leave_only_the_claim_to_embed_and_nothing_for_a_verbatim_claim() {
        let fake = FakeCountingEmbedder::new(FakeMode::Answer);
        let verifier = counted(&fake, 0);
        let text = "Hotel stays are reimbursed up to 180 euros per night. Taxis need a receipt.";
        let split: Vec<String> = sentences(text).iter().map(|span| span.slice(text).to_owned()).collect();
        let vectors = block_on(fake.inner.embed(&split)).expect("embeds");
        let stored = SentenceVectors::quantize(split.iter().map(String::as_str).zip(vectors.iter().map(Vec::as_slice)));
        let chunk = ChunkId::derive("tenant", "doc", 1, 0, text.len(), text);
        let plain = [CitedText { chunk, text, sentence_vectors: None }];
        let kept = [CitedText { chunk, text, sentence_vectors: Some(&stored) }];

        let claim = "Hotel stays are reimbursed up to 180 euros.";
        let embedded = block_on(verifier.verify(claim, &plain));
        assert_eq!(fake.take(), vec![3], "claim and both sentences");
        let from_store = block_on(verifier.verify(claim, &kept));
        assert_eq!(fake.take(), vec![1], "the claim alone");
        assert!(embedded.supported && from_store.supported);
        assert!((embedded.score - from_store.score).abs() < 0.01, "{} vs {}", embedded.score, from_store.score);
        assert_eq!(embedded.sources[0].quote, from_store.sources[0].quote);

        let verbatim = block_on(verifier.verify("Taxis need a receipt.", &kept));
        assert!(fake.take().is_empty(), "a claim that is a cited sentence needs no embedding");
        assert!(verbatim.supported);

        // Vectors of other sentences never stand in: lookups are by the exact text's digest.
        let other = SentenceVectors::quantize([("Another sentence.", vectors[0].as_slice())]);
        block_on(verifier.verify(claim, &[CitedText { chunk, text, sentence_vectors: Some(&other) }]));
        assert_eq!(fake.take(), vec![3]);
    }

    /// A verifier over `embedder` with a sentence cache of `capacity`.
    fn counted(embedder: &Arc<FakeCountingEmbedder>, capacity: usize) -> LexicalSupportVerifier {
        let embedder: Arc<dyn Embedder> = Arc::clone(embedder) as Arc<dyn Embedder>;
        LexicalSupportVerifier::new(0.6, 0.2, Some(embedder)).with_sentence_cache(capacity)
    }

    /// `texts` as cited chunks of one tenant's document, one chunk each.
    fn cited<'a>(texts: &[&'a str]) -> Vec<CitedText<'a>> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| CitedText {
                chunk: ChunkId::derive("tenant", "doc", 1, index, index, text),
                text,
                sentence_vectors: None,
            })
            .collect()
    }

    const POLICY: &str = "The office closes in December. Engineers receive 25 days of paid vacation per year. \
                          Requests go to the team lead.";

    #[test]
    fn supports_a_verbatim_sentence_and_quotes_it_by_chars() {
        let verifier = LexicalSupportVerifier::new(0.6, 0.35, None);
        let verdict =
            block_on(verifier.verify("Engineers receive 25 days of paid vacation per year.", &cited(&[POLICY])));
        assert!(verdict.supported);
        let (start, end) = verdict.sources[0].quote;
        let quote: String = POLICY.chars().skip(start).take(end - start).collect();
        assert_eq!(quote, "Engineers receive 25 days of paid vacation per year.");
    }

    #[test]
    fn rejects_unrelated_and_wrong_number_claims() {
        let verifier = LexicalSupportVerifier::new(0.8, 0.35, None);
        assert!(!block_on(verifier.verify("Revenue grew in Europe last quarter.", &cited(&[POLICY]))).supported);
        assert!(!block_on(verifier.verify("Engineers receive 30 days of paid vacation.", &cited(&[POLICY]))).supported);
        assert!(!block_on(verifier.verify("", &cited(&[POLICY]))).supported);
        assert!(!block_on(verifier.verify("Engineers receive vacation.", &cited(&[]))).supported);
    }

    #[test]
    fn polarity_mismatch_rejects_when_checked() {
        let claim = "Engineers do not receive paid vacation.";
        let strict = LexicalSupportVerifier::new(0.6, 0.35, None);
        assert!(!block_on(strict.verify(claim, &cited(&[POLICY]))).supported);
        let lenient = strict.clone().with_polarity_check(false);
        assert!(block_on(lenient.verify(claim, &cited(&[POLICY]))).supported);
        let reversed = "Paid vacation for engineers decreased to 25 days per year.";
        let cited_text = "Paid vacation for engineers increased to 25 days per year.";
        assert!(!block_on(strict.verify(reversed, &cited(&[cited_text]))).supported);
        assert!(block_on(lenient.verify(reversed, &cited(&[cited_text]))).supported);
    }

    /// A verbatim quote was rejected when an earlier sentence with the same words had other polarity.
    #[test]
    fn verbatim_quote_passes_despite_earlier_negated_near_copy() {
        let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
        let text = "Aspirin did not lower fever in adults? Aspirin lowered fever in adults.";
        assert!(block_on(verifier.verify("Aspirin lowered fever in adults.", &cited(&[text]))).supported);
    }

    #[test]
    fn extractive_claims_pass_the_default_thresholds() {
        let generator = ExtractiveGenerator::new(3);
        let sources = [("S1", POLICY), ("S2", "Vacation requests are approved within two days by the team lead.")];
        let answer = generator.answer("Who approves vacation requests and how fast?", &sources);
        assert!(answer.answerable);
        let verifier = LexicalSupportVerifier::new(0.9, 0.2, Some(Arc::new(HashedEmbedder::new(384))));
        for claim in &answer.claims {
            let texts: Vec<&str> = claim
                .citations
                .iter()
                .map(|citation| sources.iter().find(|(known, _)| *known == citation.label).expect("known label").1)
                .collect();
            assert!(block_on(verifier.verify(&claim.text, &cited(&texts))).supported, "{}", claim.text);
        }
    }

    #[test]
    fn coverage_combines_several_cited_texts() {
        let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
        let claim = "The office closes in December and engineers receive paid vacation.";
        let verdict = block_on(
            verifier.verify(claim, &cited(&["The office closes in December.", "Engineers receive paid vacation."])),
        );
        assert!(verdict.supported);
        assert_eq!(verdict.sources.len(), 2);
        assert!(verdict.sources.iter().all(|source| source.score < 0.9 && source.supports));
    }

    /// An unrelated extra citation rode along: the claim was judged against all cited texts together.
    #[test]
    fn an_unrelated_co_citation_supports_nothing_and_is_marked() {
        let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
        let claim = "Engineers receive 25 days of paid vacation per year.";
        let verdict =
            block_on(verifier.verify(claim, &cited(&[POLICY, "Quarterly revenue grew in Europe last year."])));
        assert!(verdict.supported);
        assert_eq!(verdict.sources.iter().map(|source| source.supports).collect::<Vec<_>>(), [true, false]);
    }

    /// One shared word made a co-citation count, so it could supply the term the real source lacked.
    #[test]
    fn a_co_citation_sharing_one_word_cannot_complete_the_support() {
        let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
        let claim = "Engineers receive 25 days of paid vacation in Lisbon.";
        let verdict = block_on(verifier.verify(claim, &cited(&[POLICY, "The Lisbon office opened."])));
        assert!(!verdict.supported);
        assert_eq!(verdict.sources.iter().map(|source| source.supports).collect::<Vec<_>>(), [true, false]);
        let alone = block_on(verifier.verify(claim, &cited(&[POLICY])));
        assert!(!alone.supported && !alone.sources[0].supports);
    }

    #[test]
    fn a_lone_citation_supports_exactly_when_the_claim_is_supported() {
        let verifier = LexicalSupportVerifier::new(0.9, 0.35, None);
        for claim in ["Engineers receive 25 days of paid vacation per year.", "Revenue grew in Europe."] {
            let verdict = block_on(verifier.verify(claim, &cited(&[POLICY])));
            assert_eq!(verdict.sources[0].supports, verdict.supported, "{claim}");
        }
    }

    #[test]
    fn embedder_similarity_gates_support() {
        let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(256));
        let claim = "Engineers receive 25 days of paid vacation per year.";
        let loose = LexicalSupportVerifier::new(0.6, 0.5, Some(embedder.clone()));
        let verdict = block_on(loose.verify(claim, &cited(&[POLICY])));
        assert!(verdict.supported);
        let signals = block_on(loose.signals(claim, &cited(&[POLICY])));
        assert!(signals.similarity.expect("embedder answered") > 0.99);
        let impossible = LexicalSupportVerifier::new(0.6, 1.01, Some(embedder));
        assert!(!block_on(impossible.verify(claim, &cited(&[POLICY]))).supported);
    }

    /// Three claims citing one chunk (3 sentences) used to embed its sentences three times.
    #[test]
    fn claims_citing_one_chunk_embed_each_sentence_once() {
        let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
        let verifier = counted(&embedder, 64);
        let policy = cited(&[POLICY]);
        for claim in
            ["Engineers get 25 days of vacation.", "The office is closed in December.", "Team leads get requests."]
        {
            block_on(verifier.verify(claim, &policy));
        }
        assert_eq!(embedder.take(), [1 + 3, 1, 1], "the claim and each uncached sentence, once in total");
        assert_eq!(verifier.cached_sentences(), 3);
    }

    #[test]
    fn a_sentence_shared_by_two_cited_texts_is_embedded_once_per_call() {
        let first = "The office closes in December. Engineers receive paid vacation.";
        let second = "The office closes in December. Requests go to the team lead.";
        for capacity in [0, 64] {
            let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
            let verifier = counted(&embedder, capacity);
            block_on(verifier.verify("The office closes for engineers.", &cited(&[first, second])));
            assert_eq!(embedder.take(), [1 + 3], "capacity {capacity}");
        }
    }

    /// Identical text in two tenants' chunks: a vector is never served under another chunk id.
    #[test]
    fn the_same_sentence_under_another_chunk_id_is_embedded_again() {
        let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
        let verifier = counted(&embedder, 64);
        let of_tenant = |tenant: &str| {
            [CitedText {
                chunk: ChunkId::derive(tenant, "policy", 1, 0, 80, POLICY),
                text: POLICY,
                sentence_vectors: None,
            }]
        };
        let claim = "Engineers get 25 days of vacation.";
        block_on(verifier.verify(claim, &of_tenant("acme")));
        block_on(verifier.verify(claim, &of_tenant("globex")));
        block_on(verifier.verify(claim, &of_tenant("acme")));
        assert_eq!(embedder.take(), [1 + 3, 1 + 3, 1]);
        assert_eq!(verifier.cached_sentences(), 6);
    }

    #[test]
    fn capacity_zero_disables_the_cache() {
        let embedder = FakeCountingEmbedder::new(FakeMode::Answer);
        let verifier = counted(&embedder, 0);
        for _ in 0..3 {
            block_on(verifier.verify("Engineers get 25 days of vacation.", &cited(&[POLICY])));
        }
        assert_eq!(embedder.take(), [1 + 3, 1 + 3, 1 + 3]);
        assert_eq!(verifier.cached_sentences(), 0);
    }

    /// A failed or short embedder answer falls back to coverage alone and caches nothing.
    #[test]
    fn embedder_faults_fall_back_to_coverage_and_cache_nothing() {
        let lexical = LexicalSupportVerifier::new(0.6, 0.2, None);
        let claim = "Engineers receive 25 days of paid vacation.";
        let expected = block_on(lexical.verify(claim, &cited(&[POLICY])));
        assert!(expected.supported);
        for mode in [FakeMode::Fail, FakeMode::DropLast] {
            let embedder = FakeCountingEmbedder::new(mode);
            let verifier = counted(&embedder, 64);
            let verdict = block_on(verifier.verify(claim, &cited(&[POLICY])));
            assert_eq!(verdict, expected);
            assert_eq!(block_on(verifier.signals(claim, &cited(&[POLICY]))).similarity, None);
            assert_eq!(verifier.cached_sentences(), 0);
            assert_eq!(embedder.take(), [1 + 3, 1 + 3], "nothing was served from the cache");
        }
    }

    /// Sentences from a small vocabulary, so texts share sentences and claims hit the cache.
    fn small_text() -> impl Strategy<Value = String> {
        let sentence = "(Office|Engineers|Vacation|Requests) (not )?(closes|receive|increased|decreased|go)( (december|25|paid|lead|days|per|year)){0,4}[.!?]";
        proptest::collection::vec(sentence, 0..4).prop_map(|sentences| sentences.join(" "))
    }

    proptest! {
        /// The cache changes no verdict or score: cached vs uncached over the same call sequence,
        /// with chunk ids reused for different texts and texts reused under different ids.
        #[test]
        fn the_cache_changes_no_verdict(
            capacity in 1usize..8,
            calls in proptest::collection::vec(
                (small_text(), proptest::collection::vec((0usize..3, small_text()), 0..4)),
                1..6,
            ),
        ) {
            let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(32));
            let plain = LexicalSupportVerifier::new(0.5, 0.2, Some(Arc::clone(&embedder)));
            let cached = plain.clone().with_sentence_cache(capacity);
            for (claim, sources) in &calls {
                let cited: Vec<CitedText<'_>> = sources
                    .iter()
                    .map(|(chunk, text)| CitedText { chunk: ChunkId::from_bytes([*chunk as u8; 16]), text, sentence_vectors: None })
                    .collect();
                prop_assert_eq!(block_on(cached.verify(claim, &cited)), block_on(plain.verify(claim, &cited)));
                prop_assert_eq!(block_on(cached.signals(claim, &cited)), block_on(plain.signals(claim, &cited)));
            }
            prop_assert!(cached.cached_sentences() <= capacity);
        }

        #[test]
        fn never_panics_and_quotes_stay_inside(
            claim in "(\\PC|\\s|[.!?]){0,60}",
            texts in proptest::collection::vec("(\\PC|\\s|[.!?]){0,120}", 0..4),
        ) {
            let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(32));
            let verifier = LexicalSupportVerifier::new(0.5, 0.2, Some(embedder));
            let borrowed: Vec<&str> = texts.iter().map(String::as_str).collect();
            let verdict = block_on(verifier.verify(&claim, &cited(&borrowed)));
            prop_assert_eq!(verdict.sources.len(), texts.len());
            prop_assert!((0.0..=1.0).contains(&verdict.score));
            for (source, text) in verdict.sources.iter().zip(&texts) {
                prop_assert!(source.quote.0 <= source.quote.1);
                prop_assert!(source.quote.1 <= text.chars().count());
            }
        }
    }
}
