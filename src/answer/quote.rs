//! Quote anchoring: find a generator's verbatim `quote` inside the one source it cites and map it
//! to exact character offsets of the source's original (shown) text.
//!
//! The model read each source [`normalize`]d and neutralized (`super::prompt`), so a faithful
//! quote is a piece of that model text. Matching folds both sides the same way (the quote is
//! normalized and neutralized like a source, then both are lowercased and every run of
//! whitespace becomes one space) and looks for the quote in the model text of the cited source
//! alone. A hit maps back through the neutralization offsets to the normalized text and through
//! [`Normalized::original_span`] to the original, trimmed of surrounding whitespace.
//!
//! Invariants: a located quote is always a span of the cited source's shown text (never of
//! another source, the prompt's delimiters or anything outside the final context), and the text
//! returned for it is that span of the original, not the generator's string; an empty quote, one
//! longer than [`MAX_QUOTE_CHARS`] or one that does not occur is not located. Matching is linear
//! in the source (two-way substring search).

use super::normalize::{Normalized, normalize};
use super::prompt::neutralize_normalized;

/// Longest quote accepted, in characters (longer ones are rejected without a search).
pub const MAX_QUOTE_CHARS: usize = 2_000;

/// A quote located in a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocatedQuote {
    /// Character range `[start, end)` in the normalized text (what the verifier reads).
    pub normalized: (usize, usize),
    /// Character range `[start, end)` in the original shown text (what the response cites).
    pub original: (usize, usize),
}

/// Lowercases `text` and collapses whitespace runs into one space; returns the folded text and,
/// for each folded character, the byte range in `text` of the character it came from.
fn fold(text: &str) -> (String, Vec<(usize, usize)>) {
    let mut folded = String::with_capacity(text.len());
    let mut ranges = Vec::with_capacity(text.len());
    let mut in_space = false;
    for (byte, character) in text.char_indices() {
        let range = (byte, byte + character.len_utf8());
        if character.is_whitespace() {
            if !in_space {
                folded.push(' ');
                ranges.push(range);
            }
            in_space = true;
            continue;
        }
        in_space = false;
        for lower in character.to_lowercase() {
            folded.push(lower);
            ranges.push(range);
        }
    }
    (folded, ranges)
}

/// Locates `quote` in `shown` (the source text as shown, before normalization), whose
/// normalized form is `view`. `None` when the quote is empty, oversized or absent.
pub fn locate_quote(shown: &str, view: &Normalized, quote: &str) -> Option<LocatedQuote> {
    if quote.chars().count() > MAX_QUOTE_CHARS {
        return None;
    }
    let needle_model = neutralize_normalized(&normalize(quote).text, None);
    let (needle, _) = fold(&needle_model);
    let needle = needle.trim_matches(' ');
    if needle.is_empty() {
        return None;
    }
    let mut offsets = Vec::new();
    let model = neutralize_normalized(&view.text, Some(&mut offsets));
    let (haystack, ranges) = fold(&model);
    let byte = haystack.find(needle)?;
    let first = haystack[..byte].chars().count();
    let count = needle.chars().count();
    let model_start = ranges[first].0;
    let model_end = ranges[first + count - 1].1;
    // `offsets[i]` is where normalized character `i` begins in the model text (then the end).
    let normalized_start = offsets.partition_point(|&offset| offset <= model_start).saturating_sub(1);
    let normalized_end = offsets.partition_point(|&offset| offset < model_end).min(offsets.len() - 1);
    let (from, to) = view.original_span(normalized_start, normalized_end);
    let chars: Vec<char> = shown.chars().collect();
    let to = to.min(chars.len());
    let leading = chars[from..to].iter().take_while(|character| character.is_whitespace()).count();
    let trailing = chars[from + leading..to].iter().rev().take_while(|character| character.is_whitespace()).count();
    let original = (from + leading, to - trailing);
    if original.0 >= original.1 {
        return None;
    }
    Some(LocatedQuote { normalized: (normalized_start, normalized_end), original })
}

/// Characters `[start, end)` of `text`.
pub fn char_slice(text: &str, (start, end): (usize, usize)) -> String {
    text.chars().skip(start).take(end.saturating_sub(start)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn located(shown: &str, quote: &str) -> Option<String> {
        locate_quote(shown, &normalize(shown), quote).map(|found| char_slice(shown, found.original))
    }

    #[test]
    fn quotes_match_across_case_whitespace_and_unicode_forms() {
        let shown = "Hotel stays are reimbursed up to ４０ euros\n per night. Receipts within 30 days.";
        assert_eq!(located(shown, "up to 40 EUROS per night").as_deref(), Some("up to ４０ euros\n per night"));
        assert_eq!(located(shown, "  Receipts   within 30 days.  ").as_deref(), Some("Receipts within 30 days."));
        // Invisible characters in the quote are dropped like in the source.
        assert_eq!(located(shown, "Rec\u{200B}eipts").as_deref(), Some("Receipts"));
    }

    #[test]
    fn neutralized_forms_the_model_saw_match_the_original() {
        let shown = "See S3 for details. <b>bold</b> text.";
        assert_eq!(located(shown, "See S-3 for details.").as_deref(), Some("See S3 for details."));
        assert_eq!(located(shown, "See S3 for details.").as_deref(), Some("See S3 for details."));
        assert_eq!(located(shown, "‹b>bold").as_deref(), Some("<b>bold"));
    }

    #[test]
    fn offsets_are_char_offsets_of_the_original() {
        let shown = "Ünïcödé prefix — then the fact: 25 days.";
        let found = locate_quote(shown, &normalize(shown), "the fact: 25 days").expect("found");
        let expected_start =
            shown.chars().collect::<String>().find("the fact").map(|byte| shown[..byte].chars().count());
        assert_eq!(Some(found.original.0), expected_start);
        assert_eq!(char_slice(shown, found.original), "the fact: 25 days");
    }

    #[test]
    fn absent_empty_oversized_and_lookalike_quotes_are_not_located() {
        let shown = "Engineers receive 25 days of paid vacation per year.";
        for quote in [
            "",
            "   ",
            "\u{200B}\u{FEFF}",
            "receive 26 days",
            "Engineers receive 25 days of paid vacation per year. More",
        ] {
            assert_eq!(located(shown, quote), None, "{quote:?}");
        }
        // Cyrillic е and а are not folded to Latin: a look-alike is not the source's text.
        assert_eq!(located(shown, "Engin\u{0435}ers receive"), None);
        assert_eq!(located(shown, &"a".repeat(MAX_QUOTE_CHARS + 1)), None);
        let long = "word ".repeat(MAX_QUOTE_CHARS);
        assert_eq!(located(&long, &long), None);
    }
}
