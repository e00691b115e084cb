//! The text and layout map under construction, shared by every format: text is appended in
//! reading order, headings open sections, pages open page spans; offsets are counted in
//! characters as they are appended, so the map always indexes the text returned.
//!
//! Invariants (issue 57: a 34 KB DOCX of long titles and 120,000 deep headings aborted the
//! server, each heading copying the whole open path): a heading title is at most
//! [`MAX_TITLE_CHARS`] characters, a path at most [`MAX_HEADING_DEPTH`] headings deep, and the
//! characters of every section's path count against the same `max_chars` budget as the text, so
//! the whole layout map is bounded by the text limit whatever the file's shape.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::domain::{Layout, PageSpan, SectionSpan};

use super::{ExtractError, ExtractResult, Extracted};

/// Appends between deadline checks.
const CHECK_EVERY: u32 = 1024;

/// Longest heading title kept in a section path, in characters (a longer one is cut, with `…`;
/// the heading's text in the document stays whole).
pub(crate) const MAX_TITLE_CHARS: usize = 200;

/// Deepest heading path: a heading of a lower level counts as this level (DOCX has nine).
pub(crate) const MAX_HEADING_DEPTH: u8 = 9;

/// A heading's text as written into the document: whitespace collapsed, permalink glyphs
/// removed (`¶` of Sphinx and MkDocs, `🔗`, and the private-use icon-font glyphs such as
/// U+F0C1).
fn heading_text(heading: &str) -> String {
    let is_glyph = |character: char| matches!(character, '¶' | '🔗' | '\u{E000}'..='\u{F8FF}');
    let words = heading.split_whitespace().map(|word| word.chars().filter(|&character| !is_glyph(character)));
    let mut text = String::new();
    for word in words.map(String::from_iter).filter(|word| !word.is_empty()) {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&word);
    }
    text
}

/// The section name of a heading's text ([`heading_text`]): at most [`MAX_TITLE_CHARS`]
/// characters, a longer one cut and ended with `…`.
fn section_title(text: &str) -> String {
    if text.chars().count() <= MAX_TITLE_CHARS {
        return text.to_owned();
    }
    let mut title: String = text.chars().take(MAX_TITLE_CHARS - 1).collect();
    title.push('…');
    title
}

/// Text, offsets and the open spans of an extraction.
pub(crate) struct TextBuilder {
    text: String,
    chars: usize,
    max_chars: usize,
    deadline: Instant,
    time_limit: Duration,
    appends: u32,
    /// Characters of the section paths made so far (counted against `max_chars`).
    path_chars: usize,
    /// Open headings: (level, section title), outermost first.
    headings: Vec<(u8, String)>,
    sections: Vec<SectionSpan>,
    pages: Vec<PageSpan>,
    /// Whether inline text last ended in whitespace (collapsing mode).
    pending_space: bool,
}

impl TextBuilder {
    pub(crate) fn new(max_chars: usize, deadline: Instant, time_limit: Duration) -> Self {
        Self {
            text: String::new(),
            chars: 0,
            max_chars,
            deadline,
            time_limit,
            appends: 0,
            path_chars: 0,
            headings: Vec::new(),
            sections: Vec::new(),
            pages: Vec::new(),
            pending_space: false,
        }
    }

    fn append(&mut self, piece: &str) -> ExtractResult<()> {
        self.appends += 1;
        if self.appends.is_multiple_of(CHECK_EVERY) && Instant::now() > self.deadline {
            return Err(ExtractError::TimedOut { milliseconds: self.time_limit.as_millis() as u64 });
        }
        let count = piece.chars().count();
        self.charge(count)?;
        self.text.push_str(piece);
        self.chars += count;
        Ok(())
    }

    /// Checks that `more` characters still fit the budget of text and section paths.
    fn charge(&self, more: usize) -> ExtractResult<()> {
        if self.chars + self.path_chars + more > self.max_chars {
            return Err(ExtractError::TooLarge {
                what: if self.path_chars == 0 { "extracted text" } else { "extracted text with its heading paths" },
                limit: format!("{} characters", self.max_chars),
            });
        }
        Ok(())
    }

    /// Appends `piece` as it is (preformatted text, plain text, a PDF page).
    pub(crate) fn push_raw(&mut self, piece: &str) -> ExtractResult<()> {
        self.pending_space = false;
        let cleaned: String = piece.chars().filter(|&character| character != '\0' && character != '\r').collect();
        self.append(&cleaned)
    }

