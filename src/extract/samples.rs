//! Sample files of the binary formats, made in memory: the fixtures of the extraction tests and
//! the corpus of the extraction benchmark (`warrant-bench extract`). Not used by the server.

use std::io::Write;

use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};

/// A PDF whose page `n` (from 1) shows the lines of `pages[n - 1]`, one text object per line,
/// in Helvetica with the WinAnsi encoding (so text extraction reads them back exactly).
pub fn pdf(pages: &[Vec<String>]) -> Vec<u8> {
    pdf_with(pages, false)
}

/// [`pdf`] with a standard security handler's encryption dictionary in its trailer (RC4,
/// revision 2, a password the reader does not have): what an encrypted file looks like.
pub fn encrypted_pdf(pages: &[Vec<String>]) -> Vec<u8> {
    pdf_with(pages, true)
}

/// A PDF whose pages run the given content operations, with Helvetica (WinAnsi) as font `F1`,
/// Times with ligatures at codes 174-178 (ff, fi, fl, ffi, ffl) as `F2`, Helvetica with
/// glyph widths for codes 32-126 as `F3`, and `SampleSans` (no standard font, no widths) as `F4`:
/// text laid out as real producers do (one text object a page, line moves, kerning, letter
/// spacing).
pub fn pdf_from_operations(pages: Vec<Vec<Operation>>) -> Vec<u8> {
    let streams: Vec<Vec<u8>> =
        pages.into_iter().map(|operations| Content { operations }.encode().expect("plain operations encode")).collect();
    let pages: Vec<usize> = (0..streams.len()).collect();
    pdf_of(streams, &pages, false)
}

/// A PDF of raw content streams (the fonts of [`pdf_from_operations`]): page `n` (from 1) draws
/// `streams[pages[n - 1]]`, so pages may share one stream object. Streams are Flate-compressed:
/// megabytes of repeated operators make a file of kilobytes.
pub fn pdf_from_content_streams(streams: Vec<Vec<u8>>, pages: &[usize]) -> Vec<u8> {
    pdf_of(streams, pages, false)
}

/// A piece of text a sample page draws at a place: its own text object, font `font` (`F1`,
/// `F2` or `F3` of [`pdf_from_operations`]) at `size` points, its baseline starting at (`x`,
/// `y`) points from the page's bottom left corner.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Left end of the baseline.
    pub x: f32,
    /// Height of the baseline.
    pub y: f32,
    /// Font size in points.
    pub size: f32,
    /// Font resource name.
    pub font: &'static str,
    /// The text drawn (WinAnsi).
    pub text: String,
}

impl Run {
    /// `text` in `F3` (Helvetica with glyph widths) at 10 points from (`x`, `y`).
    pub fn new(x: f32, y: f32, text: &str) -> Self {
        Self { x, y, size: 10.0, font: "F3", text: text.to_owned() }
    }
}

/// Width of `text` in `F3` at `size` points (Helvetica's widths as `F3` declares them: 278
/// thousandths of an em for a space, 556 for every other character).
pub fn f3_width(text: &str, size: f32) -> f32 {
    text.chars().map(|character| if character == ' ' { 0.278 } else { 0.556 }).sum::<f32>() * size
}

/// A PDF whose page `n` (from 1) draws the runs of `pages[n - 1]` in their order, each as its
/// own text object (`BT /F size Tf 1 0 0 1 x y Tm (text) Tj ET`): laid out as a program places
/// text (reportlab, a report generator), so reading order, lines and paragraphs come from the
/// geometry alone.
pub fn pdf_of_runs(pages: &[Vec<Run>]) -> Vec<u8> {
    let operations = pages
        .iter()
        .map(|runs| {
            runs.iter()
                .flat_map(|run| {
                    [
                        Operation::new("BT", vec![]),
                        Operation::new("Tf", vec![run.font.into(), Object::Real(run.size)]),
                        Operation::new("Tm", [1.0, 0.0, 0.0, 1.0, run.x, run.y].map(Object::Real).to_vec()),
                        Operation::new("Tj", vec![Object::string_literal(run.text.as_str())]),
                        Operation::new("ET", vec![]),
                    ]
                })
                .collect()
        })
        .collect();
    pdf_from_operations(operations)
}

fn pdf_with(pages: &[Vec<String>], encrypted: bool) -> Vec<u8> {
    let streams: Vec<Vec<u8>> = pages
        .iter()
        .map(|lines| {
            let mut operations = Vec::new();
            for (index, line) in lines.iter().enumerate() {
                operations.push(Operation::new("BT", vec![]));
                operations.push(Operation::new("Tf", vec!["F1".into(), 11.into()]));
                operations.push(Operation::new("Td", vec![72.into(), (800 - 14 * index as i64).into()]));
                operations.push(Operation::new("Tj", vec![Object::string_literal(line.as_str())]));
                operations.push(Operation::new("ET", vec![]));
            }
            Content { operations }.encode().expect("plain operations encode")
        })
        .collect();
    let pages: Vec<usize> = (0..streams.len()).collect();
    pdf_of(streams, &pages, encrypted)
}

