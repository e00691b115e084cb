//! The stages of one claim's validation (see the parent module for the rules): its form, its
//! labels, the authorization of what it cites and its quotes, which report every problem they
//! find together, then support, the question and the text of a quoted claim, each of which may
//! end the claim.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::answer::providers::verifier::CitedText;
use crate::domain::Chunk;

use super::super::quote::{LocatedQuote, char_slice};
use super::super::source::Source;
use super::{
    MAX_CLAIM_CHARS, ModelClaim, Problem, Rejection, ResolvedCitation, ValidClaim, ValidationContext, anchor,
    check_claim_text, is_label_shaped, off_question, quote_of,
};

/// What a citation string may name: a source of the final context by label, or a retrieved chunk
/// left out of it (by id or title: `not_in_context`).
pub(super) struct Labels<'c> {
    by_label: HashMap<&'c str, &'c Source>,
    excluded: Vec<&'c Arc<Chunk>>,
}

impl<'c> Labels<'c> {
    pub(super) fn of(context: &ValidationContext<'c>) -> Self {
        let by_label = context.sources.iter().map(|source| (source.label(), source.as_ref())).collect();
        let in_context: HashSet<_> = context.sources.iter().map(|source| source.chunk().id).collect();
        let excluded = context.retrieved.iter().filter(|chunk| !in_context.contains(&chunk.id)).collect();
        Self { by_label, excluded }
    }

    /// The rejection of a citation string that names no source of the final context.
    fn rejection(&self, citation: &str) -> Rejection {
        if is_label_shaped(citation) {
            Rejection::UnknownLabel
        } else if self
            .excluded
            .iter()
            .any(|chunk| chunk.id.to_string() == citation || (!chunk.title.is_empty() && chunk.title == citation))
        {
            Rejection::NotInContext
        } else {
            Rejection::NotALabel
        }
    }
}

/// A source a claim cites, with the generator's quote of it and where that quote was located.
struct Cited<'c> {
    source: &'c Source,
    quote: Option<&'c str>,
    located: Option<LocatedQuote>,
}

/// One claim on its way through the stages: what it says (written text, or the answer a quoted
/// claim states) and the problems found so far.
struct ClaimCheck<'c> {
    number: usize,
    written: Option<&'c str>,
    answer: Option<&'c str>,
    problems: Vec<Problem>,
}

/// Checks one claim, stage by stage: its form, its labels, the authorization of what it cites,
/// its quotes (these four report every problem they find together), then — only for a claim
/// with none — support, the question, and the text of a quoted claim, each of which may end it.
/// Returns the valid claim with the citations dropped from it, or the claim's problems.
pub(super) async fn check_claim(
    claim: &ModelClaim,
    number: usize,
    context: &ValidationContext<'_>,
    labels: &Labels<'_>,
    seen_texts: &mut HashSet<String>,
) -> Result<(ValidClaim, Vec<Problem>), Vec<Problem>> {
    let mut check = ClaimCheck {
        number,
        written: claim.text.as_deref().map(str::trim),
        answer: claim.answer.as_deref().map(str::trim),
        problems: Vec::new(),
    };
    check.form(claim, seen_texts);
    let mut cited = check.resolve(claim, labels);
    check.authorize(&cited, context);
    check.locate_quotes(&mut cited);
    if !check.problems.is_empty() {
        return Err(check.problems);
    }
    // Verify only now: every citation resolved to a source of the final context and every cited
    // chunk is still authorized for this principal. The verifier's sentence cache relies on this
    // order for its safety: it serves a cached vector only under the id of a chunk being
    // verified, so it must never see a chunk the caller may not read. Keep the stages above
    // before `verify`.
    let (citations, dropped, anchored) = check.verify(&cited, context).await?;
    let dropped = check.about_the_question(&citations, context, dropped)?;
    let text = check.text(&citations, seen_texts)?;
    Ok((ValidClaim { number, text, citations, anchored }, dropped))
}

