//! What the model sees of untrusted text: first normalized — Unicode compatibility forms
//! folded (NFKC, UAX #15), invisible characters dropped, and combining marks kept only on the
//! letters they belong to — so that `［Ｓ１］`, `S\u{200B}1`, `＜/source＞` or `<\u{0338}source`
//! reach [`neutralize`] as the ASCII forms it defuses; then neutralized: every `<` (or `≮`) that
//! begins a tag becomes `‹`, and label-shaped tokens (`S3`, also with an `S` look-alike or
//! non-ASCII digits) become `S-3`, so a source can neither close its delimiter nor forge a
//! citation label ([`super::prompt`] wraps the result; its tests hold it against an independent
//! reader of forgeries).
//!
//! What is dropped: control characters other than whitespace, every `Default_Ignorable_Code_Point`
//! and every format (`Cf`) character of Unicode 16 — zero-width spaces and joiners, word joiner,
//! byte order mark, soft hyphen, bidi embeddings, overrides and isolates, variation selectors,
//! tag characters, Hangul fillers, interlinear annotation marks (ranges in [`is_invisible`]).
//! Combining marks (`M*`) survive only after a non-ASCII letter that is not an `S` look-alike:
//! a mark on `<` or `>` is dropped before NFKC (so `<\u{0338}` cannot compose into `≮`), and any
//! mark left on an ASCII character, a digit, an `S` look-alike, punctuation, whitespace or nothing
//! is dropped after it (so `S\u{0335}1` reads `S1` and is then neutralized).
//!
//! Invariants: the text is processed in segments that start before every "stable" character
//! (canonical combining class 0 and `NFKC_Quick_Check = Yes`, where NFKC of a concatenation is
//! the concatenation of the NFKCs); each segment is normalized on its own, so normalizing a prefix
//! of the original that ends at a segment boundary gives exactly the matching prefix of the
//! normalized text. [`Normalized::boundaries`] lists those boundaries, which map spans of the
//! normalized text back to spans of the original (quotes, prompt cuts). Citation offsets stay on
//! the original text: only what the model (and the support verifier) reads is normalized.

use unicode_normalization::char::{canonical_combining_class, decompose_canonical, is_combining_mark};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

/// A segment boundary: the same position in the original and in the normalized text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// Character index in the original text.
    pub original_char: usize,
    /// Byte offset in the original text.
    pub original_byte: usize,
    /// Character index in the normalized text.
    pub normalized_char: usize,
}

/// A normalized text and the map back to the original it came from.
#[derive(Clone, Debug)]
pub struct Normalized {
    /// The normalized text.
    pub text: String,
    /// Segment boundaries in ascending order, the first at the start of both texts and the last
    /// at their ends.
    boundaries: Vec<Boundary>,
}

impl Normalized {
    /// Segment boundaries in ascending order (first: both starts; last: both ends).
    pub fn boundaries(&self) -> &[Boundary] {
        &self.boundaries
    }

    /// The character span of the original text that produced the normalized characters
    /// `[start, end)`: widened to whole segments, so it covers every original character that
    /// contributed to them (and may take in a neighbouring space that starts a segment).
    pub fn original_span(&self, start: usize, end: usize) -> (usize, usize) {
        let first = self.boundaries.partition_point(|boundary| boundary.normalized_char <= start).saturating_sub(1);
        let last = self.boundaries.partition_point(|boundary| boundary.normalized_char < end);
        let original_start = self.boundaries[first].original_char;
        let original_end =
            self.boundaries.get(last).unwrap_or(&self.boundaries[self.boundaries.len() - 1]).original_char;
        (original_start, original_end.max(original_start))
    }
}

/// Letters that read as `S`/`s`: `S`, `s`, look-alikes that NFKC does not fold to ASCII (Cyrillic
/// dze, Cherokee du, Armenian tiwn, Latin small capital s) and `S`/`s` with diacritics (`Ś`, `Š`,
/// `ṡ`…). Label neutralization treats them as `S`, and combining marks never stay on them.
pub fn is_s_like(character: char) -> bool {
    if matches!(character, 'S' | 's' | 'Ѕ' | 'ѕ' | 'Ꮪ' | 'Տ' | 'ꜱ') {
        return true;
    }
    if character.is_ascii() || !character.is_alphabetic() {
        return false;
    }
    let mut first = None;
    decompose_canonical(character, |part| {
        first.get_or_insert(part);
    });
    matches!(first, Some('S' | 's'))
}

