//! PDF: the text of each page in page order as paragraphs (lopdf: a pure-Rust parser that
//! decodes content streams and the standard font encodings, bounds stream decompression and
//! object nesting), one page span per page. Encrypted files are refused unless they open with
//! the empty user password (protected only by an owner password: readers open them without
//! asking); a page whose content does not decode is skipped, and a file where no page decodes
//! is malformed.
//!
//! The page's operators are walked here ([`walk`]) rather than by lopdf's own text extraction,
//! which knows no positions: a producer that sets a whole page in one text object (pdfTeX,
//! ghostscript) came out as one run-on line. The walk places every piece of text on the page;
//! [`layout`] reads the pieces as a reader does (columns in order, lines, paragraphs), and this
//! module removes running headers and footers and writes the paragraphs. Issue 60 found the
//! sentence splitter (a sentence ends at a newline) making every PDF line a sentence, so
//! answers quoted "The Halvard plant shipped" without its figure; now:
//!
//! - a paragraph is one line of text, paragraphs a blank line apart; a word hyphenated at a
//!   line end is joined whole (`prose::join_line`);
//! - a running header or footer (the same text at the same height, digits aside, at the top or
//!   the bottom of at least three pages, or of both pages of two) is kept once, as the first paragraph of
//!   the first page it is on, when its text is the same everywhere, and dropped when its digits
//!   change (a page number);
//! - a sentence that crosses a page break (the page's last paragraph ends without a terminal
//!   character and the next page's first starts with a lowercase letter) is one sentence: the
//!   pages' spans meet inside it, so each part keeps its own page.
//!
//! Bounds (issue 57): a page's operators are decoded one at a time (`Content::decode_iter`),
//! never collected, and at most `max_operators_per_page` of them are walked (a page of 60 MiB of
//! `q` is 31 million; more is `document_too_large`); the deadline is checked before each page
//! and every [`CHECK_EVERY`] operators, so pages that append no text stop at it too. The text of
//! all pages is held until the last is read (running headers need every page) and counted
//! against `max_text_chars` as the walk makes it.

mod layout;
mod standard_fonts;
mod walk;

use std::collections::HashMap;

use lopdf::content::Content;
use lopdf::{Document, LoadOptions, Object, ObjectId};

use super::{ExtractError, ExtractLimits, ExtractResult, Extracted, TextBuilder, prose};
use layout::Line;
use walk::{Font, Walk};

/// Operators walked between deadline checks.
const CHECK_EVERY: usize = 4096;

/// Lines at the top and at the bottom of a page that may be a running header or footer.
const RUNNING_CANDIDATES: usize = 2;

/// Pages a running header or footer is on, at least (a chapter's running header is on that
/// chapter's pages only); both pages of a document of two.
const RUNNING_PAGES: usize = 3;

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

