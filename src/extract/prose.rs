//! Running text from lines: the lines of one paragraph joined with a space (a word hyphenated
//! at a line end joined whole), shared by the PDF layout and hard-wrapped plain text. A
//! sentence ends at a newline (`domain::sentences`), so a paragraph must not hold one: issue 60
//! found PDF answers quoting single lines ("The Halvard plant shipped") for that reason.
//!
//! Invariants: joining only removes line ends (a line end inside a URL without a space), a
//! hyphen at a line end between two lowercase letters, and the indentation of continuation
//! lines; it never reorders or adds words.

/// Characters that end a sentence or a clause at a paragraph's end.
const TERMINAL: [char; 8] = ['.', '!', '?', ':', ';', '。', '！', '？'];

/// Closing quotes and brackets that may follow a terminal character.
const CLOSERS: [char; 7] = ['"', '\'', ')', ']', '»', '”', '’'];

/// Hyphens that may end a line: the hyphen-minus and U+2010 (a soft hyphen is always removed).
const HYPHENS: [char; 2] = ['-', '\u{2010}'];

/// Appends `line` to `paragraph`: after a space, or without one after a hyphen. A hyphen
/// between a lowercase letter and a lowercase letter is a word broken at the line end and is
/// removed ("recali-" "bration": "recalibration"); before a capital or a digit it is part of the
/// word ("Jean-Paul", "2019-2020"). A soft hyphen (U+00AD) at the end is always removed.
pub(crate) fn join_line(paragraph: &mut String, line: &str) {
    let line = line.trim();
    if line.is_empty() {
        return;
    }
    if paragraph.is_empty() {
        paragraph.push_str(line);
        return;
    }
    if url_continues(paragraph) {
        paragraph.push_str(line);
        return;
    }
    let next = line.chars().next();
    if paragraph.ends_with('\u{AD}') {
        paragraph.pop();
        paragraph.push_str(line);
        return;
    }
    let mut tail = paragraph.chars().rev();
    if let (Some(last), Some(before)) = (tail.next(), tail.next())
        && HYPHENS.contains(&last)
        && before.is_alphanumeric()
    {
        if before.is_lowercase() && next.is_some_and(char::is_lowercase) {
            paragraph.pop();
        }
        paragraph.push_str(line);
        return;
    }
    paragraph.push(' ');
    paragraph.push_str(line);
}

/// Whether `paragraph` ends inside a URL that goes on at the next line (pdfTeX breaks a URL at
/// a line end without a hyphen): its last word is a URL that ends with its scheme's `://`, or
/// one that a bracket opened, not closed yet, and that ends with `/`, `.`, `-`, `_`, `=`, `?`,
/// `&` or `#`. A URL outside brackets ending with `/` may be whole: its line end stays a space.
fn url_continues(paragraph: &str) -> bool {
    let Some(word) = paragraph.rsplit(char::is_whitespace).next() else {
        return false;
    };
    let (bracketed, url) = match word.strip_prefix(['(', '<', '[']) {
        Some(url) => (true, url),
        None => (false, word),
    };
    url.contains("://")
        && (url.ends_with("://")
            || (bracketed && !url.contains([')', '>', ']']) && url.ends_with(['/', '.', '-', '_', '=', '?', '&', '#'])))
}

/// Whether the text `after` continues the sentence `before` ends with: `before` ends without a
/// terminal character and `after` starts with a lowercase letter (a sentence that crosses a
/// page break or a column end).
pub(crate) fn continues(before: &str, after: &str) -> bool {
    let ending = before.trim_end().trim_end_matches(CLOSERS);
    let Some(last) = ending.chars().next_back() else {
        return false;
    };
    !TERMINAL.contains(&last) && after.trim_start().chars().next().is_some_and(char::is_lowercase)
}

