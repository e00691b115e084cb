//! DOCX (Office Open XML): `word/document.xml` read out of the zip (the `zip` crate, already the
//! console's; decompression stops at `max_unpacked_bytes`, whatever the archive declares) and
//! streamed with quick-xml. Paragraphs become lines; a paragraph styled `Heading N` or `Title`
//! opens a section; a table becomes one line per row, cells separated by ` | `.
//!
//! Text boxes (`w:txbxContent`, anchored in a run of another paragraph) hold paragraphs inside
//! that paragraph: open paragraphs are a stack (at most [`MAX_PARAGRAPH_DEPTH`] deep; deeper ones
//! are read into the innermost kept one, so nesting costs no more than that), the anchoring
//! paragraph keeps all its own text, and each box paragraph comes out once, as its own
//! paragraph, right after the anchoring paragraph (after the whole table when the anchor is in
//! a table cell); a heading style inside a box opens no section. Markup compatibility
//! (`mc:AlternateContent`): the first `mc:Choice` is read, and the other choices and the
//! `mc:Fallback` (Word's VML copy of the same box) are skipped; the fallback is read only when
//! there is no choice.

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

/// Open paragraphs kept on the stack: a paragraph, a text box in it, a paragraph of that box,
/// and so on. Word nests boxes one or two deep; deeper paragraphs are read into the innermost
/// kept one, so a file of a million nested paragraphs holds this many at most.
const MAX_PARAGRAPH_DEPTH: usize = 16;

/// A paragraph being read.
#[derive(Default)]
struct Paragraph {
    text: String,
    heading: Option<u8>,
    /// Blocks (paragraphs, table rows) of the text boxes anchored in this paragraph, in
    /// document order, written after it.
    boxes: Vec<String>,
}