/// A one-byte font's glyph widths: its `/FirstChar` and `/Widths`, or a standard font's own
/// ([`standard_fonts`]) when it declares none.
fn widths(document: &Document, font: &lopdf::Dictionary) -> Option<(u32, Vec<f32>)> {
    if font.get(b"Subtype").and_then(Object::as_name).is_ok_and(|subtype| subtype == b"Type0") {
        return None;
    }
    if !font.has(b"Widths") {
        let base_font = font.get(b"BaseFont").and_then(Object::as_name).ok()?;
        return standard_fonts::widths(base_font).map(|widths| (32, widths));
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

/// One page as read: its number and its lines in reading order.
struct Page {
    number: u32,
    lines: Vec<Line>,
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
    let page_ids = document.get_pages();
    if page_ids.is_empty() {
        return Err(malformed("no pages"));
    }
    if page_ids.len() > limits.max_pages {
        return Err(ExtractError::TooLarge { what: "pdf", limit: format!("{} pages", limits.max_pages) });
    }
    let mut pages = Vec::with_capacity(page_ids.len());
    let mut chars = 0;
    for (&number, &page_id) in &page_ids {
        builder.check_deadline()?;
        visited(1, 0);
        let budget = limits.max_text_chars.saturating_sub(chars);
        let lines = page_lines(&document, page_id, limits, &builder, budget)?;
        chars += lines.iter().map(|line| line.chars).sum::<usize>();
        pages.push(Page { number, lines });
    }
    if pages.iter().all(|page| page.lines.is_empty()) {
        return Err(ExtractError::NoText);
    }
    write(&mut builder, pages)?;
    builder.finish(page_ids.len())
}

/// A line's text with every run of digits as `#` (page numbers differ from page to page).
fn without_digits(text: &str) -> String {
    let mut key = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_ascii_digit() {
            if !key.ends_with('#') {
                key.push('#');
            }
        } else {
            key.push(character);
        }
    }
    key
}

/// Where a running line is and what it says, digits aside.
type RunningKey = (i64, String);

/// The candidates of a page: the indexes of its top and bottom lines (upright text only).
fn candidates(lines: &[Line]) -> Vec<usize> {
    let mut upright: Vec<usize> = (0..lines.len()).filter(|&index| lines[index].direction == 0).collect();
    upright.sort_by(|&a, &b| lines[b].y.total_cmp(&lines[a].y));
    let mut chosen: Vec<usize> = upright.iter().take(RUNNING_CANDIDATES).copied().collect();
    chosen.extend(upright.iter().rev().take(RUNNING_CANDIDATES));
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

fn running_key(line: &Line) -> RunningKey {
    ((line.y / 2.0).round() as i64, without_digits(&line.text))
}

/// The candidates of a page that are running lines, found on how many pages each key is and
/// whether its text varies (digits) from page to page.
fn running_lines(pages: &[Page]) -> HashMap<RunningKey, (usize, String, bool)> {
    let mut seen: HashMap<RunningKey, (usize, String, bool)> = HashMap::new();
    for page in pages {
        let mut keys: Vec<RunningKey> = Vec::new();
        for index in candidates(&page.lines) {
            let line = &page.lines[index];
            let key = running_key(line);
            if keys.contains(&key) {
                continue;
            }
            keys.push(key.clone());
            let entry = seen.entry(key).or_insert_with(|| (0, line.text.clone(), false));
            entry.0 += 1;
            entry.2 |= entry.1 != line.text;
        }
    }
    // A document of two pages has its running lines on both.
    let least = RUNNING_PAGES.min(pages.len().max(2));
    seen.retain(|_, (count, _, _)| *count >= least);
    seen
}

/// The end of `paragraph` as it runs on into `next` (joined as lines are): followed by a space,
/// or without the hyphen of a word broken there.
fn run_on<'a>(paragraph: &'a str, next: &str) -> std::borrow::Cow<'a, str> {
    // Joining looks at the paragraph's last two characters only.
    let tail = paragraph.char_indices().rev().nth(1).map_or(0, |(at, _)| at);
    let mut joined = paragraph[tail..].to_owned();
    prose::join_line(&mut joined, next);
    let next = next.trim();
    if joined.ends_with(next) {
        joined.truncate(joined.len() - next.len());
    }
    if joined == paragraph[tail..] {
        return std::borrow::Cow::Borrowed(paragraph);
    }
    std::borrow::Cow::Owned(format!("{}{joined}", &paragraph[..tail]))
}

