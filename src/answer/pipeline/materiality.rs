//! Which withheld claims are material to the question (`answer.abstain_on_material_withheld`):
//! the claims validation dropped while others stand, whose loss would leave an answer that no
//! longer answers what was asked.
//!
//! The rule is lexical and deterministic. A text's *focus* on a question is the number of the
//! question's distinct content terms it holds: both texts normalized as the model read them
//! (`crate::answer::grounding::normalize`), then lowercased words minus stopwords, lightly stemmed
//! (`crate::answer::text::content_terms`, the terms the extractive generator and the lexical
//! verifier match on). What a claim says is what the generator wrote for it: its text, or for a
//! claim that is its quotes, its answer and its quotes. A withheld claim is **material** when its
//! focus is above zero and at least the focus of every claim that stands (a tie counts), and it
//! holds a question term that no claim that stands holds: the answer lost a part as central to
//! the question as anything it kept, and what it lost is not said by what it kept (a withheld
//! repeat or rewording of a claim that stands is not material).
//!
//! Invariants: pure functions of the question and the generator's output; a question without
//! content terms makes no claim material; a claim whose text cannot be read from the output
//! (never the case for an output validation judged) counts as saying nothing.

use std::collections::{BTreeSet, HashSet};

use super::trace::written_claims;
use crate::answer::grounding::normalize::normalize;
use crate::answer::grounding::validate::{Problem, ValidClaim};
use crate::answer::text::content_terms;
use crate::review::item::ClaimText;

/// The distinct content terms of `text`, normalized first.
fn terms(text: &str) -> HashSet<String> {
    content_terms(&normalize(text).text).into_iter().collect()
}

/// The terms of `asked` (a question's [`terms`]) that `statement` holds: its focus.
fn focus(asked: &HashSet<String>, statement: &str) -> HashSet<String> {
    terms(statement).intersection(asked).cloned().collect()
}

/// Whether a withheld claim saying `withheld` is material to `question` beside the claims that
/// stand, saying `standing`: its focus is not empty, at least as large as each of theirs, and
/// not covered by theirs together.
pub(crate) fn is_material(question: &str, withheld: &str, standing: &[&str]) -> bool {
    let asked = terms(question);
    let own = focus(&asked, withheld);
    let kept: Vec<HashSet<String>> = standing.iter().map(|statement| focus(&asked, statement)).collect();
    let covered = own.iter().all(|term| kept.iter().any(|focus| focus.contains(term)));
    !own.is_empty() && kept.iter().all(|focus| own.len() >= focus.len()) && !covered
}

/// What a claim as written says: its text, or its answer and quotes (joined by spaces).
fn statement(claim: &ClaimText) -> String {
    let quotes = claim.citations.iter().filter_map(|citation| citation.quote.as_deref());
    claim.text.as_deref().into_iter().chain(claim.answer.as_deref()).chain(quotes).collect::<Vec<_>>().join(" ")
}