/// Whether `line` (without its indentation) starts as a list item does: a bullet, or a number or
/// letter of at most three characters followed by `.` or `)`, then a space.
pub(crate) fn starts_item(line: &str) -> bool {
    let line = line.trim_start();
    let mut characters = line.chars();
    match characters.next() {
        Some('•' | '◦' | '▪' | '‣' | '●' | '○' | '■' | '–' | '—' | '-' | '*' | '>') => {
            characters.next().is_none_or(char::is_whitespace)
        }
        Some(_) => {
            let (marker, rest) = line.split_once(' ').unwrap_or((line, ""));
            let label = marker.trim_end_matches(['.', ')']);
            !rest.is_empty()
                && marker.len() > label.len()
                && (1..=3).contains(&label.chars().count())
                && label.chars().all(char::is_alphanumeric)
                && (label.chars().all(|character| character.is_ascii_digit()) || label.chars().count() == 1)
        }
        None => false,
    }
}

/// Longest line, in characters, of a text that counts as hard-wrapped (e-mail, RFCs: 72 to 80).
const WRAPPED_AT_MOST: usize = 100;

/// Shortest longest line of a hard-wrapped text: below it, lines are short by nature (a list, a
/// poem, an address) rather than wrapped.
const WRAPPED_AT_LEAST: usize = 40;

/// Hard-wrapped plain text with the lines of each prose paragraph joined ([`join_line`]); any
/// other text unchanged. The text counts as hard-wrapped when its longest line has 40 to 100
/// characters; a paragraph (lines between blank lines) counts as prose when it has two lines or
/// more, all at the same indentation, none a list item, none aligned with runs of spaces (two
/// spaces only after a sentence's end) or tabs, and every line but its last at least 60% of the
/// longest line (a shorter one was broken on purpose: an address, a signature, a verse).
pub(crate) fn unwrap_plain(text: &str) -> String {
    let longest = text.lines().map(|line| line.chars().count()).max().unwrap_or(0);
    if !(WRAPPED_AT_LEAST..=WRAPPED_AT_MOST).contains(&longest) {
        return text.to_owned();
    }
    let mut out: Vec<String> = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        if line.trim().is_empty() {
            flush(&mut out, &mut block, longest);
            out.push(line.to_owned());
        } else {
            block.push(line);
        }
    }
    flush(&mut out, &mut block, longest);
    out.join("\n")
}

