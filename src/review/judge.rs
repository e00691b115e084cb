//! What a reviewer may write about an item: a verdict as sent ([`VerdictInput`]), checked
//! against the item as that reviewer sees it ([`Access`], decided by [`super::view`]) and made
//! into the [`Verdict`] to store.
//!
//! Invariants: a verdict that fails any check is refused with its code and nothing of it is
//! kept; claims are judged only by a reviewer who is shown their text (every source readable);
//! a label echoed in an error is at most 64 characters.

use std::collections::BTreeSet;

use crate::domain::Principal;
use crate::retrieval::MAX_DOC_ID_CHARS;

use super::item::{AbstentionLabel, AbstentionVerdict, ClaimLabel, ClaimVerdict, ReviewItem, Verdict};
use super::view::{Access, TextAccess};
use super::{ReviewError, ReviewResult};

/// A verdict as a reviewer sent it, before it is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerdictInput {
    /// (claim index, label) pairs.
    pub claims: Vec<(u64, String)>,
    /// The abstention's label and the document named.
    pub abstention: Option<(String, Option<String>)>,
    /// A note.
    pub note: Option<String>,
}

/// Checks `input` against `item` as `reviewer` sees it (`access`) and makes the verdict to store:
/// every label known, every claim index in range and judged once, an abstention judged only on
/// an item that abstained, a named document id well formed, the note within `max_note_chars`,
/// and claims judged only by a reviewer who is shown their text.
pub fn judge(
    item: &ReviewItem,
    access: &Access,
    reviewer: &Principal,
    input: VerdictInput,
    max_note_chars: usize,
    at_ms: u64,
) -> ReviewResult<Verdict> {
    if input.claims.is_empty() && input.abstention.is_none() {
        return Err(ReviewError::EmptyVerdict);
    }
    let mut claims = Vec::with_capacity(input.claims.len());
    let mut judged = BTreeSet::new();
    for (index, label) in input.claims {
        let label = ClaimLabel::parse(&label).ok_or_else(|| ReviewError::UnknownVerdict(bounded_name(&label)))?;
        let in_range = usize::try_from(index).is_ok_and(|position| position < item.claims.len());
        if !in_range {
            return Err(ReviewError::ClaimOutOfRange { index, claims: item.claims.len() });
        }
        if !judged.insert(index) {
            return Err(ReviewError::DuplicateClaim(index));
        }
        claims.push(ClaimVerdict { index: index as u32, label });
    }
    let abstention = match input.abstention {
        None => None,
        Some((label, doc_id)) => {
            let label =
                AbstentionLabel::parse(&label).ok_or_else(|| ReviewError::UnknownVerdict(bounded_name(&label)))?;
            if item.abstention.is_none() {
                return Err(ReviewError::NoAbstention);
            }
            if let Some(doc_id) = &doc_id
                && (doc_id.trim().is_empty() || doc_id.chars().count() > MAX_DOC_ID_CHARS)
            {
                return Err(ReviewError::InvalidDocId(MAX_DOC_ID_CHARS));
            }
            Some(AbstentionVerdict { label, doc_id })
        }
    };
    if let Some(note) = &input.note
        && note.chars().count() > max_note_chars
    {
        return Err(ReviewError::NoteTooLong(max_note_chars));
    }
    if !claims.is_empty() && access.text != TextAccess::Shown {
        return Err(ReviewError::NotReadable);
    }
    Ok(Verdict { reviewer: reviewer.user.clone(), at_ms, claims, abstention, note: input.note })
}

/// A label as echoed in an error: at most 64 characters.
fn bounded_name(label: &str) -> String {
    label.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::item::AbstentionRecord;
    use crate::review::item::tests::sample;

    fn shown() -> Access {
        Access { sources: vec![true, true], text: TextAccess::Shown }
    }

    fn input(claims: &[(u64, &str)]) -> VerdictInput {
        VerdictInput {
            claims: claims.iter().map(|(index, label)| (*index, (*label).to_owned())).collect(),
            ..VerdictInput::default()
        }
    }

    #[test]
    fn every_bad_verdict_is_refused_with_its_code() {
        let item = sample().item;
        let rita = Principal::new("acme", "rita", ["reviewers"]);
        let judge = |input: VerdictInput, access: &Access| judge(&item, access, &rita, input, 10, 7);
        let code = |result: ReviewResult<Verdict>| result.map(|_| ()).map_err(|error| error.code());
        assert_eq!(code(judge(input(&[]), &shown())), Err("empty_verdict"));
        assert_eq!(code(judge(input(&[(0, "true")]), &shown())), Err("unknown_verdict"));
        assert_eq!(code(judge(input(&[(2, "supported")]), &shown())), Err("claim_out_of_range"));
        assert_eq!(code(judge(input(&[(u64::MAX, "supported")]), &shown())), Err("claim_out_of_range"));
        assert_eq!(
            code(judge(input(&[(1, "supported"), (1, "unsupported")]), &shown())),
            Err("duplicate_claim_verdict")
        );
        let abstention = VerdictInput { abstention: Some(("correct_abstention".into(), None)), ..input(&[]) };
        assert_eq!(code(judge(abstention, &shown())), Err("no_abstention"));
        let note = VerdictInput { note: Some("x".repeat(11)), ..input(&[(0, "supported")]) };
        assert_eq!(code(judge(note, &shown())), Err("note_too_long"));
        let hidden = Access { sources: vec![true, false], text: TextAccess::Withheld };
        assert_eq!(code(judge(input(&[(0, "supported")]), &hidden)), Err("claims_not_readable"));
        let verdict = judge(
            VerdictInput { note: Some("x".repeat(10)), ..input(&[(1, "wrong_citation"), (0, "supported")]) },
            &shown(),
        )
        .unwrap();
        assert_eq!(
            (verdict.reviewer.as_str(), verdict.at_ms, verdict.claims.len(), verdict.claims[0].label),
            ("rita", 7, 2, ClaimLabel::WrongCitation)
        );
        let mut abstained = item.clone();
        abstained.abstention = Some(AbstentionRecord { reason: "invalid_output".into(), diagnostics: vec![] });
        let named = |doc_id: &str| VerdictInput {
            abstention: Some(("should_have_answered".into(), Some(doc_id.to_owned()))),
            ..input(&[])
        };
        assert!(super::judge(&abstained, &hidden, &rita, named("travel-policy"), 10, 7).is_ok());
        let code_of =
            |doc_id: String| super::judge(&abstained, &hidden, &rita, named(&doc_id), 10, 7).unwrap_err().code();
        assert_eq!(code_of(" ".into()), "invalid_doc_id");
        assert_eq!(code_of("d".repeat(MAX_DOC_ID_CHARS + 1)), "invalid_doc_id");
    }
}
