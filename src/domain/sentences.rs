//! Sentences of a text, and the vectors of a chunk's sentences kept from ingestion.
//!
//! [`sentences`] is the one sentence splitter of the server: the extractive generator, the
//! quote matcher and the support verifier split with it, and the write path splits each chunk
//! with it to embed its sentences once ([`SentenceVectors`]), so the verifier embeds only claims.
//!
//! Invariants: the splitter is total on arbitrary Unicode (no byte slicing inside a character,
//! no panics) and its spans carry byte and character offsets that delimit the same substring;
//! a [`SentenceVectors`] entry is found only by the digest of its sentence's exact text, so a
//! lookup with any other text (a truncated last sentence, another chunk's text) misses.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One sentence of a text: `text[byte_start..byte_end]`, which is also the characters
/// `char_start..char_end` (Unicode scalar values). Surrounding whitespace is trimmed; never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SentenceSpan {
    /// First byte.
    pub byte_start: usize,
    /// One past the last byte.
    pub byte_end: usize,
    /// First character.
    pub char_start: usize,
    /// One past the last character.
    pub char_end: usize,
}

impl SentenceSpan {
    /// The sentence's text inside `text` (the text it was split from).
    pub fn slice<'a>(&self, text: &'a str) -> &'a str {
        &text[self.byte_start..self.byte_end]
    }
}

const TERMINATORS: [char; 6] = ['.', '!', '?', '。', '！', '？'];
const CLOSERS: [char; 7] = ['"', '\'', ')', ']', '»', '”', '’'];

/// Abbreviations (lowercased, without their final period) that end no sentence whatever follows.
const ABBREVIATIONS: [&str; 14] =
    ["e.g", "i.e", "cf", "vs", "viz", "dr", "mr", "mrs", "ms", "prof", "approx", "ca", "incl", "resp"];

/// Abbreviations (lowercased, without their final period) that end no sentence before a number
/// (`Fig. 3`, `No. 7`, `pp. 12`).
const BEFORE_NUMBERS: [&str; 10] = ["fig", "figs", "no", "nos", "eq", "vol", "ch", "sec", "p", "pp"];

/// Splits `text` into sentences. A sentence ends at a newline, or at `.`/`!`/`?` (plus any
/// closing quotes or brackets) when the text ends there or the next non-space character is not a
/// lowercase letter (so `e.g. the` stays whole), unless the period ends an abbreviation
/// ([`ABBREVIATIONS`]; [`BEFORE_NUMBERS`] before a digit) or the next character is a table row's
/// cell separator `|`. A period glued to a capitalized word after a lowercase one
/// (`cells.Examples`, common in scraped abstracts) also ends a sentence, unless the word is an
/// address, a URL or a host name (`R-help@lists.R-project.org`, `www.R-project.org`): the part
/// before holds `@`, `/` or `:`, or the part after holds `.`, `@` or `/`.
pub(crate) fn sentences(text: &str) -> Vec<SentenceSpan> {
    let characters: Vec<(usize, char)> = text.char_indices().collect();
    let count = characters.len();
    let mut boundaries = Vec::new(); // exclusive character indexes where a sentence ends
    let mut index = 0;
    while index < count {
        let character = characters[index].1;
        if character == '\n' {
            boundaries.push(index + 1);
            index += 1;
            continue;
        }
        if !TERMINATORS.contains(&character) {
            index += 1;
            continue;
        }
        let mut after = index + 1;
        while after < count && CLOSERS.contains(&characters[after].1) {
            after += 1;
        }
        let ends = match characters.get(after).map(|&(_, next)| next) {
            None => true,
            Some(next) if next.is_whitespace() => {
                let following = characters[after..].iter().map(|&(_, c)| c).find(|c| !c.is_whitespace());
                let continued = following.is_some_and(|c| c.is_lowercase() || c == '|');
                let abbreviated = character == '.' && abbreviation(&characters[..index], following);
                !(continued || abbreviated)
            }
            Some(next) => {
                character == '.'
                    && next.is_uppercase()
                    && index >= 2
                    && characters[index - 1].1.is_lowercase()
                    && characters[index - 2].1.is_lowercase()
                    && !in_address(&characters[..index], &characters[after..])
            }
        };
        if ends {
            boundaries.push(after);
        }
        index = after.max(index + 1);
    }
    boundaries.push(count);

    let byte_at = |char_index: usize| characters.get(char_index).map_or(text.len(), |&(byte, _)| byte);
    let mut spans = Vec::with_capacity(boundaries.len());
    let mut start = 0;
    for end in boundaries {
        let mut first = start;
        let mut last = end.min(count);
        while first < last && characters[first].1.is_whitespace() {
            first += 1;
        }
        while last > first && characters[last - 1].1.is_whitespace() {
            last -= 1;
        }
        if first < last {
            spans.push(SentenceSpan {
                byte_start: byte_at(first),
                byte_end: byte_at(last),
                char_start: first,
                char_end: last,
            });
        }
        start = end;
    }
    spans
}