/// Writes the pages: running headers and footers out of the body, paragraphs a blank line
/// apart, a sentence that crosses a page break joined across it.
fn write(builder: &mut TextBuilder, pages: Vec<Page>) -> ExtractResult<()> {
    let running = running_lines(&pages);
    let mut kept: Vec<RunningKey> = Vec::new();
    // Per page: its number, the running lines kept on it, its paragraphs.
    let mut read: Vec<(u32, Vec<String>, Vec<String>)> = Vec::with_capacity(pages.len());
    for page in pages {
        let candidates = candidates(&page.lines);
        let mut headers = Vec::new();
        let mut body = Vec::with_capacity(page.lines.len());
        for (index, line) in page.lines.into_iter().enumerate() {
            if candidates.contains(&index) {
                let key = running_key(&line);
                if let Some((_, _, varies)) = running.get(&key) {
                    if !varies && !kept.contains(&key) {
                        headers.push(line.text);
                        kept.push(key);
                    }
                    continue;
                }
            }
            body.push(line);
        }
        read.push((page.number, headers, layout::paragraphs(&body)));
    }
    // Whether page `index`'s last paragraph runs on into the next page's first.
    let joins: Vec<bool> = (0..read.len())
        .map(|index| {
            let (number, _, paragraphs) = &read[index];
            read.get(index + 1).is_some_and(|(next_number, next_headers, next_paragraphs)| {
                *next_number == number + 1
                    && next_headers.is_empty()
                    && paragraphs
                        .last()
                        .zip(next_paragraphs.first())
                        .is_some_and(|(last, first)| prose::continues(last, first))
            })
        })
        .collect();
    for (index, (number, headers, paragraphs)) in read.iter().enumerate() {
        if index > 0 && joins[index - 1] {
            builder.start_page_joined(*number);
        } else {
            builder.start_page(*number)?;
        }
        // The page's text at once: its kept running lines, then its paragraphs, a blank line
        // apart; the last one run on into the next page's first when the sentence goes on.
        let size = headers.iter().chain(paragraphs).map(|text| text.len() + 2).sum();
        let mut text = String::with_capacity(size);
        for (position, paragraph) in headers.iter().chain(paragraphs).enumerate() {
            if position > 0 {
                text.push_str("\n\n");
            }
            if position + 1 == headers.len() + paragraphs.len() && joins[index] {
                let next = read[index + 1].2.first().map(String::as_str).unwrap_or_default();
                text.push_str(&run_on(paragraph, next));
            } else {
                text.push_str(paragraph);
            }
        }
        builder.push_raw(&text)?;
    }
    Ok(())
}

/// One page's lines in reading order; none when its fonts or content do not decode (the page
/// is skipped; a content stream that stops parsing keeps the text before the fault), an error
/// when a stream decompresses past the limit, the page holds more than `max_operators_per_page`
/// operators, its text passes `budget` characters, or the deadline passes. The operators are
/// decoded one at a time, never held all at once.
fn page_lines(
    document: &Document,
    page_id: ObjectId,
    limits: &ExtractLimits,
    builder: &TextBuilder,
    budget: usize,
) -> ExtractResult<Vec<Line>> {
    let max = limits.max_unpacked_bytes;
    let Ok(fonts) = document.get_page_fonts(page_id) else {
        return Ok(Vec::new());
    };
    let mut decoded: Vec<(Vec<u8>, Font)> = Vec::new();
    for (name, font) in fonts {
        match font.get_font_encoding_with_limit(document, max) {
            Ok(encoding) => decoded.push((name, (encoding, widths(document, font)))),
            Err(lopdf::Error::Decompress(_)) => return Err(too_large(limits)),
            Err(_) => {}
        }
    }
    decoded.sort_by(|a, b| a.0.cmp(&b.0));
    let content = match document.get_page_content_with_limit(page_id, max) {
        Ok(content) => content,
        Err(lopdf::Error::Decompress(_)) => return Err(too_large(limits)),
        Err(_) => return Ok(Vec::new()),
    };
    let mut walk = Walk::new(&decoded, budget, limits.max_text_chars);
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
        walk.apply(&operation.operator, &operation.operands)?;
    }
    Ok(layout::lines(&walk.finish()))
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
        let lines = page_lines(&document, page, &limits, &builder(&limits), limits.max_text_chars).expect("in time");
        assert_eq!((lines.len(), take_visited()), (0, (0, 1_000_000)));
        let expired = ExtractLimits { time_limit: Duration::ZERO, ..limits };
        let error = page_lines(&document, page, &expired, &builder(&expired), limits.max_text_chars)
            .expect_err("past the deadline");
        assert_eq!(error.code(), "extraction_timeout");
        assert!(take_visited().1 <= CHECK_EVERY, "the walk went on past the deadline");
    }
}
