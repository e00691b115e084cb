//! Anchoring a quoted claim's answer (`generator.anchor_answers`): when the sentences a model
//! picked do not state the answer it gave, the server looks for a sentence that does.
//!
//! A small model often states the right answer and then picks a neighbouring sentence that does
//! not say it (BENCHMARKS.md: for 41 of 100 first attempts the answer was in another offered
//! sentence). The candidates are the sentences a generator may quote (`Source::choices`) of the
//! sources of the final context that the caller may read at validation time, holding every
//! content term of the answer; those sharing the most terms with the question come first, then
//! those of a source the model cited, then in label and sentence order. At most
//! [`MAX_ANCHOR_TRIES`] of them are verified, each on its own and exactly as a quoted citation
//! is (`verify_answer` on the sentence, normalized as the model read it, instruction-like
//! sentences masked); the first the verifier accepts becomes the claim's only citation.
//!
//! Invariants: an anchor is a span of a source of the final context, authorized for the caller
//! when validation checked it (and checked again before the response, like every citation); the
//! verifier sees only such sentences; the model's own answer is what is verified, so a sentence
//! goes out only when it states what the model said.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::sync::Arc;

use super::super::quote::{char_slice, distinct_terms};
use super::{ResolvedCitation, ValidationContext, quote_of};
use crate::answer::providers::verifier::CitedText;
use crate::answer::text::content_terms;

/// Most sentences verified as the anchor of one answer (each is one verifier call).
pub const MAX_ANCHOR_TRIES: usize = 2;

/// A sentence of the final context that states `answer`, verified, as a citation; `None` when
/// no candidate passes. `cited` are the labels the model cited and `tried` the normalized spans
/// (by label) of the quotes it gave, which are not tried again.
pub(super) async fn anchor_answer(
    answer: &str,
    context: &ValidationContext<'_>,
    cited: &[&str],
    tried: &[(&str, (usize, usize))],
) -> Option<ResolvedCitation> {
    let wanted = distinct_terms(answer);
    if wanted.is_empty() {
        return None;
    }
    let asked = distinct_terms(context.question);
    // (question terms shared, not a source the model cited, source index, sentence position,
    // located span), of the sources the caller may read: sorted on all but the span.
    let mut candidates = Vec::new();
    for (index, source) in context.sources.iter().enumerate() {
        if !context.acl.allows(context.principal, source.chunk()) {
            continue;
        }
        let by_model = cited.contains(&source.label());
        for (position, choice) in source.choices().iter().enumerate() {
            let held: HashSet<String> = content_terms(choice).into_iter().collect();
            if !wanted.is_subset(&held) {
                continue;
            }
            let Some(located) = source.locate(choice) else {
                continue;
            };
            if tried.contains(&(source.label(), located.normalized)) {
                continue;
            }
            let shared = asked.intersection(&held).count();
            candidates.push((Reverse(shared), !by_model, index, position, located));
        }
    }
    candidates.sort_by_key(|&(shared, other, index, position, _)| (shared, other, index, position));
    for (_, _, index, _, located) in candidates.into_iter().take(MAX_ANCHOR_TRIES) {
        let source = &context.sources[index];
        let evidence = char_slice(source.evidence(), located.normalized);
        let cited_text = CitedText {
            chunk: source.chunk().id,
            text: &evidence,
            sentence_vectors: source.chunk().sentence_vectors.as_deref(),
        };
        let support = context.verifier.verify_answer(answer, &[cited_text]).await;
        if support.supported {
            let (quote, quote_span) = quote_of(source.shown(), Some(located.original));
            return Some(ResolvedCitation {
                label: source.label().to_owned(),
                chunk: Arc::clone(source.chunk()),
                quote,
                quote_span,
            });
        }
    }
    None
}