    /// Appends inline text, collapsing runs of ASCII whitespace into one space (as a browser
    /// renders it) and dropping whitespace at the start of a line.
    pub(crate) fn push_inline(&mut self, piece: &str) -> ExtractResult<()> {
        let mut out = String::with_capacity(piece.len());
        let at_line_start = self.text.is_empty() || self.text.ends_with('\n');
        let mut space = self.pending_space && !at_line_start;
        for character in piece.chars() {
            // ASCII whitespace only, as HTML collapses it: a no-break space stays.
            if matches!(character, ' ' | '\t' | '\n' | '\r' | '\x0c' | '\0') {
                space = true;
                continue;
            }
            if space && !(out.is_empty() && (self.text.is_empty() || self.text.ends_with('\n'))) {
                out.push(' ');
            }
            space = false;
            out.push(character);
        }
        self.pending_space = space;
        if out.is_empty() {
            return Ok(());
        }
        self.append(&out)
    }

    /// Ends the current line (no empty lines are made).
    pub(crate) fn line_break(&mut self) -> ExtractResult<()> {
        self.pending_space = false;
        if self.text.is_empty() || self.text.ends_with('\n') {
            return Ok(());
        }
        self.append("\n")
    }

    /// Ends the current block with an empty line.
    pub(crate) fn paragraph_break(&mut self) -> ExtractResult<()> {
        self.line_break()?;
        if self.text.is_empty() || self.text.ends_with("\n\n") {
            return Ok(());
        }
        self.append("\n")
    }

    fn close_section(&mut self) {
        if let Some(open) = self.sections.last_mut()
            && open.end == usize::MAX
        {
            open.end = self.chars;
        }
    }

    /// Opens a section under a heading of `level` (1 outermost; at most
    /// [`MAX_HEADING_DEPTH`]) whose text is `heading`, and writes the heading as its own
    /// paragraph. A heading with no text ([`heading_text`]) opens nothing.
    pub(crate) fn heading(&mut self, level: u8, heading: &str) -> ExtractResult<()> {
        let text = heading_text(heading);
        if text.is_empty() {
            return Ok(());
        }
        let title = section_title(&text);
        let level = level.clamp(1, MAX_HEADING_DEPTH);
        self.paragraph_break()?;
        self.close_section();
        self.headings.retain(|(open, _)| *open < level);
        self.headings.push((level, title));
        let path: Arc<[String]> = self.headings.iter().map(|(_, name)| name.clone()).collect();
        let path_chars: usize = path.iter().map(|name| name.chars().count()).sum();
        self.charge(path_chars)?;
        self.path_chars += path_chars;
        self.sections.push(SectionSpan { path, start: self.chars, end: usize::MAX });
        self.append(&text)?;
        self.paragraph_break()
    }

    /// Starts page `page` (closing the previous one) after a paragraph break.
    pub(crate) fn start_page(&mut self, page: u32) -> ExtractResult<()> {
        self.paragraph_break()?;
        self.end_page();
        self.pages.push(PageSpan { page, start: self.chars, end: usize::MAX });
        Ok(())
    }

    /// Ends the open page, if any.
    pub(crate) fn end_page(&mut self) {
        if let Some(open) = self.pages.last_mut()
            && open.end == usize::MAX
        {
            open.end = self.chars;
        }
    }

    /// The text (trailing whitespace trimmed) and its layout map; [`ExtractError::NoText`] when
    /// nothing but whitespace was found.
    pub(crate) fn finish(mut self, page_count: usize) -> ExtractResult<Extracted> {
        self.end_page();
        self.close_section();
        let trimmed = self.text.trim_end().len();
        let removed = self.text[trimmed..].chars().count();
        self.text.truncate(trimmed);
        let length = self.chars - removed;
        if self.text.trim().is_empty() {
            return Err(ExtractError::NoText);
        }
        let clamp = |end: usize| end.min(length);
        let pages = self
            .pages
            .into_iter()
            .map(|span| PageSpan { end: clamp(span.end), ..span })
            .filter(|span| span.start < span.end)
            .collect();
        let sections = self
            .sections
            .into_iter()
            .map(|span| SectionSpan { end: clamp(span.end), ..span })
            .filter(|span| span.start < span.end)
            .collect();
        Ok(Extracted { text: self.text, layout: Layout { pages, sections }, page_count, title: None })
    }

    /// [`ExtractError::TimedOut`] once the deadline has passed: for work that appends nothing
    /// (a PDF page's operators, blank pages), which the check in `append` never reaches.
    pub(crate) fn check_deadline(&self) -> ExtractResult<()> {
        if Instant::now() >= self.deadline {
            return Err(ExtractError::TimedOut { milliseconds: self.time_limit.as_millis() as u64 });
        }
        Ok(())
    }