fn pdf_of(streams: Vec<Vec<u8>>, pages: &[usize], encrypted: bool) -> Vec<u8> {
    let mut document = Document::with_version("1.5");
    let pages_id = document.new_object_id();
    let font_id = document.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica", "Encoding" => "WinAnsiEncoding",
    });
    // F2: Times with the typographic ligatures at codes 174-178 (ff, fi, fl, ffi, ffl), as
    // typesetters draw them.
    let differences: Vec<Object> =
        [174.into(), "ff".into(), "fi".into(), "fl".into(), "ffi".into(), "ffl".into()].to_vec();
    let ligatures_id = document.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Times-Roman",
        "Encoding" => dictionary! {
            "Type" => "Encoding", "BaseEncoding" => "WinAnsiEncoding", "Differences" => differences,
        },
    });
    // F3: Helvetica with its glyph widths for the printable ASCII codes only (32-126), as
    // embedded subsets declare them: codes outside the range have no width.
    let widths: Vec<Object> = (32..127).map(|code: i64| Object::Integer(if code == 32 { 278 } else { 556 })).collect();
    let widths_id = document.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica", "Encoding" => "WinAnsiEncoding",
        "FirstChar" => 32, "LastChar" => 126, "Widths" => widths,
    });
    // F4: a font that is not a standard one and declares no widths (a reader guesses them).
    let unknown_id = document.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "SampleSans", "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = document.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id, "F2" => ligatures_id, "F3" => widths_id, "F4" => unknown_id },
    });
    let stream_ids: Vec<_> =
        streams.into_iter().map(|content| document.add_object(Stream::new(dictionary! {}, content))).collect();
    let mut kids = Vec::new();
    for &stream in pages {
        let content_id = stream_ids[stream];
        let page_id = document.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
        });
        kids.push(Object::from(page_id));
    }
    let count = kids.len() as i64;
    let pages_dictionary = dictionary! {
        "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
        "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
    };
    document.objects.insert(pages_id, Object::Dictionary(pages_dictionary));
    let catalog_id = document.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    document.trailer.set("Root", catalog_id);
    if encrypted {
        let encrypt_id = document.add_object(dictionary! {
            "Filter" => "Standard", "V" => 1, "R" => 2, "Length" => 40, "P" => -44,
            "O" => Object::String(vec![0x5a; 32], lopdf::StringFormat::Hexadecimal),
            "U" => Object::String(vec![0xa5; 32], lopdf::StringFormat::Hexadecimal),
        });
        document.trailer.set("Encrypt", encrypt_id);
        document.trailer.set(
            "ID",
            vec![
                Object::String(vec![1; 16], lopdf::StringFormat::Hexadecimal),
                Object::String(vec![1; 16], lopdf::StringFormat::Hexadecimal),
            ],
        );
    }
    document.compress();
    let mut bytes = Vec::new();
    document.save_to(&mut bytes).expect("writing to memory does not fail");
    bytes
}

/// A block of a sample Word document.
#[derive(Clone, Debug)]
pub enum Block {
    /// A paragraph styled `Heading<level>`.
    Heading(u8, String),
    /// A body paragraph.
    Paragraph(String),
    /// A table: rows of cells.
    Table(Vec<Vec<String>>),
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn paragraph(style: Option<u8>, text: &str) -> String {
    let properties =
        style.map(|level| format!("<w:pPr><w:pStyle w:val=\"Heading{level}\"/></w:pPr>")).unwrap_or_default();
    format!("<w:p>{properties}<w:r><w:t xml:space=\"preserve\">{}</w:t></w:r></w:p>", escape(text))
}

/// The `word/document.xml` of `blocks`.
pub fn docx_xml(blocks: &[Block]) -> String {
    let mut body = String::new();
    for block in blocks {
        match block {
            Block::Heading(level, text) => body.push_str(&paragraph(Some(*level), text)),
            Block::Paragraph(text) => body.push_str(&paragraph(None, text)),
            Block::Table(rows) => {
                body.push_str("<w:tbl>");
                for row in rows {
                    body.push_str("<w:tr>");
                    for cell in row {
                        body.push_str(&format!("<w:tc>{}</w:tc>", paragraph(None, cell)));
                    }
                    body.push_str("</w:tr>");
                }
                body.push_str("</w:tbl>");
            }
        }
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
         <w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>{body}</w:body></w:document>"
    )
}

/// A zip archive of `entries` (name, bytes), deflated.
pub fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        writer.start_file(*name, options).expect("a fresh archive takes entries");
        writer.write_all(bytes).expect("writing to memory does not fail");
    }
    writer.finish().expect("writing to memory does not fail").into_inner()
}

/// A minimal DOCX holding `blocks`.
pub fn docx(blocks: &[Block]) -> Vec<u8> {
    let content_types = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
        <Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">\
        <Default Extension=\"xml\" ContentType=\"application/xml\"/>\
        <Override PartName=\"/word/document.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml\"/>\
        </Types>";
    zip(&[("[Content_Types].xml", content_types.as_bytes()), ("word/document.xml", docx_xml(blocks).as_bytes())])
}