/// Writes the paragraph `block` to `out` as lines: one, joined, when it is prose.
fn flush(out: &mut Vec<String>, block: &mut Vec<&str>, longest: usize) {
    if block.is_empty() {
        return;
    }
    let indentation = |line: &str| line.len() - line.trim_start().len();
    let first = block[0];
    let aligned = |line: &str| {
        let body = line.trim();
        body.contains('\t')
            || body.match_indices("  ").any(|(at, _)| !body[..at].ends_with(TERMINAL) && !body[..at].ends_with(CLOSERS))
    };
    let prose = block.len() >= 2
        && block.iter().all(|line| line[..indentation(line)] == first[..indentation(first)])
        && !block.iter().any(|line| starts_item(line) || aligned(line))
        && block[..block.len() - 1].iter().all(|line| line.chars().count() * 10 >= longest * 6);
    if prose {
        let mut paragraph = first[..indentation(first)].to_owned();
        let mut joined = String::new();
        for line in block.iter() {
            join_line(&mut joined, line);
        }
        paragraph.push_str(&joined);
        out.push(paragraph);
    } else {
        out.extend(block.iter().map(|line| (*line).to_owned()));
    }
    block.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(lines: &[&str]) -> String {
        let mut paragraph = String::new();
        for line in lines {
            join_line(&mut paragraph, line);
        }
        paragraph
    }

    #[test]
    fn lines_join_with_a_space_and_hyphenated_words_join_whole() {
        assert_eq!(
            joined(&["The Halvard plant shipped", "5,812 turbines in 2031."]),
            "The Halvard plant shipped 5,812 turbines in 2031."
        );
        assert_eq!(joined(&["an annual recali-", "bration"]), "an annual recalibration");
        assert_eq!(joined(&["engineer Jean-", "Paul Martin"]), "engineer Jean-Paul Martin");
        assert_eq!(joined(&["the years 2019-", "2020 and"]), "the years 2019-2020 and");
        assert_eq!(joined(&["a dash -", "then more"]), "a dash - then more");
        assert_eq!(joined(&["soft\u{AD}", "ware"]), "software");
        assert_eq!(joined(&["", "  indented  ", "x"]), "indented x");
    }

    /// Issue 60: pdfTeX breaks a URL at a line end without a hyphen, and the joined paragraph
    /// read "(https:// CRAN.R-project.org/package=survival)" and "(https://www. gnu.org/)" (23
    /// URLs cut so in three R manuals). A line end inside a URL (after its scheme's `://`, or
    /// inside a bracket the URL opened) is removed without a space; a URL that may be whole at
    /// the line end keeps its space.
    #[test]
    fn a_url_broken_at_a_line_end_is_joined_without_a_space() {
        assert_eq!(
            joined(&["use package survival (https://", "CRAN.R-project.org/package=survival) in S"]),
            "use package survival (https://CRAN.R-project.org/package=survival) in S"
        );
        assert_eq!(
            joined(&["the licence (https://www.", "gnu.org/) applies"]),
            "the licence (https://www.gnu.org/) applies"
        );
        assert_eq!(
            joined(&["(https://CRAN.R-project.org/bin/windows/base/", "rw-FAQ.html)"]),
            "(https://CRAN.R-project.org/bin/windows/base/rw-FAQ.html)"
        );
        assert_eq!(joined(&["(https://www.r-", "project.org)"]), "(https://www.r-project.org)");
        assert_eq!(
            joined(&["available from https://example.org/", "for everyone"]),
            "available from https://example.org/ for everyone"
        );
        assert_eq!(joined(&["see (https://example.org/)", "and more"]), "see (https://example.org/) and more");
    }

    #[test]
    fn a_sentence_continues_after_no_terminal_and_before_a_lowercase_letter() {
        assert!(continues("the plant were", "shipped to ports"));
        assert!(continues("annual recali-", "bration"));
        assert!(!continues("the end.", "and more"));
        assert!(!continues("He said \"stop.\"", "then"));
        assert!(!continues("a heading", "The next"));
        assert!(!continues("", "lower"));
    }

    #[test]
    fn list_items_are_recognized() {
        for item in ["• first", "- second", "1. third", "12) fourth", "a. fifth", "* sixth"] {
            assert!(starts_item(item), "{item}");
        }
        for prose in ["The end.", "A.B. Smith wrote", "-5 degrees", "2031 was a year", "Mr. Smith"] {
            assert!(!starts_item(prose), "{prose}");
        }
    }

    #[test]
    fn hard_wrapped_prose_is_unwrapped_and_other_text_is_kept() {
        let mail = "Dear team,\n\nThe Halvard plant shipped 5,812 turbines in 2031, more than in any\nyear before, and the Tessby plant repaired ninety gearboxes during\nthe winter.\n\n   Indented paragraph of an RFC that runs over more than one line\n   and ends here.\n\n1. a list item that is long enough to be like the others in width\n2. another item\n\nName  Value\nHalvard  5812\n";
        assert_eq!(
            unwrap_plain(mail),
            "Dear team,\n\nThe Halvard plant shipped 5,812 turbines in 2031, more than in any year before, and the Tessby plant repaired ninety gearboxes during the winter.\n\n   Indented paragraph of an RFC that runs over more than one line and ends here.\n\n1. a list item that is long enough to be like the others in width\n2. another item\n\nName  Value\nHalvard  5812\n"
        );
        // Short lines by nature, and text that is not hard-wrapped, stay as they are.
        assert_eq!(unwrap_plain("Line one.\nLine two."), "Line one.\nLine two.");
        let address = "Halvard Turbines Ltd, attention of the chief engineer of the plant\nHarbour Road 12\nTessby";
        assert_eq!(unwrap_plain(address), address);
        let long = format!("{}\n{}", "word ".repeat(40), "word ".repeat(40));
        assert_eq!(unwrap_plain(&long), long);
    }
}
