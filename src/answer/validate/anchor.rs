//! Anchoring a quoted claim's answer (`generator.anchor_answers`): when the sentences a model
//! picked do not state the answer it gave, the server looks for a sentence that does.
//!
//! A small model often states the right answer and then picks a neighbouring sentence that does
//! not say it (BENCHMARKS.md: for 41 of 100 first attempts the answer was in another offered
//! sentence). The candidates are the sentences a generator may quote ([`quote_choices`]) of the
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

use super::super::instructions::mask_instructions;
use super::super::normalize::{Normalized, normalize};
use super::super::prompt::neutralize_normalized;
use super::super::quote::{char_slice, distinct_terms, locate_quote, quote_choices};
use super::super::text::content_terms;
use super::super::verifier::CitedText;
use super::{ResolvedCitation, ValidationContext, quote_of};

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
    // The normalized text of each source the caller may read, as the verifier reads it.
    let views: Vec<Option<Normalized>> = context
        .sources
        .iter()
        .map(|source| context.acl.allows(context.principal, &source.chunk).then(|| normalize(&source.shown)))
        .collect();
    // (question terms shared, not a source the model cited, source index, sentence position,
    // located span): sorted on all but the span.
    let mut candidates = Vec::new();
    for (index, (source, view)) in context.sources.iter().zip(&views).enumerate() {
        let Some(view) = view else {
            continue;
        };
        let by_model = cited.contains(&source.label.as_str());
        for (position, choice) in quote_choices(&neutralize_normalized(&view.text, None)).into_iter().enumerate() {
            let held: HashSet<String> = content_terms(&choice).into_iter().collect();
            if !wanted.is_subset(&held) {
                continue;
            }
            let Some(located) = locate_quote(&source.shown, view, &choice) else {
                continue;
            };
            if tried.contains(&(source.label.as_str(), located.normalized)) {
                continue;
            }
            let shared = asked.intersection(&held).count();
            candidates.push((Reverse(shared), !by_model, index, position, located));
        }
    }
    candidates.sort_by_key(|&(shared, other, index, position, _)| (shared, other, index, position));
    for (_, _, index, _, located) in candidates.into_iter().take(MAX_ANCHOR_TRIES) {
        let (source, Some(view)) = (&context.sources[index], &views[index]) else {
            continue;
        };
        let evidence = char_slice(&mask_instructions(&view.text), located.normalized);
        let cited_text = CitedText {
            chunk: source.chunk.id,
            text: &evidence,
            sentence_vectors: source.chunk.sentence_vectors.as_deref(),
        };
        let support = context.verifier.verify_answer(answer, &[cited_text]).await;
        if support.supported {
            let (quote, quote_span) = quote_of(&source.shown, Some(located.original));
            return Some(ResolvedCitation {
                label: source.label.clone(),
                chunk: Arc::clone(&source.chunk),
                quote,
                quote_span,
            });
        }
    }
    None
}
