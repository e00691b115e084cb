//! PDF: the text of each page in page order (lopdf: a pure-Rust parser that decodes content
//! streams and the standard font encodings, bounds stream decompression and object nesting),
//! one page span per page. Encrypted files are refused unless they open with the empty user
//! password (protected only by an owner password: readers open them without asking); a page
//! whose content does not decode is skipped, and a file where no page decodes is malformed.
//!
//! The page's text operations are read here ([`PageText`]) rather than by lopdf's own text
//! extraction, which knows no line moves: a producer that sets a whole page in one text object
//! (pdfTeX, ghostscript) came out as one run-on line with the words at every line end glued
//! together. Here a move to another line (`Td`/`TD` with a vertical offset, `Tm` to another
//! baseline, `T*`, `'`, `"`, `ET`) ends a line; a `TJ` offset wider than a tenth of an em is a
//! word gap; a string drawn with letter spacing of at least [`LETTER_SPACED`] of its font size
//! (how ghostscript justifies a line: "o o" drawn as "oo" spaced apart) gets a space between
//! its characters; a move along the line is a word gap when it leaves more than [`GAP`] of an
//! em after the text drawn so far (glyph widths from the font's `/Widths`, half an em a
//! character where a font has none): producers move inside words too (kerning, drop caps).
//! Typographic ligatures (U+FB00-FB06, "ﬁ" for "fi") come out as their letters, so a search
//! for "specified" finds a typeset "speciﬁed".
//!
//! Bounds (issue 57): a page's operators are decoded one at a time (`Content::decode_iter`),
//! never collected, and at most `max_operators_per_page` of them are walked (a page of 60 MiB of
//! `q` is 31 million; more is `document_too_large`); the deadline is checked before each page
//! and every [`CHECK_EVERY`] operators, so pages that append no text stop at it too.

use std::collections::BTreeMap;

use lopdf::content::Content;
use lopdf::{Document, Encoding, LoadOptions, Object, ObjectId};

use super::{ExtractError, ExtractLimits, ExtractResult, Extracted, TextBuilder};

/// A `TJ` offset below this (thousandths of an em; negative moves right) is a word gap.
const WORD_GAP: f32 = -100.0;

/// Letter spacing (`Tc`) of at least this fraction of the font size spaces a string's
/// characters as words.
const LETTER_SPACED: f32 = 0.15;

/// A move along the line leaving at least this fraction of the font size free is a word gap.
const GAP: f32 = 0.15;

/// Operators walked between deadline checks.
const CHECK_EVERY: usize = 4096;

#[cfg(test)]
thread_local! {
    /// Pages and operators the walk visited on this thread (a test hook: that the work stops at
    /// the deadline, not only that the answer says so).
    static VISITED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counts a visited page and `operators` visited operators (tests only).
fn visited(pages: usize, operators: usize) {
    #[cfg(test)]
    VISITED.with(|cell| {
        let (seen_pages, seen_operators) = cell.get();
        cell.set((seen_pages + pages, seen_operators + operators));
    });
    let _ = (pages, operators);
}

/// A font's encoding and its one-byte glyph widths (`/FirstChar`, `/Widths` in thousandths of
/// an em; `None` for two-byte Type0 fonts and fonts without widths).
type Font<'a> = (Encoding<'a>, Option<(u32, Vec<f32>)>);

fn widths(document: &Document, font: &lopdf::Dictionary) -> Option<(u32, Vec<f32>)> {
    if font.get(b"Subtype").and_then(Object::as_name).is_ok_and(|subtype| subtype == b"Type0") {
        return None;
    }
    let first = font.get(b"FirstChar").and_then(Object::as_i64).ok()?;
    let widths = font.get_deref(b"Widths", document).and_then(Object::as_array).ok()?;
    let widths = widths
        .iter()
        .map(|width| document.dereference(width).ok().and_then(|(_, width)| width.as_float().ok()).unwrap_or(0.0))
        .collect();
    Some((u32::try_from(first).ok()?, widths))
}

fn malformed(reason: impl std::fmt::Display) -> ExtractError {
    let reason: String = reason.to_string().chars().take(200).collect();
    ExtractError::Malformed { format: "pdf", reason }
}

fn too_large(limits: &ExtractLimits) -> ExtractError {
    ExtractError::TooLarge {
        what: "a pdf content stream",
        limit: format!("{} bytes decompressed", limits.max_unpacked_bytes),
    }
}