/// Characters a reader does not see: controls other than whitespace, default-ignorable code
/// points and format characters (DerivedCoreProperties.txt and `gc=Cf` of Unicode 16.0).
pub fn is_invisible(character: char) -> bool {
    if character.is_ascii() {
        return character.is_ascii_control() && !character.is_ascii_whitespace();
    }
    (character.is_control() && !character.is_whitespace())
        || matches!(character as u32,
            0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF
            | 0xFFA0 | 0xFFF0..=0xFFFB | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF
            // Format characters that are not default-ignorable (prepended concatenation marks,
            // Syriac abbreviation mark, Kaithi number signs, Egyptian hieroglyph format controls).
            | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x0890 | 0x0891 | 0x08E2 | 0x110BD | 0x110CD
            | 0x13430..=0x1343F)
}

/// Whether a combining mark may stay on `base` (the last non-mark character before it).
fn keeps_marks(base: Option<char>) -> bool {
    base.is_some_and(|base| !base.is_ascii() && base.is_alphabetic() && !is_s_like(base))
}

/// Whether a segment may start before `character` (see the module invariants).
fn is_stable(character: char) -> bool {
    character.is_ascii()
        || (canonical_combining_class(character) == 0 && is_nfkc_quick(std::iter::once(character)) == IsNormalized::Yes)
}

/// Normalizes `original` for the model (see the module documentation).
pub fn normalize(original: &str) -> Normalized {
    let mut normalizer = Normalizer {
        text: String::with_capacity(original.len()),
        normalized_chars: 0,
        base: None,
        cleaned: String::new(),
    };
    let mut boundaries = vec![Boundary { original_char: 0, original_byte: 0, normalized_char: 0 }];
    let mut segment_start = 0;
    let mut char_count = 0;
    for (index, (byte, character)) in original.char_indices().enumerate() {
        char_count = index + 1;
        if byte > segment_start && is_stable(character) {
            normalizer.push_segment(&original[segment_start..byte]);
            boundaries.push(Boundary {
                original_char: index,
                original_byte: byte,
                normalized_char: normalizer.normalized_chars,
            });
            segment_start = byte;
        }
    }
    if segment_start < original.len() {
        normalizer.push_segment(&original[segment_start..]);
        boundaries.push(Boundary {
            original_char: char_count,
            original_byte: original.len(),
            normalized_char: normalizer.normalized_chars,
        });
    }
    Normalized { text: normalizer.text, boundaries }
}

/// Normalization state carried from one segment to the next.
struct Normalizer {
    text: String,
    normalized_chars: usize,
    /// The last non-mark character written (combining marks attach to it).
    base: Option<char>,
    /// Scratch buffer: the current segment before NFKC.
    cleaned: String,
}

impl Normalizer {
    fn push_segment(&mut self, segment: &str) {
        // Fast path: one printable ASCII character or ASCII whitespace is its own NFKC.
        if let [byte] = segment.as_bytes() {
            let character = char::from(*byte);
            if !is_invisible(character) {
                self.text.push(character);
                self.normalized_chars += 1;
                self.base = Some(character);
            }
            return;
        }
        self.cleaned.clear();
        let mut base = self.base;
        for character in segment.chars() {
            if is_invisible(character) {
                continue;
            }
            if is_combining_mark(character) {
                if matches!(base, Some('<' | '>')) {
                    continue;
                }
            } else {
                base = Some(character);
            }
            self.cleaned.push(character);
        }
        for character in self.cleaned.nfkc() {
            if is_invisible(character) {
                continue;
            }
            if is_combining_mark(character) {
                if !keeps_marks(self.base) {
                    continue;
                }
            } else {
                self.base = Some(character);
            }
            self.text.push(character);
            self.normalized_chars += 1;
        }
    }
}

/// What the model sees of a source text: [`normalize`]d, then neutralized (delimiters defused,
/// label-shaped tokens rewritten from `S3` to `S-3`).
pub fn neutralize(text: &str) -> String {
    neutralize_normalized(&normalize(text).text, None)
}

/// Neutralizes normalized text. When `offsets` is given, it receives for every input character
/// (and then for the end) the byte offset in the output where that character's output begins.
pub(super) fn neutralize_normalized(text: &str, mut offsets: Option<&mut Vec<usize>>) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (index, &character) in chars.iter().enumerate() {
        if let Some(offsets) = offsets.as_deref_mut() {
            offsets.push(out.len());
        }
        out.push(if is_less_than(character) && opens_tag(&chars[index + 1..]) { '‹' } else { character });
        if is_label_start(&chars, index) {
            out.push('-');
        }
    }
    if let Some(offsets) = offsets {
        offsets.push(out.len());
    }
    out
}