impl<'c> ClaimCheck<'c> {
    fn problem(&self, rejection: Rejection, label: Option<String>, quote: Option<String>) -> Problem {
        Problem { claim: self.number, rejection, label, quote }
    }

    /// Its form: a written claim's text (not empty, not too long, not a repeat), or a quoted
    /// claim's answer with a quote in every citation; at least one citation.
    fn form(&mut self, claim: &ModelClaim, seen_texts: &mut HashSet<String>) {
        let well_formed = match (self.written, self.answer) {
            (Some(text), None) => {
                check_claim_text(text, self.number, seen_texts, &mut self.problems);
                true
            }
            // A claim without text is its quotes: it states its answer and every citation quotes.
            (None, Some(answer)) => {
                !answer.is_empty()
                    && answer.chars().count() <= MAX_CLAIM_CHARS
                    && claim.citations.iter().all(|citation| citation.quote().is_some())
            }
            (Some(_), Some(_)) | (None, None) => false,
        };
        if !well_formed {
            self.problems.push(self.problem(Rejection::MalformedClaim, None, None));
        }
        if claim.citations.is_empty() {
            self.problems.push(self.problem(Rejection::MissingCitation, None, None));
        }
    }

    /// Its labels: each citation names a source of the final context (a repeated label and
    /// quote counts once), or is rejected.
    fn resolve<'m>(&mut self, claim: &'m ModelClaim, labels: &Labels<'c>) -> Vec<Cited<'c>>
    where
        'm: 'c,
    {
        let mut cited: Vec<Cited<'c>> = Vec::new();
        for model_citation in &claim.citations {
            let citation = model_citation.label().trim();
            if let Some(source) = labels.by_label.get(citation) {
                let quote = model_citation.quote();
                if !cited.iter().any(|known| known.source.label() == source.label() && known.quote == quote) {
                    cited.push(Cited { source, quote, located: None });
                }
                continue;
            }
            let label = is_label_shaped(citation).then(|| citation.to_owned());
            self.problems.push(self.problem(labels.rejection(citation), label, None));
        }
        cited
    }