pub(super) fn extract(bytes: &[u8], limits: &ExtractLimits, mut builder: TextBuilder) -> ExtractResult<Extracted> {
    let options = LoadOptions { max_decompressed_size: Some(limits.max_unpacked_bytes), ..LoadOptions::default() };
    let document = match Document::load_mem_with_options(bytes, options) {
        Ok(document) => document,
        Err(lopdf::Error::Decryption(_)) => return Err(ExtractError::Encrypted),
        Err(error) => {
            let encrypted = bytes.windows(8).any(|window| window == b"/Encrypt");
            return Err(if encrypted { ExtractError::Encrypted } else { malformed(error) });
        }
    };
    // lopdf opens a file with the empty user password when that is the password (a file
    // protected only by an owner password, as readers open it without asking) and then holds it
    // decrypted; one still encrypted needs a password the server does not have.
    if document.is_encrypted() {
        return Err(ExtractError::Encrypted);
    }
    let pages = document.get_pages();
    if pages.is_empty() {
        return Err(malformed("no pages"));
    }
    if pages.len() > limits.max_pages {
        return Err(ExtractError::TooLarge { what: "pdf", limit: format!("{} pages", limits.max_pages) });
    }
    let mut decoded = 0;
    for (&number, &page_id) in &pages {
        builder.check_deadline()?;
        visited(1, 0);
        builder.start_page(number)?;
        let text = page_text(&document, page_id, limits, &builder)?;
        if !text.trim().is_empty() {
            decoded += 1;
            builder.push_raw(&text)?;
        }
    }
    if decoded == 0 {
        return Err(ExtractError::NoText);
    }
    builder.finish(pages.len())
}

/// One page's text; empty when its fonts or content do not decode (the page is skipped; a
/// content stream that stops parsing keeps the text before the fault), an error when a stream
/// decompresses past the limit, the page holds more than `max_operators_per_page` operators, or
/// the deadline passes. The operators are decoded one at a time, never held all at once.
fn page_text(
    document: &Document,
    page_id: ObjectId,
    limits: &ExtractLimits,
    builder: &TextBuilder,
) -> ExtractResult<String> {
    let max = limits.max_unpacked_bytes;
    let Ok(fonts) = document.get_page_fonts(page_id) else {
        return Ok(String::new());
    };
    let mut decoded = BTreeMap::new();
    for (name, font) in fonts {
        match font.get_font_encoding_with_limit(document, max) {
            Ok(encoding) => {
                decoded.insert(name, (encoding, widths(document, font)));
            }
            Err(lopdf::Error::Decompress(_)) => return Err(too_large(limits)),
            Err(_) => {}
        }
    }
    let content = match document.get_page_content_with_limit(page_id, max) {
        Ok(content) => content,
        Err(lopdf::Error::Decompress(_)) => return Err(too_large(limits)),
        Err(_) => return Ok(String::new()),
    };
    let mut page = PageText::new(&decoded);
    for (count, operation) in Content::decode_iter(&content).enumerate() {
        visited(0, 1);
        if count % CHECK_EVERY == 0 {
            builder.check_deadline()?;
        }
        if count >= limits.max_operators_per_page {
            return Err(ExtractError::TooLarge {
                what: "a pdf page",
                limit: format!("{} content operators", limits.max_operators_per_page),
            });
        }
        let Ok(operation) = operation else {
            break;
        };
        page.apply(&operation.operator, &operation.operands);
    }
    Ok(page.text)
}

/// The text state a page's operations move through: the font and its size, the letter and
/// word spacing, where the line starts (`line_x`, `baseline`) and how far the text drawn since
/// has advanced (text space units), and the text so far.
struct PageText<'a> {
    fonts: &'a BTreeMap<Vec<u8>, Font<'a>>,
    font: Option<&'a Font<'a>>,
    font_size: f32,
    letter_spacing: f32,
    word_spacing: f32,
    line_x: f32,
    baseline: f32,
    advance: f32,
    text: String,
}

/// The letters of a typographic ligature (NFKC of U+FB00-FB06); any other character as it is.
fn ligature_letters(character: char) -> String {
    match character {
        '\u{FB00}' => "ff".into(),
        '\u{FB01}' => "fi".into(),
        '\u{FB02}' => "fl".into(),
        '\u{FB03}' => "ffi".into(),
        '\u{FB04}' => "ffl".into(),
        '\u{FB05}' | '\u{FB06}' => "st".into(),
        other => other.into(),
    }
}

fn number(operand: Option<&Object>) -> f32 {
    operand.and_then(|object| object.as_float().ok()).unwrap_or(0.0)
}

impl<'a> PageText<'a> {
    fn new(fonts: &'a BTreeMap<Vec<u8>, Font<'a>>) -> Self {
        Self {
            fonts,
            font: None,
            font_size: 0.0,
            letter_spacing: 0.0,
            word_spacing: 0.0,
            line_x: 0.0,
            baseline: 0.0,
            advance: 0.0,
            text: String::new(),
        }
    }

    fn apply(&mut self, operator: &str, operands: &[Object]) {
        match operator {
            "BT" => (self.line_x, self.baseline, self.advance) = (0.0, 0.0, 0.0),
            "ET" | "T*" => self.next_line(),
            "Tf" => {
                self.font = operands.first().and_then(|name| name.as_name().ok()).and_then(|name| self.fonts.get(name));
                self.font_size = number(operands.get(1)).abs();
            }
            "Tc" => self.letter_spacing = number(operands.first()),
            "Tw" => self.word_spacing = number(operands.first()),
            "Td" | "TD" => {
                self.move_to(self.line_x + number(operands.first()), self.baseline + number(operands.get(1)))
            }
            "Tm" => self.move_to(number(operands.get(4)), number(operands.get(5))),
            "Tj" => self.show(operands.first()),
            "TJ" => {
                for element in operands.first().and_then(|array| array.as_array().ok()).into_iter().flatten() {
                    if let Object::String(..) = element {
                        self.show(Some(element));
                        continue;
                    }
                    let offset = number(Some(element));
                    self.advance -= offset / 1000.0 * self.font_size;
                    if offset < WORD_GAP {
                        self.space();
                    }
                }
            }
            "'" => {
                self.next_line();
                self.show(operands.first());
            }
            "\"" => {
                self.word_spacing = number(operands.first());
                self.letter_spacing = number(operands.get(1));
                self.next_line();
                self.show(operands.get(2));
            }
            _ => {}
        }
    }