/// The table row being read: its cells, and how many paragraphs were open when it started
/// (0 for a row of the body, more for a row of a table inside a text box).
struct Row {
    cells: Vec<String>,
    depth: usize,
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
    let mut paragraphs: Vec<Paragraph> = Vec::new();
    // Paragraphs opened beyond MAX_PARAGRAPH_DEPTH (read into the innermost kept one).
    let mut too_deep = 0usize;
    let mut row: Option<Row> = None;
    // How deep the body's tables nest (tables inside text boxes are not counted), and the
    // blocks of boxes anchored in their cells, written after the outermost table.
    let mut table_depth = 0usize;
    let mut after_table: Vec<String> = Vec::new();
    // Per open `mc:AlternateContent`: whether one of its choices was read.
    let mut alternates: Vec<bool> = Vec::new();
    let mut in_text = false;
    loop {
        let event = reader.read_event().map_err(malformed)?;
        match event {
            Event::Start(ref element) | Event::Empty(ref element) => {
                let empty = matches!(event, Event::Empty(_));
                match element.local_name().as_ref() {
                    "p" if !empty => {
                        if paragraphs.len() < MAX_PARAGRAPH_DEPTH {
                            paragraphs.push(Paragraph::default());
                        } else {
                            too_deep += 1;
                        }
                    }
                    "pStyle" => {
                        let style = element
                            .attributes()
                            .flatten()
                            .find(|attribute| attribute.key.local_name().as_ref() == "val")
                            .map(|attribute| attribute.value.into_owned());
                        if let (Some(open), Some(style)) = (paragraphs.last_mut(), style) {
                            open.heading = heading_level(&style);
                        }
                    }
                    "AlternateContent" if !empty => alternates.push(false),
                    "Choice" | "Fallback" => {
                        let chosen = alternates.last_mut();
                        if chosen.as_deref() == Some(&true) {
                            // Another representation of what a read choice already gave.
                            if !empty {
                                reader.read_to_end(element.name()).map_err(malformed)?;
                            }
                        } else if element.local_name().as_ref() == "Choice"
                            && let Some(chosen) = chosen
                        {
                            *chosen = true;
                        }
                    }
                    "t" if !empty => in_text = true,
                    "tab" => push_to(&mut paragraphs, "\t"),
                    "br" | "cr" => push_to(&mut paragraphs, "\n"),
                    "tbl" if !empty && paragraphs.is_empty() => table_depth += 1,
                    "tr" if !empty => row = Some(Row { cells: Vec::new(), depth: paragraphs.len() }),
                    "tc" if !empty => {
                        if let Some(open) = row.as_mut() {
                            open.cells.push(String::new());
                        }
                    }
                    _ => {}
                }
            }
            Event::Text(text) if in_text => push_to(&mut paragraphs, &text.xml10_content()),
            Event::GeneralRef(reference) if in_text => {
                let character = match reference.resolve_char_ref().map_err(malformed)? {
                    Some(character) => Some(character),
                    None => entity(&reference.xml10_content()),
                };
                if let Some(character) = character {
                    push_to(&mut paragraphs, character.encode_utf8(&mut [0; 4]));
                }
            }
            Event::CData(data) if in_text => push_to(&mut paragraphs, &data),
            Event::End(element) => match element.local_name().as_ref() {
                "t" => in_text = false,
                "AlternateContent" => {
                    alternates.pop();
                }
                "p" => {
                    if too_deep > 0 {
                        too_deep -= 1;
                        continue;
                    }
                    let Some(mut done) = paragraphs.pop() else { continue };
                    let boxes = std::mem::take(&mut done.boxes);
                    if let Some(open) = row.as_mut().filter(|open| open.depth == paragraphs.len()) {
                        // A paragraph of a table cell; its boxes come after the table.
                        if let Some(cell) = open.cells.last_mut() {
                            if !cell.is_empty() && !done.text.trim().is_empty() {
                                cell.push(' ');
                            }
                            cell.push_str(done.text.trim());
                        }
                        match paragraphs.last_mut() {
                            Some(anchor) => anchor.boxes.extend(boxes),
                            None => after_table.extend(boxes),
                        }
                    } else if let Some(anchor) = paragraphs.last_mut() {
                        // A paragraph of a text box: a block of the paragraph anchoring it.
                        anchor.boxes.push(done.text);
                        anchor.boxes.extend(boxes);
                    } else {
                        match done.heading {
                            Some(level) => builder.heading(level, &done.text)?,
                            None => {
                                builder.push_inline(&done.text)?;
                                builder.paragraph_break()?;
                            }
                        }
                        write_blocks(&mut builder, boxes)?;
                    }
                }
                "tr" => {
                    if let Some(done) = row.take() {
                        let line: Vec<&str> =
                            done.cells.iter().map(String::as_str).filter(|cell| !cell.is_empty()).collect();
                        let line = line.join(" | ");
                        if done.depth > 0
                            && let Some(anchor) = paragraphs.last_mut()
                        {
                            anchor.boxes.push(line);
                        } else {
                            builder.push_inline(&line)?;
                            builder.line_break()?;
                        }
                    }
                }
                "tbl" if paragraphs.is_empty() => {
                    table_depth = table_depth.saturating_sub(1);
                    if table_depth == 0 {
                        builder.paragraph_break()?;
                        write_blocks(&mut builder, std::mem::take(&mut after_table))?;
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    write_blocks(&mut builder, after_table)?;
    builder.finish(0)
}

/// Writes each of `blocks` as its own paragraph (empty ones make none).
fn write_blocks(builder: &mut TextBuilder, blocks: Vec<String>) -> ExtractResult<()> {
    for block in blocks {
        builder.push_inline(&block)?;
        builder.paragraph_break()?;
    }
    Ok(())
}

/// Appends `text` to the innermost open paragraph (text outside any paragraph is not the
/// document's).
fn push_to(paragraphs: &mut [Paragraph], text: &str) {
    if let Some(open) = paragraphs.last_mut() {
        open.text.push_str(text);
    }
}
