//! The text and layout map under construction, shared by every format: text is appended in
//! reading order, headings open sections, pages open page spans; offsets are counted in
//! characters as they are appended, so the map always indexes the text returned.

use std::time::{Duration, Instant};

use crate::domain::{Layout, PageSpan, SectionSpan};

use super::{ExtractError, ExtractResult, Extracted};

/// Appends between deadline checks.
const CHECK_EVERY: u32 = 1024;

/// Text, offsets and the open spans of an extraction.
pub(crate) struct TextBuilder {
    text: String,
    chars: usize,
    max_chars: usize,
    deadline: Instant,
    time_limit: Duration,
    appends: u32,
    /// Open headings: (level, title), outermost first.
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
        if self.chars + count > self.max_chars {
            return Err(ExtractError::TooLarge {
                what: "extracted text",
                limit: format!("{} characters", self.max_chars),
            });
        }
        self.text.push_str(piece);
        self.chars += count;
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

    /// Opens a section under a heading of `level` (1 outermost) titled `title` and writes the
    /// heading as its own paragraph. An empty title opens nothing.
    pub(crate) fn heading(&mut self, level: u8, title: &str) -> ExtractResult<()> {
        let title: String = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if title.is_empty() {
            return Ok(());
        }
        self.paragraph_break()?;
        self.close_section();
        self.headings.retain(|(open, _)| *open < level);
        self.headings.push((level, title.clone()));
        let path = self.headings.iter().map(|(_, name)| name.clone()).collect();
        self.sections.push(SectionSpan { path, start: self.chars, end: usize::MAX });
        self.append(&title)?;
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
        Ok(Extracted { text: self.text, layout: Layout { pages, sections }, page_count })
    }

    /// [`ExtractError::TimedOut`] once the deadline has passed: for work that appends nothing
    /// (a PDF page's operators, blank pages), which the check in `append` never reaches.
    pub(crate) fn check_deadline(&self) -> ExtractResult<()> {
        if Instant::now() >= self.deadline {
            return Err(ExtractError::TimedOut { milliseconds: self.time_limit.as_millis() as u64 });
        }
        Ok(())
    }
}