    /// A new line start: another baseline ends the line; on the same one, a gap wider than
    /// [`GAP`] of an em after the text drawn is a space.
    fn move_to(&mut self, x: f32, baseline: f32) {
        if (baseline - self.baseline).abs() > 0.01 {
            self.line_break();
        } else if x - (self.line_x + self.advance) > GAP * self.font_size {
            self.space();
        }
        (self.line_x, self.baseline, self.advance) = (x, baseline, 0.0);
    }

    fn next_line(&mut self) {
        self.line_break();
        self.advance = 0.0;
    }

    fn line_break(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
    }

    fn space(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with(char::is_whitespace) {
            self.text.push(' ');
        }
    }

    /// Appends a string operand's characters and advances past them (nothing when the font's
    /// encoding is unknown or the bytes do not decode).
    fn show(&mut self, operand: Option<&Object>) {
        let (Some((encoding, widths)), Some(Object::String(bytes, _))) = (self.font, operand) else {
            return;
        };
        let Ok(mut decoded) = encoding.bytes_to_string(bytes) else {
            return;
        };
        if decoded.contains(|character| ('\u{FB00}'..='\u{FB06}').contains(&character)) {
            decoded = decoded.chars().map(ligature_letters).collect();
        }
        self.advance += match widths {
            Some((first, widths)) => bytes
                .iter()
                .map(|&code| {
                    let width = u32::from(code).checked_sub(*first).and_then(|index| widths.get(index as usize));
                    let word = if code == b' ' { self.word_spacing } else { 0.0 };
                    width.copied().unwrap_or(500.0) / 1000.0 * self.font_size + self.letter_spacing + word
                })
                .sum::<f32>(),
            None => decoded.chars().count() as f32 * (0.5 * self.font_size + self.letter_spacing),
        };
        if self.font_size > 0.0 && self.letter_spacing >= LETTER_SPACED * self.font_size {
            for (index, character) in decoded.chars().enumerate() {
                if index > 0 && !character.is_whitespace() {
                    self.space();
                }
                self.text.push(character);
            }
        } else {
            self.text.push_str(&decoded);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::extract::samples;

    /// The pages and operators visited on this thread since the last call.
    fn take_visited() -> (usize, usize) {
        VISITED.with(|cell| cell.replace((0, 0)))
    }

    fn builder(limits: &ExtractLimits) -> TextBuilder {
        TextBuilder::new(limits.max_text_chars, Instant::now() + limits.time_limit, limits.time_limit)
    }

    /// Issue 57.4: 40 blank pages sharing one large stream ran to their end after the deadline
    /// (nothing was appended, so nothing checked it): now no page is visited past it.
    #[test]
    fn the_page_loop_stops_at_the_deadline() {
        let pdf = samples::pdf_from_content_streams(vec![b"q Q ".repeat(50_000)], &[0; 40]);
        let limits = ExtractLimits { time_limit: Duration::from_secs(600), ..ExtractLimits::default() };
        take_visited();
        assert_eq!(extract(&pdf, &limits, builder(&limits)).map(|_| ()), Err(ExtractError::NoText));
        assert_eq!(take_visited(), (40, 40 * 100_000), "every page and operator without a deadline");
        let expired = ExtractLimits { time_limit: Duration::ZERO, ..limits };
        let error = extract(&pdf, &expired, builder(&expired)).map(|_| ()).expect_err("past the deadline");
        assert_eq!(error.code(), "extraction_timeout");
        assert_eq!(take_visited(), (0, 0), "no page visited past the deadline");
    }

    /// Issue 57.4: the walk of one page's operators checks the deadline as it goes.
    #[test]
    fn the_operator_walk_stops_at_the_deadline() {
        let pdf = samples::pdf_from_content_streams(vec![b"q Q ".repeat(500_000)], &[0]);
        let document = Document::load_mem(&pdf).expect("loads");
        let page = *document.get_pages().values().next().expect("a page");
        let limits = ExtractLimits::default();
        take_visited();
        let text = page_text(&document, page, &limits, &builder(&limits)).expect("in time");
        assert_eq!((text.as_str(), take_visited()), ("", (0, 1_000_000)));
        let expired = ExtractLimits { time_limit: Duration::ZERO, ..limits };
        let error = page_text(&document, page, &expired, &builder(&expired)).expect_err("past the deadline");
        assert_eq!(error.code(), "extraction_timeout");
        assert!(take_visited().1 <= CHECK_EVERY, "the walk went on past the deadline");
    }
}
