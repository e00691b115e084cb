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
//! Invariants: total on any input (never panics); quotes are character ranges (Unicode scalar
//! values) of one sentence of the cited text; an embedder failure falls back to the lexical
//! decision alone (logged), never to "supported" without the coverage test.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;

use super::text::{SentenceSpan, content_terms, direction, has_negation, sentences};
use super::verifier::{CitedText, ClaimSupport, SourceSupport, SupportVerifier};
use crate::embed::{Embedder, dot};

/// Most sentences embedded per claim (bounds the cost of very long cited texts).
const MAX_EMBEDDED_SENTENCES: usize = 128;

/// Content-word coverage plus optional embedding similarity and a polarity check.
#[derive(Clone)]
pub struct LexicalSupportVerifier {
    min_coverage: f32,
    min_similarity: f32,
    check_polarity: bool,
    embedder: Option<Arc<dyn Embedder>>,
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
    /// Per cited text: its own coverage and the best sentence's character range.
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
        }
    }

    /// Turns the polarity check (negation and direction mismatch) on or off.
    pub fn with_polarity_check(mut self, enabled: bool) -> Self {
        self.check_polarity = enabled;
        self
    }

    /// Measures `claim` against `cited` without deciding.
    pub async fn signals(&self, claim: &str, cited: &[CitedText<'_>]) -> SupportSignals {
        let claim_terms: Vec<String> = {
            let mut seen = HashSet::new();
            content_terms(claim).into_iter().filter(|term| seen.insert(term.clone())).collect()
        };
        let claim_term_count = claim_terms.len().max(1) as f32;
        let fraction = |terms: &HashSet<String>| {
            claim_terms.iter().filter(|term| terms.contains(*term)).count() as f32 / claim_term_count
        };

        // Per cited text: sentence spans and their term sets.
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

        let mut all_terms: HashSet<&String> = HashSet::new();
        let mut sources = Vec::with_capacity(cited.len());
        let mut best: Option<(f32, f32, usize, usize)> = None; // (coverage, similarity, text, sentence)
        for (text_index, text_sentences) in split.iter().enumerate() {
            let mut text_terms: HashSet<String> = HashSet::new();
            let mut text_best: Option<(f32, f32, usize)> = None;
            for (sentence_index, (_, terms)) in text_sentences.iter().enumerate() {
                text_terms.extend(terms.iter().cloned());
                let coverage = fraction(terms);
                let similarity = similarities
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
                if better(best.map(|(c, s, _, _)| (c, s))) {
                    best = Some((coverage, similarity, text_index, sentence_index));
                }
            }
            let quote = text_best.map_or((0, 0), |(_, _, sentence_index)| {
                let span = text_sentences[sentence_index].0;
                (span.char_start, span.char_end)
            });
            sources.push(SourceSupport { score: fraction(&text_terms), quote });
            all_terms.extend(text_sentences.iter().flat_map(|(_, terms)| terms.iter()));
        }

        let coverage = if claim_terms.is_empty() {
            0.0
        } else {
            claim_terms.iter().filter(|term| all_terms.contains(term)).count() as f32 / claim_term_count
        };
        let sentence_coverage = best.map_or(0.0, |(coverage, _, _, _)| coverage);
        // Polarity is judged against every sentence tied for the best coverage: a mismatch needs
        // all of them to disagree (a verbatim quote must not lose to an earlier near-copy).
        let best_sentences: Vec<&str> = split
            .iter()
            .zip(cited)
            .flat_map(|(text_sentences, source)| {
                text_sentences
                    .iter()
                    .filter(|(_, terms)| fraction(terms) == sentence_coverage)
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
        let similarity = similarities.map(|values| values.iter().flatten().copied().fold(-1.0f32, f32::max));
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

    /// Applies the thresholds to measured signals.
    pub fn decide(&self, signals: &SupportSignals) -> bool {
        signals.coverage >= self.min_coverage
            && signals.similarity.is_none_or(|similarity| similarity >= self.min_similarity)
            && !(self.check_polarity && (signals.negation_mismatch || signals.direction_mismatch))
            && !signals.missing_number
    }

    /// Cosine of the claim with each cited sentence, per cited text; `None` without an embedder
    /// or when it fails.
    async fn sentence_similarities(
        &self,
        claim: &str,
        cited: &[CitedText<'_>],
        split: &[Vec<(SentenceSpan, HashSet<String>)>],
    ) -> Option<Vec<Vec<f32>>> {
        let embedder = self.embedder.as_ref()?;
        let mut texts = vec![claim.to_owned()];
        for (source, text_sentences) in cited.iter().zip(split) {
            texts.extend(text_sentences.iter().map(|(span, _)| span.slice(source.text).to_owned()));
        }
        texts.truncate(MAX_EMBEDDED_SENTENCES + 1);
        let vectors = match embedder.embed(&texts).await {
            Ok(vectors) if vectors.len() == texts.len() => vectors,
            Ok(vectors) => {
                tracing::warn!(expected = texts.len(), got = vectors.len(), "verifier embedder returned a wrong count");
                return None;
            }
            Err(error) => {
                tracing::warn!(code = error.code(), "verifier embedder failed; deciding on coverage alone");
                return None;
            }
        };
        let claim_vector = &vectors[0];
        let mut remaining = vectors[1..].iter();
        let cosine = |vector: &Vec<f32>| {
            if vector.len() == claim_vector.len() { dot(claim_vector, vector) } else { 0.0 }
        };
        Some(
            split
                .iter()
                .map(|text_sentences| text_sentences.iter().map_while(|_| remaining.next().map(cosine)).collect())
                .collect(),
        )
    }
}

#[async_trait]
impl SupportVerifier for LexicalSupportVerifier {
    fn name(&self) -> &str {
        if self.embedder.is_some() { "lexical+embedding" } else { "lexical" }
    }

    async fn verify(&self, claim: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        let signals = self.signals(claim, cited).await;
        let supported = self.decide(&signals);
        let score = match signals.similarity {
            Some(similarity) => (signals.coverage + similarity.max(0.0)) / 2.0,
            None => signals.coverage,
        };
        ClaimSupport { supported, score: score.clamp(0.0, 1.0), sources: signals.sources }
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use proptest::prelude::*;

    use super::*;
    use crate::answer::extractive::ExtractiveGenerator;
    use crate::domain::ChunkId;
    use crate::embed::HashedEmbedder;

    /// `texts` as cited chunks of one tenant's document, one chunk each.
    fn cited<'a>(texts: &[&'a str]) -> Vec<CitedText<'a>> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| CitedText { chunk: ChunkId::derive("tenant", "doc", 1, index, index, text), text })
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
                .map(|label| sources.iter().find(|(known, _)| known == label).expect("known label").1)
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
        assert!(verdict.sources.iter().all(|source| source.score < 0.9));
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

    proptest! {
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
