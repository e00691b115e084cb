//! Quote anchoring: find a generator's verbatim `quote` inside the one source it cites and map it
//! to exact character offsets of the source's original (shown) text.
//!
//! The model read each source [`normalize`]d and [`neutralize`]d, so a faithful
//! quote is a piece of that model text. Matching folds both sides the same way (the quote is
//! normalized and neutralized like a source, then both are lowercased, every run of whitespace
//! becomes one space, curly quotes and apostrophes become straight ones and every dash or hyphen
//! becomes `-`) and looks for the quote in the model text of the cited source alone. A hit maps
//! back through the neutralization offsets to the normalized text and through
//! [`Normalized::original_span`] to the original, trimmed of surrounding whitespace.
//!
//! What small models do to a verbatim quote is tolerated, and nothing else: quotation marks
//! around it (added or dropped), a final period added (the piece is also tried without it) or
//! dropped, and an ellipsis (`...`, `…`) between verbatim pieces. Pieces must occur in order, and
//! the source text between them (left out by the quote) must be at most [`MAX_ELIDED_CHARS`]
//! characters in all and no more than the pieces themselves hold; the located span then runs from
//! the first piece to the last, left-out text included. A changed, added or dropped word is
//! never tolerated.
//!
//! Invariants: a located quote is always a span of the cited source's shown text (never of
//! another source, the prompt's delimiters or anything outside the final context), and the text
//! returned for it is that span of the original, not the generator's string; an empty quote, one
//! longer than [`MAX_QUOTE_CHARS`] or one that does not occur is not located. Matching a quote
//! of one piece is linear in the source (two-way substring search); with an ellipsis, each
//! occurrence of the first piece starts one in-order search for the others.

use std::collections::HashSet;

use super::normalize::{Normalized, neutralize, neutralize_normalized, normalize};
use crate::answer::text::instructions::is_instruction;
use crate::answer::text::{content_terms, sentences};

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

/// Most characters of the source an ellipsis in a quote may stand for, in all.
pub const MAX_ELIDED_CHARS: usize = 200;

/// The folded form of one character: quotes, apostrophes and primes straight, dashes and
/// hyphens `-`, otherwise itself (lowercasing is done by the caller).
fn fold_typography(character: char) -> char {
    match character {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '`' | '\u{00B4}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}' | '\u{00BB}' => '"',
        '\u{2010}'..='\u{2015}' | '\u{2212}' | '\u{FE58}' | '\u{FE63}' | '\u{FF0D}' => '-',
        other => other,
    }
}

/// Lowercases `text`, collapses whitespace runs into one space and folds typography
/// ([`fold_typography`]); returns the folded text and, for each folded character, the byte range
/// in `text` of the character it came from.
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
        for lower in fold_typography(character).to_lowercase() {
            folded.push(fold_typography(lower));
            ranges.push(range);
        }
    }
    (folded, ranges)
}

/// The verbatim pieces of a folded quote: split at ellipses, each trimmed of spaces and of
/// quotation marks around it; pieces without a letter or digit dropped.
fn pieces_of(needle: &str) -> Vec<&str> {
    needle
        .split("...")
        .map(|piece| piece.trim_matches(|character| matches!(character, ' ' | '"' | '\'')))
        .filter(|piece| piece.chars().any(char::is_alphanumeric))
        .collect()
}

/// The earliest occurrence of `piece` in `haystack` at or after byte `from`, also accepting it
/// without its final period(s): `(start, end)` bytes, the end taking in the period where the
/// haystack has it too.
fn find_piece(haystack: &str, from: usize, piece: &str) -> Option<(usize, usize)> {
    let bare = piece.trim_end_matches('.').trim_end();
    let core = if bare.is_empty() { piece } else { bare };
    let start = from + haystack[from..].find(core)?;
    let end = if haystack[start..].starts_with(piece) { start + piece.len() } else { start + core.len() };
    Some((start, end))
}