/// Whether the word that `before` ends with (the characters before a period) is an abbreviation
/// that ends no sentence before `following` (the next character that is not a space).
fn abbreviation(before: &[(usize, char)], following: Option<char>) -> bool {
    const LONGEST: usize = 8;
    let window = &before[before.len().saturating_sub(LONGEST + 1)..];
    let start = match window.iter().rposition(|&(_, c)| c.is_whitespace()) {
        Some(space) => space + 1,
        None if window.len() <= LONGEST => 0,
        None => return false,
    };
    let word = &window[start..];
    let word: String = word
        .iter()
        .map(|&(_, c)| c)
        .skip_while(|c| matches!(c, '(' | '[' | '"' | '\'' | '“' | '‘' | '«'))
        .flat_map(char::to_lowercase)
        .collect();
    ABBREVIATIONS.contains(&word.as_str())
        || (following.is_some_and(|c| c.is_ascii_digit()) && BEFORE_NUMBERS.contains(&word.as_str()))
}

/// Whether a period between `before` and `after` (the text around it) is inside an e-mail
/// address, a URL or a host name: the word before it holds `@`, `/` or `:`, or the word after it
/// holds `.`, `@` or `/` before its own end (closing punctuation aside).
fn in_address(before: &[(usize, char)], after: &[(usize, char)]) -> bool {
    /// Characters looked at on each side: a word longer than this is judged by its nearest part.
    const REACH: usize = 256;
    let before_word = before.iter().rev().take(REACH).map(|&(_, c)| c).take_while(|c| !c.is_whitespace());
    let after_word: Vec<char> = after.iter().take(REACH).map(|&(_, c)| c).take_while(|c| !c.is_whitespace()).collect();
    let after_word = after_word
        .iter()
        .rposition(|c| !TERMINATORS.contains(c) && !CLOSERS.contains(c) && !matches!(c, ',' | ';' | ':'))
        .map_or(&after_word[..0], |last| &after_word[..=last]);
    before_word.into_iter().any(|c| matches!(c, '@' | '/' | ':'))
        || after_word.iter().any(|c| matches!(c, '.' | '@' | '/'))
}

/// The first 16 bytes of the SHA-256 of a sentence's exact text: the key of its vector.
pub fn sentence_digest(sentence: &str) -> [u8; 16] {
    let digest = Sha256::digest(sentence.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes
}

/// The vectors of one chunk's sentences, made at ingestion by the engine's embedder.
///
/// Each vector is scalar-quantized to `i8` with its own scale (largest magnitude / 127): one
/// byte per dimension plus 20 bytes of digest and scale, a quarter of `f32`. For a unit vector
/// the error per component is at most half a step (`scale / 2`, about 0.001 for MiniLM's
/// vectors), which moves a cosine with another unit vector by about 0.001 at most in practice
/// (measured in the tests: below 0.002 on MiniLM-like vectors); verifier thresholds are
/// calibrated in steps of 0.05.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentenceVectors {
    entries: Vec<SentenceVector>,
}

/// One quantized sentence vector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SentenceVector {
    /// [`sentence_digest`] of the sentence.
    digest: [u8; 16],
    /// `f32` bits of the step: component `i` is `values[i] * scale`.
    scale: u32,
    values: Vec<i8>,
}