/// The numbers (1-based, as validation numbers claims) of the withheld claims of the output `raw`
/// that are material to `question`, given the `claims` that stand and validation's `problems`
/// (a claim with a problem that does not stand is withheld).
pub(super) fn material_withheld(question: &str, raw: &str, claims: &[ValidClaim], problems: &[Problem]) -> Vec<usize> {
    let standing: BTreeSet<usize> = claims.iter().map(|claim| claim.number).collect();
    let withheld: BTreeSet<usize> =
        problems.iter().map(|problem| problem.claim).filter(|claim| *claim > 0 && !standing.contains(claim)).collect();
    if withheld.is_empty() {
        return Vec::new();
    }
    let written = written_claims(raw);
    let said = |number: usize| written.get(number - 1).map(statement).unwrap_or_default();
    let standing: Vec<String> = standing.iter().map(|number| said(*number)).collect();
    let standing: Vec<&str> = standing.iter().map(String::as_str).collect();
    withheld.into_iter().filter(|number| is_material(question, &said(*number), &standing)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::grounding::validate::Rejection;

    const QUESTION: &str = "How much are hotel stays reimbursed per night in London?";
    const RATE: &str = "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York.";
    const BOOKING: &str = "Hotel stays must be booked through the travel desk.";
    const CAR: &str = "Employees receive a company car after two years of service.";

    #[test]
    fn a_withheld_claim_holding_more_of_the_question_is_material() {
        // RATE holds hotel, stay, reimburs, night, london (5); BOOKING hotel, stay (2).
        assert!(is_material(QUESTION, RATE, &[BOOKING]));
        assert!(is_material(QUESTION, RATE, &[BOOKING, CAR]));
        // Inflections and typography fold: "Hotels", "reimbursement", full-width letters.
        assert!(is_material(QUESTION, "Ｈotels: reimbursing 250 euros a night in London.", &[BOOKING]));
    }

    #[test]
    fn a_tie_is_material_and_less_is_not() {
        // Two halves of a question, each holding three of its terms: losing either is material.
        let question = "How much are hotel stays reimbursed, and how many vacation days do employees get?";
        let vacation = "Every employee receives 28 days of paid vacation per calendar year.";
        let hotel = "Hotel stays are reimbursed up to 250 euros per night.";
        assert!(is_material(question, vacation, &[hotel]), "a tie");
        assert!(is_material(question, hotel, &[vacation]), "a tie");
        assert!(!is_material(QUESTION, BOOKING, &[RATE]), "fewer of the question's terms");
        // Against several standing claims it must reach the best of them.
        assert!(!is_material(QUESTION, BOOKING, &[CAR, RATE]));
    }

    #[test]
    fn a_withheld_repeat_or_rewording_of_what_stands_is_not_material() {
        // The same terms of the question as a claim that stands: nothing of it was lost.
        assert!(!is_material(QUESTION, RATE, &[RATE]));
        let reworded = "Per night in London, hotel stays are reimbursed generously.";
        assert!(!is_material(QUESTION, reworded, &[RATE]));
        // Covered by the claims that stand together, each holding less of it.
        let london = "Hotel stays in London are booked through the travel desk.";
        let rate = "Stays are reimbursed at 250 euros a night.";
        assert!(!is_material(QUESTION, RATE, &[london, rate]));
        // One term of it that none of them holds (london) makes it material again.
        assert!(is_material(QUESTION, RATE, &[BOOKING, rate]));
    }

    #[test]
    fn a_claim_beside_the_question_is_never_material() {
        assert!(!is_material(QUESTION, CAR, &[BOOKING]));
        // Not even when what stands is beside it too: no focus, no materiality.
        assert!(!is_material(QUESTION, CAR, &["Lunch is served at noon."]));
        // Nor with nothing standing.
        assert!(!is_material(QUESTION, CAR, &[]));
        assert!(is_material(QUESTION, BOOKING, &[]));
        // A question of stopwords only has no focus terms.
        assert!(!is_material("What is it?", RATE, &[CAR]));
        // Function words shared with the question are not focus terms.
        assert!(!is_material(QUESTION, "How much is it per year?", &[]));
    }

    fn claim(number: usize, text: &str) -> ValidClaim {
        ValidClaim { number, text: text.to_owned(), citations: Vec::new(), anchored: false }
    }

    fn problem(claim: usize, rejection: Rejection) -> Problem {
        Problem { claim, rejection, label: None, quote: None }
    }

    #[test]
    fn the_material_withheld_claims_of_an_output_are_numbered_as_validation_numbers_them() {
        let raw = serde_json::json!({"answerable": true, "claims": [
            {"text": BOOKING, "citations": ["S1"]},
            {"text": RATE, "citations": ["S2"]},
            {"text": CAR, "citations": ["S2"]},
        ]})
        .to_string();
        let standing = [claim(1, BOOKING)];
        let problems = [
            problem(2, Rejection::Unsupported),
            problem(3, Rejection::Unsupported),
            // A dropped citation of a claim that stands withholds nothing.
            problem(1, Rejection::UnsupportedCitation),
            // Output-level problems concern no claim.
            problem(0, Rejection::Inconsistent),
        ];
        assert_eq!(material_withheld(QUESTION, &raw, &standing, &problems), [2]);
        // The rate claim standing, the booking claim withheld: immaterial.
        let problems = [problem(1, Rejection::Unsupported), problem(3, Rejection::Unsupported)];
        assert_eq!(material_withheld(QUESTION, &raw, &[claim(2, RATE)], &problems), Vec::<usize>::new());
        // Nothing withheld: nothing material.
        assert_eq!(material_withheld(QUESTION, &raw, &standing, &[]), Vec::<usize>::new());
    }

    #[test]
    fn a_quoted_claim_says_its_answer_and_its_quotes() {
        let raw = serde_json::json!({"answerable": true, "claims": [
            {"answer": "the travel desk", "citations": [{"label": "S1", "quote": BOOKING}]},
            {"answer": "250 euros", "citations": [{"label": "S2", "quote": "reimbursed up to 250 euros per night in London"}]},
        ]})
        .to_string();
        // The second claim's quote holds reimburs, night, london (3) against hotel, stay (2).
        let problems = [problem(2, Rejection::QuoteNotFound)];
        assert_eq!(material_withheld(QUESTION, &raw, &[claim(1, BOOKING)], &problems), [2]);
        // An output that cannot be read says nothing: nothing is material.
        assert_eq!(material_withheld(QUESTION, "not json", &[claim(1, BOOKING)], &problems), Vec::<usize>::new());
    }
}