/// Whether `chars[index]` is the `S` of a label-shaped token: an `S` (or look-alike) starting a
/// word, followed by one or more digits (any script) and then not by a letter or digit.
fn is_label_start(chars: &[char], index: usize) -> bool {
    let starts_word = index == 0 || !chars[index - 1].is_alphanumeric();
    if !starts_word || !is_s_like(chars[index]) {
        return false;
    }
    let digits = chars[index + 1..].iter().take_while(|next| next.is_numeric()).count();
    digits > 0 && chars.get(index + 1 + digits).is_none_or(|after| !after.is_alphanumeric())
}

/// Whether `character` is `<` or a composite of it (`≮` is `<` + U+0338 after NFKC composed them).
fn is_less_than(character: char) -> bool {
    if character == '<' {
        return true;
    }
    if character.is_ascii() {
        return false;
    }
    let mut first = None;
    unicode_normalization::char::decompose_canonical(character, |part| {
        first.get_or_insert(part);
    });
    first == Some('<')
}

/// Whether a `<` followed by `rest` begins a tag: after any spaces and slashes comes a letter.
fn opens_tag(rest: &[char]) -> bool {
    rest.iter().find(|next| !next.is_whitespace() && **next != '/').is_some_and(|next| next.is_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folds_compatibility_forms_and_drops_invisible_characters() {
        assert_eq!(normalize("［Ｓ１］ ＜/source＞").text, "[S1] </source>");
        assert_eq!(normalize("S\u{200B}1 \u{FEFF}S\u{2060}2 S\u{E0031}3 S\u{202E}4").text, "S1 S2 S3 S4");
        assert_eq!(normalize("𝐒𝟏 ſ5 S¹ S① ﬁnance").text, "S1 s5 S1 S1 finance");
        assert_eq!(
            normalize("plain ASCII text, unchanged.\n\tNext line.").text,
            "plain ASCII text, unchanged.\n\tNext line."
        );
    }

    #[test]
    fn combining_marks_stay_on_letters_only() {
        // Accents compose or stay on the letters they belong to.
        assert_eq!(normalize("cafe\u{0301} Ame\u{0301}lie").text, "café Amélie");
        assert_eq!(normalize("हिन्दी").text, "हिन्दी");
        // Marks on delimiter characters, digits and S look-alikes go.
        assert_eq!(normalize("<\u{0338}/source>").text, "</source>");
        assert_eq!(normalize("S\u{0335}1 [S1\u{0336}] Ѕ\u{0308}2 \u{0301}x").text, "S1 [S1] Ѕ2 x");
    }

    #[test]
    fn spans_map_back_to_the_original() {
        let original = "Up to ４０ euros, see ［Ｓ７］.";
        let normalized = normalize(original);
        assert_eq!(normalized.text, "Up to 40 euros, see [S7].");
        let start = normalized.text.find("40").unwrap();
        let end = start + "40 euros".len();
        let (from, to) = normalized.original_span(start, end);
        let quoted: String = original.chars().skip(from).take(to - from).collect();
        // Widened to whole segments: the space before `４` starts its segment.
        assert_eq!(quoted, " ４０ euros");
    }

    proptest! {
        /// Normalizing a prefix that ends at a boundary gives the matching prefix of the
        /// normalized text, and the boundaries are consistent with both texts.
        #[test]
        fn prefixes_at_boundaries_normalize_to_prefixes(text in "(\\PC|[<>S1 ]|\\p{M}|\u{200B}|\u{FF21}|\u{1100}\u{1161}){0,40}") {
            let normalized = normalize(&text);
            let boundaries = normalized.boundaries();
            prop_assert_eq!(boundaries[0], Boundary { original_char: 0, original_byte: 0, normalized_char: 0 });
            let last = boundaries[boundaries.len() - 1];
            prop_assert_eq!(last.original_char, text.chars().count());
            prop_assert_eq!(last.original_byte, text.len());
            prop_assert_eq!(last.normalized_char, normalized.text.chars().count());
            for boundary in boundaries {
                let prefix = normalize(&text[..boundary.original_byte]).text;
                let expected: String = normalized.text.chars().take(boundary.normalized_char).collect();
                prop_assert_eq!(prefix, expected);
                prop_assert_eq!(text[..boundary.original_byte].chars().count(), boundary.original_char);
            }
            for (start, end) in [(0, 1), (1, 3), (2, 2)] {
                let (from, to) = normalized.original_span(start, end);
                prop_assert!(from <= to && to <= last.original_char);
            }
        }
    }
}