    /// Authorization: every cited chunk is still readable by the caller.
    fn authorize(&mut self, cited: &[Cited<'c>], context: &ValidationContext<'_>) {
        for cited in cited {
            if !context.acl.allows(context.principal, cited.source.chunk()) {
                self.problems.push(self.problem(Rejection::SourceRevoked, Some(cited.source.label().to_owned()), None));
            }
        }
    }

    /// Quotes: each must occur in the shown text of the source it cites (and only there); the
    /// located span, not the generator's string, is what is verified and returned.
    fn locate_quotes(&mut self, cited: &mut [Cited<'c>]) {
        for cited in cited {
            let Some(quote) = cited.quote else { continue };
            cited.located = cited.source.locate(quote);
            if cited.located.is_none() {
                let problem = self.problem(
                    Rejection::QuoteNotFound,
                    Some(cited.source.label().to_owned()),
                    Some(quote.to_owned()),
                );
                self.problems.push(problem);
            }
        }
    }

    /// Support, judged per citation on the evidence the model read (the normalized text, so a
    /// faithful quote of `４０` as `40` is supported, with instruction-like sentences blanked, so
    /// they never count as support; a quoted citation on its quoted span alone): the citations
    /// that support (part of) the claim on their own, those dropped, and whether the claim was
    /// anchored instead. A claim its citations do not support, and that no sentence anchors,
    /// ends here (`unsupported`).
    async fn verify(
        &mut self,
        cited: &[Cited<'c>],
        context: &ValidationContext<'_>,
    ) -> Result<(Vec<ResolvedCitation>, Vec<Problem>, bool), Vec<Problem>> {
        let evidence: Vec<Cow<'_, str>> = cited
            .iter()
            .map(|cited| match &cited.located {
                Some(located) => Cow::Owned(char_slice(cited.source.evidence(), located.normalized)),
                None => Cow::Borrowed(cited.source.evidence()),
            })
            .collect();
        let texts: Vec<CitedText<'_>> = cited
            .iter()
            .zip(&evidence)
            .map(|(cited, text)| CitedText {
                chunk: cited.source.chunk().id,
                text,
                sentence_vectors: cited.source.chunk().sentence_vectors.as_deref(),
            })
            .collect();
        // What is verified: the written claim, or the answer a quoted claim states (its quotes
        // would support themselves; the answer shows they say something, and what).
        let support = match self.written {
            Some(text) => context.verifier.verify(text, &texts).await,
            None => context.verifier.verify_answer(self.answer.unwrap_or_default(), &texts).await,
        };
        // A citation counts only if the verifier says it supports part of the claim on its own
        // (a missing per-source verdict counts as no support).
        let mut resolved = Vec::new();
        let mut dropped = Vec::new();
        let verdicts = support.sources.iter().map(Some).chain(std::iter::repeat(None));
        for (cited, verdict) in cited.iter().zip(verdicts) {
            match verdict {
                Some(verdict) if verdict.supports => {
                    let span = match &cited.located {
                        Some(located) => located.original,
                        None => cited.source.view().original_span(verdict.quote.0, verdict.quote.1),
                    };
                    let (quote, quote_span) = quote_of(cited.source.shown(), Some(span));
                    resolved.push(ResolvedCitation {
                        label: cited.source.label().to_owned(),
                        chunk: Arc::clone(cited.source.chunk()),
                        quote,
                        quote_span,
                    });
                }
                _ => dropped.push(self.problem(
                    Rejection::UnsupportedCitation,
                    Some(cited.source.label().to_owned()),
                    None,
                )),
            }
        }
        if support.supported && !resolved.is_empty() {
            return Ok((resolved, dropped, false));
        }
        // A quoted claim whose quotes do not state its answer may be anchored in the sentence that
        // does; its own citations are then dropped one by one. Otherwise the whole claim goes
        // (its citations are not counted one by one).
        let anchor = match self.answer {
            Some(answer) if self.written.is_none() && context.anchor_answers => {
                let labels: Vec<&str> = cited.iter().map(|cited| cited.source.label()).collect();
                let tried: Vec<(&str, (usize, usize))> = cited
                    .iter()
                    .filter_map(|cited| Some((cited.source.label(), cited.located.as_ref()?.normalized)))
                    .collect();
                anchor::anchor_answer(answer, context, &labels, &tried).await
            }
            _ => None,
        };
        match anchor {
            Some(citation) => {
                let dropped = cited
                    .iter()
                    .map(|cited| {
                        self.problem(Rejection::UnsupportedCitation, Some(cited.source.label().to_owned()), None)
                    })
                    .collect();
                Ok((vec![citation], dropped, true))
            }
            None => Err(vec![self.problem(Rejection::Unsupported, None, None)]),
        }
    }

    /// A claim that is its quotes must be about the question: a sentence that states the model's
    /// answer while sharing (almost) nothing with what was asked answers something else.
    fn about_the_question(
        &self,
        citations: &[ResolvedCitation],
        context: &ValidationContext<'_>,
        dropped: Vec<Problem>,
    ) -> Result<Vec<Problem>, Vec<Problem>> {
        if self.written.is_none() && off_question(citations, context) {
            return Err(vec![self.problem(Rejection::OffQuestion, None, None)]);
        }
        Ok(dropped)
    }

    /// The claim's text: the written text, or, for a claim that is its quotes, the quotes that
    /// support its answer, joined, in the original text (checked like a written text).
    fn text(
        &mut self,
        citations: &[ResolvedCitation],
        seen_texts: &mut HashSet<String>,
    ) -> Result<String, Vec<Problem>> {
        if let Some(text) = self.written {
            return Ok(text.to_owned());
        }
        let text = citations.iter().map(|citation| citation.quote.as_str()).collect::<Vec<_>>().join(" ");
        check_claim_text(&text, self.number, seen_texts, &mut self.problems);
        if self.problems.is_empty() { Ok(text) } else { Err(std::mem::take(&mut self.problems)) }
    }
}