    /// Starts page `page` (closing the previous one) where the text stands, without a break:
    /// for a sentence that runs on from the previous page, so each part keeps its own page.
    pub(crate) fn start_page_joined(&mut self, page: u32) {
        self.pending_space = false;
        self.end_page();
        self.pages.push(PageSpan { page, start: self.chars, end: usize::MAX });
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::extract::samples::{Block, docx};
    use crate::extract::{DOCX_TYPE, ExtractLimits, extract};

    fn builder(max_chars: usize) -> TextBuilder {
        TextBuilder::new(max_chars, Instant::now() + Duration::from_secs(60), Duration::from_secs(60))
    }

    fn path_chars(extracted: &Extracted) -> usize {
        extracted.layout.sections.iter().flat_map(|span| span.path.iter()).map(|name| name.chars().count()).sum()
    }

    /// Regression (issue 57): one `<h1>` of 200,000 letters was copied whole into the path of
    /// every chunk below it (a 52.8 MB document read).
    #[test]
    fn a_long_heading_is_cut_in_the_path_and_kept_whole_in_the_text() {
        let mut building = builder(1_000_000);
        let long = "a".repeat(200_000);
        building.heading(1, &long).unwrap();
        building.push_raw("body").unwrap();
        let extracted = building.finish(0).unwrap();
        let title = &extracted.layout.sections[0].path[0];
        assert_eq!(title.chars().count(), MAX_TITLE_CHARS);
        assert!(title.ends_with('…'));
        assert!(extracted.text.starts_with(&long));
    }

    /// Regression (issue 57): every heading copied the whole open path, so a small file of long
    /// titles and many deep headings grew the map without bound before any limit applied.
    #[test]
    fn deep_heading_paths_count_against_the_text_budget() {
        let mut building = builder(100_000);
        for level in 1..=8 {
            building.heading(level, &"t".repeat(1_000)).unwrap();
        }
        let error = (0..2_000).try_for_each(|_| building.heading(9, "x")).unwrap_err();
        assert_eq!(error.code(), "document_too_large");
    }

    #[test]
    fn heading_levels_past_the_deepest_join_it() {
        let mut building = builder(100_000);
        for level in 1..=40 {
            building.heading(level, &format!("level {level}")).unwrap();
        }
        let extracted = building.finish(0).unwrap();
        let deepest = extracted.layout.sections.iter().map(|span| span.path.len()).max().unwrap();
        assert_eq!(deepest, usize::from(MAX_HEADING_DEPTH));
    }

    /// Issue 60: Sphinx and MkDocs end headings with a permalink glyph.
    #[test]
    fn permalink_glyphs_are_not_part_of_a_section_name() {
        let mut building = builder(1_000);
        building.heading(1, "Install¶").unwrap();
        building.heading(2, "Upgrade \u{f0c1}").unwrap();
        building.heading(2, "¶").unwrap();
        let extracted = building.finish(0).unwrap();
        let paths: Vec<Vec<String>> = extracted.layout.sections.iter().map(|span| span.path.to_vec()).collect();
        assert_eq!(paths, vec![vec!["Install".to_owned()], vec!["Install".to_owned(), "Upgrade".to_owned()]]);
        assert_eq!(extracted.text, "Install\n\nUpgrade");
    }

    /// Regression (issue 57): a 34 KB DOCX of 8 titles of 200,000 letters and 120,000
    /// one-letter level-9 headings aborted the server (memory allocation failed).
    #[test]
    fn a_docx_of_long_titles_and_many_deep_headings_is_refused() {
        let mut blocks: Vec<Block> = (1..=8).map(|level| Block::Heading(level, "t".repeat(200_000))).collect();
        blocks.extend((0..120_000).map(|_| Block::Heading(9, "x".into())));
        let error = extract(&docx(&blocks), DOCX_TYPE, &ExtractLimits::default()).unwrap_err();
        assert_eq!(error.code(), "document_too_large");
    }

    proptest! {
        /// Whatever the headings, the text and the section paths together stay within the budget.
        #[test]
        fn the_layout_map_is_bounded_by_the_text_budget(
            headings in proptest::collection::vec((0u8..=20, 0usize..400), 0..200),
        ) {
            let max_chars = 20_000;
            let mut building = builder(max_chars);
            let mut outcome = Ok(());
            for (level, length) in headings {
                outcome = building.heading(level, &"h".repeat(length)).and_then(|()| building.push_raw("body "));
                if outcome.is_err() {
                    break;
                }
            }
            if outcome.is_ok() && let Ok(extracted) = building.finish(0) {
                prop_assert!(extracted.text.chars().count() + path_chars(&extracted) <= max_chars);
                prop_assert!(extracted.layout.check(extracted.text.chars().count()).is_ok());
            }
        }
    }
}
