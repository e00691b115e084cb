//! DOCX (Office Open XML): `word/document.xml` read out of the zip (the `zip` crate, already the
//! console's; decompression stops at `max_unpacked_bytes`, whatever the archive declares) and
//! streamed with quick-xml. Paragraphs become lines; a paragraph styled `Heading N` or `Title`
//! opens a section; a table becomes one line per row, cells separated by ` | `. Nesting costs
//! nothing: only the current paragraph's state is kept.

use std::io::{Cursor, Read};

use quick_xml::events::Event;

use super::{ExtractError, ExtractLimits, ExtractResult, Extracted, TextBuilder};

fn malformed(reason: impl std::fmt::Display) -> ExtractError {
    let reason: String = reason.to_string().chars().take(200).collect();
    ExtractError::Malformed { format: "docx", reason }
}

/// The entry `name` of the archive, at most `limit` bytes once decompressed.
fn read_entry(bytes: &[u8], name: &str, limit: usize) -> ExtractResult<String> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(malformed)?;
    let entry =
        archive.by_name(name).map_err(|_| malformed(format!("no {name} in the archive (not a word document)")))?;
    let too_large = || ExtractError::TooLarge { what: "docx content", limit: format!("{limit} bytes decompressed") };
    if entry.size() > limit as u64 {
        return Err(too_large());
    }
    let mut xml = Vec::new();
    entry.take(limit as u64 + 1).read_to_end(&mut xml).map_err(malformed)?;
    if xml.len() > limit {
        return Err(too_large());
    }
    String::from_utf8(xml).map_err(|error| malformed(format!("{name} is not utf-8: {error}")))
}

/// A heading level from a paragraph style id (`Heading1`, `heading 2`, `Title`).
fn heading_level(style: &str) -> Option<u8> {
    let lower = style.to_ascii_lowercase().replace(' ', "");
    if lower == "title" {
        return Some(1);
    }
    let level: u8 = lower.strip_prefix("heading")?.parse().ok()?;
    (1..=9).contains(&level).then_some(level)
}

/// The paragraph being read.
#[derive(Default)]
struct Paragraph {
    text: String,
    heading: Option<u8>,
}

/// Predefined XML entities.
fn entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

pub(super) fn extract(bytes: &[u8], limits: &ExtractLimits, mut builder: TextBuilder) -> ExtractResult<Extracted> {
    let xml = read_entry(bytes, "word/document.xml", limits.max_unpacked_bytes)?;
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut paragraph: Option<Paragraph> = None;
    // Cells of the innermost open table row, and how deep tables nest.
    let mut row: Option<Vec<String>> = None;
    let mut table_depth = 0usize;
    let mut in_text = false;
    loop {
        let event = reader.read_event().map_err(malformed)?;
        match event {
            Event::Start(ref element) | Event::Empty(ref element) => {
                let empty = matches!(event, Event::Empty(_));
                match element.local_name().as_ref() {
                    "p" if !empty => paragraph = Some(Paragraph::default()),
                    "pStyle" => {
                        let style = element
                            .attributes()
                            .flatten()
                            .find(|attribute| attribute.key.local_name().as_ref() == "val")
                            .map(|attribute| attribute.value.into_owned());
                        if let (Some(open), Some(style)) = (paragraph.as_mut(), style) {
                            open.heading = heading_level(&style);
                        }
                    }
                    "t" if !empty => in_text = true,
                    "tab" => push_to(&mut paragraph, "\t"),
                    "br" | "cr" => push_to(&mut paragraph, "\n"),
                    "tbl" if !empty => table_depth += 1,
                    "tr" if !empty => row = Some(Vec::new()),
                    "tc" if !empty => {
                        if let Some(cells) = row.as_mut() {
                            cells.push(String::new());
                        }
                    }
                    _ => {}
                }
            }
            Event::Text(text) if in_text => push_to(&mut paragraph, &text.xml10_content()),
            Event::GeneralRef(reference) if in_text => {
                let character = match reference.resolve_char_ref().map_err(malformed)? {
                    Some(character) => Some(character),
                    None => entity(&reference.xml10_content()),
                };
                if let Some(character) = character {
                    push_to(&mut paragraph, character.encode_utf8(&mut [0; 4]));
                }
            }
            Event::CData(data) if in_text => push_to(&mut paragraph, &data),
            Event::End(element) => match element.local_name().as_ref() {
                "t" => in_text = false,
                "p" => {
                    let Some(done) = paragraph.take() else { continue };
                    if let Some(cells) = row.as_mut() {
                        let cell = cells.last_mut();
                        if let Some(cell) = cell {
                            if !cell.is_empty() && !done.text.trim().is_empty() {
                                cell.push(' ');
                            }
                            cell.push_str(done.text.trim());
                        }
                    } else if let Some(level) = done.heading {
                        builder.heading(level, &done.text)?;
                    } else {
                        builder.push_inline(&done.text)?;
                        builder.paragraph_break()?;
                    }
                }
                "tr" => {
                    if let Some(cells) = row.take() {
                        let line: Vec<&str> =
                            cells.iter().map(String::as_str).filter(|cell| !cell.is_empty()).collect();
                        builder.push_inline(&line.join(" | "))?;
                        builder.line_break()?;
                    }
                }
                "tbl" => {
                    table_depth = table_depth.saturating_sub(1);
                    if table_depth == 0 {
                        builder.paragraph_break()?;
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    builder.finish(0)
}

fn push_to(paragraph: &mut Option<Paragraph>, text: &str) {
    if let Some(open) = paragraph.as_mut() {
        open.text.push_str(text);
    }
}