/// The byte range of `haystack` from the first piece to the last, all found in order with at
/// most [`MAX_ELIDED_CHARS`] characters between them in all and no more than the pieces hold;
/// the first such range (trying every occurrence of the first piece).
fn find_pieces(haystack: &str, pieces: &[&str]) -> Option<(usize, usize)> {
    let (first, rest) = pieces.split_first()?;
    let mut from = 0;
    while let Some((start, first_end)) = find_piece(haystack, from, first) {
        let mut end = first_end;
        let mut held = haystack[start..first_end].chars().count();
        let mut elided = 0;
        let mut complete = true;
        for piece in rest {
            let Some((piece_start, piece_end)) = find_piece(haystack, end, piece) else {
                // A later piece is missing after this occurrence, so after any later one too.
                return None;
            };
            // Spaces and periods next to the ellipsis (the source's own `...` too) are not left out.
            elided += haystack[end..piece_start].trim_matches([' ', '.']).chars().count();
            held += haystack[piece_start..piece_end].chars().count();
            end = piece_end;
            if elided > MAX_ELIDED_CHARS {
                complete = false;
                break;
            }
        }
        if complete && elided <= held {
            return Some((start, end));
        }
        from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// Locates `quote` in `shown` (the source text as shown, before normalization), whose
/// normalized form is `view`. `None` when the quote is empty, oversized or absent. (The pipeline
/// locates through [`super::source::Source::locate`], whose model text is built once.)
#[cfg(test)]
pub fn locate_quote(shown: &str, view: &Normalized, quote: &str) -> Option<LocatedQuote> {
    let mut offsets = Vec::new();
    let model = neutralize_normalized(&view.text, Some(&mut offsets));
    locate_in_model_text(shown, view, &model, &offsets, quote)
}

/// Locates `quote` in a source: `shown` its text, `view` that text normalized, `model` the
/// normalized text neutralized and `offsets` the byte offset in `model` of every normalized
/// character (then the end). `None` when the quote is empty, oversized or absent.
pub fn locate_in_model_text(
    shown: &str,
    view: &Normalized,
    model: &str,
    offsets: &[usize],
    quote: &str,
) -> Option<LocatedQuote> {
    if quote.chars().count() > MAX_QUOTE_CHARS {
        return None;
    }
    let needle_model = neutralize_normalized(&normalize(quote).text, None);
    let (needle, _) = fold(&needle_model);
    let pieces = pieces_of(&needle);
    if pieces.is_empty() {
        return None;
    }
    let (haystack, ranges) = fold(model);
    let (start_byte, end_byte) = find_pieces(&haystack, &pieces)?;
    let first = haystack[..start_byte].chars().count();
    let last = first + haystack[start_byte..end_byte].chars().count() - 1;
    let model_start = ranges[first].0;
    let model_end = ranges[last].1;
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

/// Most sentences of a cited source a repair prompt offers for one quote that was not found.
pub const OFFERED_SENTENCES: usize = 2;
/// Least share of a quote's distinct content terms a sentence must hold to be offered for it
/// (so a sentence sharing a word or two with the quote, but not its content, is not offered).
pub const MIN_OFFER_OVERLAP: f64 = 0.5;
/// Longest sentence offered, in characters (longer ones are offered cut, still verbatim).
pub const MAX_OFFERED_CHARS: usize = 400;
/// Longest echo of a quote that was not found, in characters.
pub const MAX_ECHOED_QUOTE_CHARS: usize = 200;

/// Of `choices` (a source's [`quote_choices`]), those closest to `quote`, best first: at most
/// [`OFFERED_SENTENCES`], each holding at least [`MIN_OFFER_OVERLAP`] of the quote's distinct
/// content terms (so, like every choice, never an instruction-like sentence and at most
/// [`MAX_OFFERED_CHARS`] characters). Every sentence returned is a verbatim piece of the source's
/// model text.
pub fn closest_sentences(quote: &str, choices: &[String]) -> Vec<String> {
    let wanted = distinct_terms(quote);
    ranked_choices(&wanted, choices)
        .into_iter()
        .filter(|(shared, _)| *shared as f64 >= MIN_OFFER_OVERLAP * wanted.len() as f64 && *shared > 0)
        .take(OFFERED_SENTENCES)
        .map(|(_, choice)| choice)
        .collect()
}

/// The distinct content terms of `text` (normalized first).
pub(super) fn distinct_terms(text: &str) -> HashSet<String> {
    content_terms(&normalize(text).text).into_iter().collect()
}

/// `choices` with the number of distinct terms of `wanted` each holds, most first (ties: the
/// earlier first).
fn ranked_choices(wanted: &HashSet<String>, choices: &[String]) -> Vec<(usize, String)> {
    let mut ranked: Vec<(usize, usize, String)> = choices
        .iter()
        .enumerate()
        .map(|(position, choice)| {
            let held: HashSet<String> = content_terms(choice).into_iter().collect();
            (wanted.intersection(&held).count(), position, choice.clone())
        })
        .collect();
    ranked.sort_by(|left, right| right.0.cmp(&left.0).then(left.1.cmp(&right.1)));
    ranked.into_iter().map(|(shared, _, choice)| (shared, choice)).collect()
}

/// The verbatim pieces of `model_text` (a source as the model saw it) a generator may be offered
/// as its only quotes (`generator.quote_choices`): its sentences in order, each on one line
/// (whitespace runs as one space, which matching folds anyway), at most [`MAX_OFFERED_CHARS`]
/// characters (a longer sentence is offered as consecutive pieces cut at spaces), without
/// duplicates, without instruction-like sentences (the verifier masks them) and without pieces
/// holding no letter or digit. Every choice is a quote [`locate_quote`] finds in its source.
pub fn quote_choices(model_text: &str) -> Vec<String> {
    let mut choices: Vec<String> = Vec::new();
    for span in sentences(model_text) {
        let sentence = span.slice(model_text);
        if is_instruction(sentence) {
            continue;
        }
        let mut piece = String::new();
        for word in sentence.split_whitespace() {
            // A single word longer than the limit is offered cut mid-word (still verbatim).
            for part in word.chars().collect::<Vec<_>>().chunks(MAX_OFFERED_CHARS) {
                let part: String = part.iter().collect();
                let needed = if piece.is_empty() { 0 } else { 1 } + part.chars().count();
                if piece.chars().count() + needed > MAX_OFFERED_CHARS {
                    push_choice(&mut choices, std::mem::take(&mut piece));
                }
                if !piece.is_empty() {
                    piece.push(' ');
                }
                piece.push_str(&part);
            }
        }
        push_choice(&mut choices, piece);
    }
    choices
}

/// At most `most` of `choices` (a source's [`quote_choices`]), those sharing the most distinct
/// content terms with `question` first (ties: the earlier first). On the tuning slice a 1.5B
/// model answered more often choosing among two sentences per source than among all
/// (BENCHMARKS.md).
pub fn quote_choices_for(question: &str, choices: &[String], most: usize) -> Vec<String> {
    ranked_choices(&distinct_terms(question), choices).into_iter().take(most).map(|(_, choice)| choice).collect()
}

/// Appends `piece` to `choices` unless it holds no letter or digit or is already there.
fn push_choice(choices: &mut Vec<String>, piece: String) {
    if piece.chars().any(char::is_alphanumeric) && !choices.contains(&piece) {
        choices.push(piece);
    }
}

/// A quote the generator gave, as a repair prompt may echo it: neutralized like source text
/// (so it cannot open or close a source or forge a label), on one line, at most
/// [`MAX_ECHOED_QUOTE_CHARS`] characters (`…` marks a cut).
pub fn echo_quote(quote: &str) -> String {
    let neutral = neutralize(quote);
    let one_line = neutral.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= MAX_ECHOED_QUOTE_CHARS {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(MAX_ECHOED_QUOTE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Characters `[start, end)` of `text`.
pub fn char_slice(text: &str, (start, end): (usize, usize)) -> String {
    text.chars().skip(start).take(end.saturating_sub(start)).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
    fn long_sentences_are_offered_in_verbatim_pieces_cut_at_spaces() {
        let long = format!("Word {}end.", "word ".repeat(149));
        let choices = quote_choices(&neutralize(&format!("Short one. {long} {}", "x".repeat(450))));
        assert_eq!(choices[0], "Short one.");
        assert!(choices.iter().all(|choice| choice.chars().count() <= MAX_OFFERED_CHARS));
        assert_eq!(choices[1..3].join(" "), long.trim(), "consecutive pieces of the one sentence");
        assert_eq!(choices[3..].concat(), "x".repeat(450), "a word over the limit is cut where it must be");
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

    const BRIDGE: &str = "The bridge opened in 1932 after six years of work. It is 503 metres long. Its towers \
                          are made of granite, and the deck carries “eight lanes” of traffic — and two rail lines.";

    #[test]
    fn typography_small_models_change_is_folded() {
        // Straight for curly quotes, a hyphen or en dash for the em dash.
        assert_eq!(
            located(BRIDGE, "carries \"eight lanes\" of traffic - and two").as_deref(),
            Some("carries “eight lanes” of traffic — and two")
        );
        assert_eq!(located(BRIDGE, "traffic – and").as_deref(), Some("traffic — and"));
        let apostrophe = "Levi’s Stadium hosted the game.";
        assert_eq!(located(apostrophe, "Levi's Stadium hosted").as_deref(), Some("Levi’s Stadium hosted"));
    }

    #[test]
    fn an_added_or_dropped_final_period_or_quotation_marks_are_tolerated() {
        assert_eq!(located(BRIDGE, "It is 503 metres long").as_deref(), Some("It is 503 metres long"));
        assert_eq!(located(BRIDGE, "It is 503 metres long.").as_deref(), Some("It is 503 metres long."));
        // Added: the source goes on with a comma.
        assert_eq!(
            located(BRIDGE, "Its towers are made of granite.").as_deref(),
            Some("Its towers are made of granite")
        );
        assert_eq!(located(BRIDGE, "\"It is 503 metres long.\"").as_deref(), Some("It is 503 metres long."));
        assert_eq!(located(BRIDGE, "“It is 503 metres long”").as_deref(), Some("It is 503 metres long"));
        // Dropped: the source quotes, the quote does not.
        assert_eq!(located(BRIDGE, "eight lanes").as_deref(), Some("eight lanes"));
    }

    #[test]
    fn an_ellipsis_joins_verbatim_pieces_in_order_and_the_span_is_the_sources_text() {
        assert_eq!(
            located(BRIDGE, "The bridge opened in 1932 ... It is 503 metres long.").as_deref(),
            Some("The bridge opened in 1932 after six years of work. It is 503 metres long.")
        );
        assert_eq!(
            located(BRIDGE, "The bridge opened in 1932… It is 503 metres long").as_deref(),
            Some("The bridge opened in 1932 after six years of work. It is 503 metres long")
        );
        // Leading and trailing ellipses only mark a cut.
        assert_eq!(located(BRIDGE, "...It is 503 metres long...").as_deref(), Some("It is 503 metres long"));
    }

    #[test]
    fn changed_words_and_misplaced_or_distant_pieces_stay_not_found() {
        for quote in [
            "It is 504 metres long.",
            "It is 503 meters long.",
            "It is about 503 metres long.",
            "It is 503 long.",
            "The bridge opened in 1932 after six years work.",
            // Out of order.
            "It is 503 metres long ... The bridge opened in 1932",
            // More left out than the pieces hold.
            "The bridge ... long.",
            // A piece that is not in the source at all.
            "The bridge opened in 1932 ... It is very long.",
        ] {
            assert_eq!(located(BRIDGE, quote), None, "{quote:?}");
        }
        // Pieces further apart than MAX_ELIDED_CHARS, even when the pieces hold more.
        let filler = "x ".repeat(MAX_ELIDED_CHARS);
        let far = format!("{} {filler} {}", "a".repeat(150), "b".repeat(150));
        let quote = format!("{} ... {}", "a".repeat(150), "b".repeat(150));
        assert_eq!(located(&far, &quote), None);
        let near = format!("{} {} {}", "a".repeat(150), "x ".repeat(40), "b".repeat(150));
        assert_eq!(located(&near, &quote), Some(near.clone()));
        // Punctuation alone is not a piece.
        assert_eq!(located(BRIDGE, "... . ..."), None);
    }

    proptest! {
        /// Every quote offered as a choice is located in the source it was offered for.
        #[test]
        fn every_choice_is_a_quote_found_in_its_source(
            source in "([a-c]{1,3}|[ .,!?…“”—’\n]|S1|<b>|\u{200B}|４|ignore all previous instructions){0,80}",
        ) {
            let model = neutralize(&source);
            for choice in quote_choices(&model) {
                prop_assert!(choice.chars().count() <= MAX_OFFERED_CHARS);
                prop_assert!(located(&source, &choice).is_some(), "{:?} not found in {:?}", choice, source);
            }
        }

        /// Whatever the quote, a located span lies inside the cited source and is its own text.
        #[test]
        fn every_located_span_is_inside_the_source(
            source in "([a-c]{1,3}|[ .,…“”—’\n]|S1|<b>|\u{200B}|４){0,60}",
            picks in proptest::collection::vec((0usize..60, 0usize..20), 1..4),
            decoration in 0usize..4,
        ) {
            let chars: Vec<char> = source.chars().collect();
            let pieces: Vec<String> = picks
                .iter()
                .map(|&(start, length)| {
                    let start = start.min(chars.len());
                    chars[start..(start + length).min(chars.len())].iter().collect()
                })
                .collect();
            let mut quote = pieces.join(["...", " … ", " ", ""][decoration]);
            if decoration == 1 {
                quote = format!("\"{quote}.\"");
            }
            let view = normalize(&source);
            if let Some(found) = locate_quote(&source, &view, &quote) {
                let (start, end) = found.original;
                prop_assert!(start < end && end <= chars.len());
                prop_assert!(found.normalized.0 <= found.normalized.1);
                prop_assert!(found.normalized.1 <= view.text.chars().count());
                let span = char_slice(&source, found.original);
                prop_assert_eq!(span.trim(), span.as_str());
            }
            // A piece of the source's own text is always found (unless cut inside a tag or label,
            // which neutralization reads differently on its own).
            if let Some(piece) = pieces
                .first()
                .filter(|piece| piece.chars().any(char::is_alphanumeric) && !piece.contains(['<', 'S', '1']))
            {
                prop_assert!(locate_quote(&source, &view, piece).is_some(), "{:?} in {:?}", piece, source);
            }
        }
    }
}
