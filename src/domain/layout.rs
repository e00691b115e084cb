//! The layout map of an extracted document: which pages and which heading path each range of
//! its text comes from, and the `location` a citation derives from it.
//!
//! Invariants: every span is `[start, end)` in characters (Unicode scalar values) of the
//! document text, `start < end`; page spans are sorted, disjoint and number pages from 1;
//! section spans are sorted and disjoint, each with a non-empty heading path (outermost heading
//! first). A [`Layout`] restricted to a chunk ([`Layout::restrict`]) keeps document offsets, so
//! a quote's offsets (`quote_start`/`quote_end`) locate it without conversion.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One page's range of the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSpan {
    /// Page number, from 1.
    pub page: u32,
    /// First character of the page's text.
    pub start: usize,
    /// One past its last character.
    pub end: usize,
}

/// One section's range of the text: from its heading to the next heading.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionSpan {
    /// Heading path, outermost first (`["Travel", "Hotels"]`). Shared, not copied, by every
    /// chunk's restricted map ([`Layout::restrict`]); serialized as a plain list.
    pub path: Arc<[String]>,
    /// First character (the heading's).
    pub start: usize,
    /// One past the section's last character.
    pub end: usize,
}

/// Pages and sections of a text (either may be empty: a web page has no pages, a PDF no
/// headings).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Page ranges in text order.
    pub pages: Vec<PageSpan>,
    /// Section ranges in text order.
    pub sections: Vec<SectionSpan>,
}

/// Where a span of a document is, as a reader follows it: the wire `location` of citations and
/// retrieved chunks. Fields are present when known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Page the span starts on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// Every page the span touches, ascending.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pages: Vec<u32>,
    /// Heading path of the section the span starts in, outermost first.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub section: Vec<String>,
}

impl Location {
    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.page.is_none() && self.pages.is_empty() && self.section.is_empty()
    }
}

fn overlaps(span_start: usize, span_end: usize, start: usize, end: usize) -> bool {
    // An empty range (a point) overlaps the span it lies in.
    if start == end { span_start <= start && start < span_end } else { span_start < end && start < span_end }
}

impl Layout {
    /// Whether the map knows nothing.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty() && self.sections.is_empty()
    }

    /// The part of the map overlapping `[start, end)` (offsets unchanged); heading paths are
    /// shared with `self`, not copied.
    pub fn restrict(&self, start: usize, end: usize) -> Layout {
        Layout {
            pages: self.pages.iter().filter(|span| overlaps(span.start, span.end, start, end)).cloned().collect(),
            sections: self.sections.iter().filter(|span| overlaps(span.start, span.end, start, end)).cloned().collect(),
        }
    }

    /// Where `[start, end)` is: the page and section it starts in (or, starting between spans,
    /// the first one after), and every page it touches.
    pub fn locate(&self, start: usize, end: usize) -> Location {
        let pages: Vec<u32> =
            self.pages.iter().filter(|span| overlaps(span.start, span.end, start, end)).map(|span| span.page).collect();
        let section = self
            .sections
            .iter()
            .find(|span| span.start <= start && start < span.end)
            .or_else(|| self.sections.iter().find(|span| overlaps(span.start, span.end, start, end)))
            .map(|span| span.path.to_vec())
            .unwrap_or_default();
        Location { page: pages.first().copied(), pages, section }
    }

    /// Starts of the top-level sections after the first (where the outermost heading changes):
    /// the places a chunk does not cross when it need not.
    pub fn top_level_boundaries(&self) -> Vec<usize> {
        let mut boundaries = Vec::new();
        let mut previous: Option<&str> = None;
        for span in &self.sections {
            let top = span.path.first().map(String::as_str);
            if previous.is_some() && top != previous {
                boundaries.push(span.start);
            }
            previous = top;
        }
        boundaries
    }

    /// Checks the invariants against a text of `length` characters; the reason when broken.
    pub fn check(&self, length: usize) -> Result<(), String> {
        let mut previous_end = 0;
        for span in &self.pages {
            if span.page == 0 || span.start >= span.end || span.end > length || span.start < previous_end {
                return Err(format!(
                    "page span {}..{} of page {} is out of order or range",
                    span.start, span.end, span.page
                ));
            }
            previous_end = span.end;
        }
        previous_end = 0;
        for span in &self.sections {
            if span.path.is_empty() || span.start >= span.end || span.end > length || span.start < previous_end {
                return Err(format!("section span {}..{} is out of order or range", span.start, span.end));
            }
            previous_end = span.end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            pages: vec![
                PageSpan { page: 1, start: 0, end: 10 },
                PageSpan { page: 2, start: 12, end: 20 },
                PageSpan { page: 3, start: 22, end: 30 },
            ],
            sections: vec![
                SectionSpan { path: ["Travel".to_owned()].into(), start: 0, end: 15 },
                SectionSpan { path: ["Travel".to_owned(), "Hotels".to_owned()].into(), start: 15, end: 25 },
                SectionSpan { path: ["Expenses".to_owned()].into(), start: 25, end: 30 },
            ],
        }
    }

    #[test]
    fn a_span_over_two_pages_names_both_and_starts_on_the_first() {
        let location = layout().locate(16, 24);
        assert_eq!(location.page, Some(2));
        assert_eq!(location.pages, vec![2, 3]);
        assert_eq!(location.section, vec!["Travel".to_owned(), "Hotels".to_owned()]);
    }

    #[test]
    fn a_span_between_pages_takes_the_next_page() {
        let location = layout().locate(10, 13);
        assert_eq!(location.page, Some(2));
        assert_eq!(location.pages, vec![2]);
    }

    #[test]
    fn restricting_keeps_document_offsets() {
        let restricted = layout().restrict(16, 24);
        assert_eq!(restricted.pages.len(), 2);
        assert_eq!(restricted.locate(23, 24).page, Some(3));
        assert_eq!(layout().top_level_boundaries(), vec![25]);
        assert!(layout().check(30).is_ok());
        assert!(layout().check(29).is_err());
    }

    #[test]
    fn an_empty_location_serializes_without_fields() {
        assert_eq!(serde_json::to_string(&Location::default()).unwrap(), "{}");
        let location = layout().locate(26, 27);
        assert_eq!(serde_json::to_string(&location).unwrap(), r#"{"page":3,"pages":[3],"section":["Expenses"]}"#);
    }
}