impl SentenceVectors {
    /// Quantizes `(sentence, vector)` pairs; a sentence seen before keeps its first vector.
    pub fn quantize<'a>(items: impl IntoIterator<Item = (&'a str, &'a [f32])>) -> Self {
        let mut entries: Vec<SentenceVector> = Vec::new();
        for (sentence, vector) in items {
            let digest = sentence_digest(sentence);
            if entries.iter().any(|entry| entry.digest == digest) {
                continue;
            }
            let largest =
                vector.iter().filter(|value| value.is_finite()).fold(0.0f32, |most, value| most.max(value.abs()));
            let scale = if largest > 0.0 { largest / 127.0 } else { 0.0 };
            let values = vector
                .iter()
                .map(|value| {
                    if scale == 0.0 || !value.is_finite() {
                        0
                    } else {
                        (value / scale).round().clamp(-127.0, 127.0) as i8
                    }
                })
                .collect();
            entries.push(SentenceVector { digest, scale: scale.to_bits(), values });
        }
        Self { entries }
    }

    /// Sentences held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sentence is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The largest dot product of `query` with any held sentence vector (dequantized), skipping
    /// vectors of another dimension or with a scale that is not a finite number; `None` when
    /// none is left.
    pub fn max_dot(&self, query: &[f32]) -> Option<f32> {
        self.entries
            .iter()
            .filter(|entry| entry.values.len() == query.len())
            .filter_map(|entry| {
                let scale = f32::from_bits(entry.scale);
                let sum: f32 =
                    entry.values.iter().zip(query).map(|(&value, &component)| f32::from(value) * component).sum();
                let score = sum * scale;
                (scale.is_finite() && score.is_finite()).then_some(score)
            })
            .max_by(f32::total_cmp)
    }

    /// The vector of the sentence with `digest` ([`sentence_digest`]), dequantized; `None` when
    /// absent or when its scale is not a finite number.
    pub fn vector(&self, digest: &[u8; 16]) -> Option<Vec<f32>> {
        let entry = self.entries.iter().find(|entry| &entry.digest == digest)?;
        let scale = f32::from_bits(entry.scale);
        scale.is_finite().then(|| entry.values.iter().map(|&value| f32::from(value) * scale).collect())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn split(text: &str) -> Vec<&str> {
        sentences(text).iter().map(|span| span.slice(text)).collect()
    }

    /// Issue 60: "R-help@lists.R-project.org" was cut after "lists." (a period glued to a capital
    /// after lowercase letters ends a sentence, for scraped abstracts' "cells.Examples"), so the
    /// real R FAQ answer quoted "R-project.org to send a message to everyone on the R-help
    /// mailing list." Addresses, URLs and host names, abbreviations before a capital or a
    /// number, decimals and a table row's cells stay in their sentence.
    #[test]
    fn addresses_urls_abbreviations_decimals_and_table_cells_stay_in_their_sentence() {
        for whole in [
            "Send a message to R-help@lists.R-project.org to reach everyone on the list.",
            "The manuals are at https://CRAN.R-project.org/doc/manuals/ and on every mirror.",
            "See www.R-project.org for the sources.",
            "Ports of call, e.g. Tern Harbour and Osterby, report weekly.",
            "Tools i.e. Git or Mercurial work.",
            "The ratio rose from 2.5 to 3.75 in a year.",
            "The curve is drawn in Fig. 3 of the report.",
            "Dr. Holt certified the tonnage, cf. Table 2 and No. 7 of the series.",
            "Vesterholm Ltd. | 412 | 1,904",
        ] {
            assert_eq!(split(whole), [whole], "{whole:?}");
        }
        assert_eq!(split("Third cells.Examples here"), ["Third cells.", "Examples here"]);
        assert_eq!(split("Write to help@example.org. Then wait."), ["Write to help@example.org.", "Then wait."]);
        assert_eq!(split("It ended etc. The next one."), ["It ended etc.", "The next one."]);
        assert_eq!(
            split("See https://example.org/. The page is new."),
            ["See https://example.org/.", "The page is new."]
        );
        assert_eq!(split("It holds 12.5 m. Then 3 more."), ["It holds 12.5 m.", "Then 3 more."]);
    }

    fn unit(rng: &mut SmallRng, dimension: usize) -> Vec<f32> {
        let mut vector: Vec<f32> = (0..dimension).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
        vector.iter_mut().for_each(|value| *value /= norm);
        vector
    }

    #[test]
    fn quantized_vectors_keep_cosines_within_two_thousandths_and_are_found_by_exact_text_only() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut worst = 0.0f32;
        for _ in 0..200 {
            let (sentence, other) = (unit(&mut rng, 384), unit(&mut rng, 384));
            let stored = SentenceVectors::quantize([("A sentence.", sentence.as_slice())]);
            let restored = stored.vector(&sentence_digest("A sentence.")).expect("found");
            let exact: f32 = sentence.iter().zip(&other).map(|(a, b)| a * b).sum();
            let approximate: f32 = restored.iter().zip(&other).map(|(a, b)| a * b).sum();
            let own: f32 = restored.iter().zip(&sentence).map(|(a, b)| a * b).sum();
            worst = worst.max((exact - approximate).abs()).max((1.0 - own).abs());
        }
        assert!(worst < 0.002, "largest cosine error {worst}");
        let stored =
            SentenceVectors::quantize([("A sentence.", unit(&mut rng, 8).as_slice()), ("A sentence.", &[1.0; 8])]);
        assert_eq!(stored.len(), 1, "a repeated sentence keeps its first vector");
        assert!(stored.vector(&sentence_digest("A sentence")).is_none());
        assert!(stored.vector(&sentence_digest("a sentence.")).is_none());
        let zero = SentenceVectors::quantize([("Zero.", [0.0f32; 4].as_slice()), ("Odd.", [f32::NAN, 1.0].as_slice())]);
        assert_eq!(zero.vector(&sentence_digest("Zero.")), Some(vec![0.0; 4]));
        assert_eq!(zero.vector(&sentence_digest("Odd.")), Some(vec![0.0, 1.0]));
    }
}
