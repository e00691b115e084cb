//! Extraction of each format (issue 49): the text and layout map of fixtures made here, and every
//! kind of bad input refused with its code.

use std::time::Duration;

use warrant::domain::{Location, PageSpan};
use warrant::extract::samples::{self, Block, Run};
use warrant::extract::{
    DOCX_TYPE, ExtractError, ExtractLimits, Extracted, ExtractionSlots, extract, extract_off_thread,
};

fn limits() -> ExtractLimits {
    ExtractLimits::default()
}

fn lines(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|text| (*text).to_owned()).collect()
}

/// The three-page policy PDF the answer test asks about.
pub fn policy_pdf() -> Vec<u8> {
    samples::pdf(&[
        lines(&["Employee handbook", "Welcome to the company."]),
        lines(&["Working hours are flexible.", "Core hours run from ten to three."]),
        lines(&["Parking permits are issued by the facilities desk.", "Each permit costs twelve euros a month."]),
    ])
}

fn section_at(extracted: &Extracted, needle: &str) -> Location {
    let byte = extracted.text.find(needle).expect("needle in text");
    let start = extracted.text[..byte].chars().count();
    extracted.layout.locate(start, start + needle.chars().count())
}

/// Pages in order, each its own span; a page's lines joined into paragraphs (issue 60): a line
/// ending short of the page's widest, where the next line's first word would have fit, ends its
/// paragraph.
#[test]
fn pdf_text_comes_back_page_by_page() {
    let extracted = extract(&policy_pdf(), "application/pdf", &limits()).expect("pdf");
    assert_eq!(
        extracted.text,
        "Employee handbook Welcome to the company.\n\nWorking hours are flexible.\n\nCore hours run from ten to three.\n\n\
         Parking permits are issued by the facilities desk. Each permit costs twelve euros a month."
    );
    assert_eq!(extracted.page_count, 3);
    let pages: Vec<u32> = extracted.layout.pages.iter().map(|span| span.page).collect();
    assert_eq!(pages, vec![1, 2, 3]);
    let PageSpan { start, end, .. } = extracted.layout.pages[2].clone();
    let third: String = extracted.text.chars().skip(start).take(end - start).collect();
    assert!(third.starts_with("Parking permits") && third.ends_with("a month."), "{third:?}");
    assert_eq!(section_at(&extracted, "twelve euros").page, Some(3));
    assert!(extracted.layout.check(extracted.text.chars().count()).is_ok());
}

#[test]
fn docx_headings_paragraphs_and_tables_become_text_and_sections() {
    let bytes = samples::docx(&[
        Block::Heading(1, "Travel".into()),
        Block::Paragraph("Book through the portal.".into()),
        Block::Heading(2, "Hotels".into()),
        Block::Paragraph("Hotels up to 150 euros a night.".into()),
        Block::Table(vec![vec!["City".into(), "Limit".into()], vec!["Paris".into(), "180 & more".into()]]),
        Block::Heading(1, "Expenses".into()),
        Block::Paragraph("Receipts within 30 days.".into()),
    ]);
    let extracted = extract(&bytes, DOCX_TYPE, &limits()).expect("docx");
    assert_eq!(
        extracted.text,
        "Travel\n\nBook through the portal.\n\nHotels\n\nHotels up to 150 euros a night.\n\nCity | Limit\nParis | 180 & more\n\n\
         Expenses\n\nReceipts within 30 days."
    );
    assert_eq!(section_at(&extracted, "Paris").section, vec!["Travel", "Hotels"]);
    assert_eq!(section_at(&extracted, "portal").section, vec!["Travel"]);
    assert_eq!(section_at(&extracted, "Receipts").section, vec!["Expenses"]);
    assert!(extracted.layout.pages.is_empty());
}

const HTML: &str = r#"<!doctype html><html><head><title>Policies</title>
<style>body { color: red } h1 { font-size: 2em }</style>
<script>var nav = "<h1>not a heading</h1>"; document.write("tracking");</script></head>
<body>
<header><a href="/">Home</a> | <a href="/about">About</a></header>
<nav><ul><li>Menu item one</li><li>Menu item two</li></ul></nav>
<main>
<h1>Travel</h1>
<p>Book   trains
 and flights through the portal &amp; keep receipts.</p>
<h2>Hotels</h2>
<p>Hotels up to <b>150&nbsp;euros</b> a night.</p>
<pre>code  keeps
  its spaces</pre>
<h1>Expenses</h1>
<ul><li>Meals</li><li>Taxis</li></ul>
</main>
<aside>Related: nothing</aside>
<footer>Copyright 2026</footer>
<script>alert("late")</script>
</body></html>"#;

#[test]
fn html_keeps_the_main_text_and_headings_and_drops_scripts_and_navigation() {
    let extracted = extract(HTML.as_bytes(), "text/html; charset=utf-8", &limits()).expect("html");
    assert_eq!(
        extracted.text,
        "Travel\n\nBook trains and flights through the portal & keep receipts.\n\nHotels\n\nHotels up to 150\u{a0}euros a night.\n\n\
         code  keeps\n  its spaces\n\nExpenses\n\nMeals\nTaxis"
    );
    for dropped in
        ["tracking", "Menu item", "Home", "Copyright", "Related", "alert", "color", "not a heading", "Policies"]
    {
        assert!(!extracted.text.contains(dropped), "{dropped} leaked");
    }
    assert_eq!(section_at(&extracted, "150").section, vec!["Travel", "Hotels"]);
    assert_eq!(section_at(&extracted, "Taxis").section, vec!["Expenses"]);
}

#[test]
fn markdown_nested_headings_lists_and_code_blocks() {
    let markdown = "Intro line.\n\n# Travel\n\nBook *early*.\n\n## Hotels\n\n- one [link](http://x)\n- two\n\n### Paris\n\n```\nlet x =  1;\n```\n\n# Expenses\n\nKeep receipts.\n";
    let extracted = extract(markdown.as_bytes(), "text/markdown", &limits()).expect("markdown");
    assert_eq!(
        extracted.text,
        "Intro line.\n\nTravel\n\nBook early.\n\nHotels\n\none link\ntwo\n\nParis\n\nlet x =  1;\n\nExpenses\n\nKeep receipts."
    );
    assert_eq!(section_at(&extracted, "let x").section, vec!["Travel", "Hotels", "Paris"]);
    assert_eq!(section_at(&extracted, "two").section, vec!["Travel", "Hotels"]);
    assert_eq!(section_at(&extracted, "Keep").section, vec!["Expenses"]);
    assert!(section_at(&extracted, "Intro").section.is_empty());
    assert_eq!(extracted.layout.top_level_boundaries().len(), 1);
}

#[test]
fn plain_text_is_kept_as_it_is() {
    let extracted = extract("Line one.\r\nLine two.\n".as_bytes(), "text/plain", &limits()).expect("text");
    assert_eq!(extracted.text, "Line one.\nLine two.");
    assert!(extracted.layout.is_empty());
}

fn refused(bytes: &[u8], content_type: &str) -> ExtractError {
    extract(bytes, content_type, &limits()).expect_err("refused")
}

#[test]
fn a_declared_type_the_bytes_contradict_is_refused() {
    let error = refused(b"just some words", "application/pdf");
    assert_eq!(error.code(), "content_type_mismatch");
    assert_eq!(error.to_string(), "declared application/pdf but the content is text");
    assert_eq!(refused(&policy_pdf(), "text/plain").code(), "content_type_mismatch");
    assert_eq!(refused(&policy_pdf(), DOCX_TYPE).code(), "content_type_mismatch");
    assert_eq!(refused(b"x", "image/png").code(), "unsupported_content_type");
    assert_eq!(refused(b"x", "text/plain; charset=latin1").code(), "unsupported_content_type");
    // A zip that is not a Word document.
    let other = samples::zip(&[("readme.txt", b"hello")]);
    assert_eq!(refused(&other, DOCX_TYPE).code(), "malformed_document");
}

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let error = refused(b"caf\xC3\xA9 \xFF\xFE", "text/markdown");
    assert_eq!(error, ExtractError::InvalidUtf8 { offset: 6 });
    assert_eq!(error.code(), "invalid_utf8");
}

/// One text object a page, as pdfTeX and ghostscript write it: lines are line moves (`Td` with
/// a vertical offset, `Tm`, `TD`), kerning is a small `TJ` offset, a word gap a large one, and
/// ghostscript's justification draws some spaces as letter spacing (`Tc`) instead of a space.
/// (Lines run on into paragraphs where the next line's first word would not have fit above.)
#[test]
fn a_pdf_typeset_as_real_producers_do_keeps_its_lines_and_word_gaps() {
    use lopdf::Object;
    use lopdf::content::Operation;
    let op = |operator: &str, operands: Vec<Object>| Operation::new(operator, operands);
    let text = |value: &str| Object::string_literal(value);
    let number = |value: f32| Object::Real(value);
    let page = vec![
        op("BT", vec![]),
        op("Tf", vec!["F4".into(), number(12.0)]),
        op("Tm", vec![number(1.0), number(0.0), number(0.0), number(1.0), number(265.0), number(700.0)]),
        op("Tj", vec![text("SELECT")]),
        op("Tf", vec!["F4".into(), number(10.0)]),
        op("Td", vec![number(-172.5), number(-48.0)]),
        op("Tj", vec![text("Small. Fast. Reliable.")]),
        op("Td", vec![number(-2.5), number(-12.0)]),
        op("TJ", vec![Object::Array(vec![text("Choose any thr"), number(18.0), text("ee.")])]),
        op("TD", vec![number(0.0), number(-12.0)]),
        // F4 is no standard font and has no /Widths: half an em (5 units at 10 points) a character.
        op("TJ", vec![Object::Array(vec![text("The result is zer")])]),
        // "o or" drawn as "oo" spaced by the width of a space, right after "zer" (17 x 5).
        op("Tc", vec![number(3.158)]),
        op("Td", vec![number(85.5), number(0.0)]),
        op("Tj", vec![text("oo")]),
        op("Tc", vec![number(0.0)]),
        op("Td", vec![number(16.4), number(0.0)]),
        op("Tj", vec![text("r")]),
        op("Tm", vec![number(1.0), number(0.0), number(0.0), number(1.0), number(72.0), number(580.0)]),
        op("TJ", vec![Object::Array(vec![text("more"), number(-333.0), text("rows")])]),
        // A word gap made by a move along the line (pdfTeX at a font change): 3 units free.
        op("Td", vec![number(0.0), number(-12.0)]),
        op("Tj", vec![text("a collection of")]),
        op("Td", vec![number(78.0), number(0.0)]),
        op("Tj", vec![text("packages.")]),
        // A move inside a word (ghostscript's kerning): 0.2 units free.
        op("Td", vec![number(-78.0), number(-12.0)]),
        op("Tj", vec![text("Ta")]),
        op("Td", vec![number(10.2), number(0.0)]),
        op("Tj", vec![text("ble")]),
        op("ET", vec![]),
    ];
    let extracted = extract(&samples::pdf_from_operations(vec![page]), "application/pdf", &limits()).expect("pdf");
    assert_eq!(
        extracted.text,
        "SELECT\n\nSmall. Fast. Reliable. Choose any three.\n\nThe result is zero or\n\nmore rows\n\na collection of packages. Table"
    );
}

/// Typesetters draw "fi", "fl", "ffi" as one ligature glyph; the text says the letters (a
/// search for "specified" must find "speciﬁed").
#[test]
fn pdf_ligatures_come_out_as_their_letters() {
    use lopdf::content::Operation;
    use lopdf::{Object, StringFormat};
    // "speci<fi>ed e<ff>ect <fl>ow o<ffi>ce ba<ffl>e" in F2's codes.
    let mut shown = Vec::new();
    for (part, code) in [("speci", 175u8), ("ed e", 174), ("ect ", 176), ("ow o", 177), ("ce ba", 178), ("e", 0)] {
        shown.extend_from_slice(part.as_bytes());
        if code != 0 {
            shown.push(code);
        }
    }
    let page = vec![
        Operation::new("BT", vec![]),
        Operation::new("Tf", vec!["F2".into(), 11.into()]),
        Operation::new("Tj", vec![Object::String(shown, StringFormat::Literal)]),
        Operation::new("ET", vec![]),
    ];
    let extracted = extract(&samples::pdf_from_operations(vec![page]), "application/pdf", &limits()).expect("pdf");
    assert_eq!(extracted.text, "specified effect flow office baffle");
}

#[test]
fn truncated_malformed_and_encrypted_pdfs_are_refused() {
    let whole = policy_pdf();
    for cut in [9, whole.len() / 3, whole.len() / 2] {
        let error = refused(&whole[..cut], "application/pdf");
        assert!(matches!(error.code(), "malformed_document" | "no_text"), "cut at {cut}: {error}");
    }
    assert_eq!(refused(b"%PDF-1.7\n garbage garbage", "application/pdf").code(), "malformed_document");
    // An encryption dictionary in the trailer: refused as encrypted, not parsed as garbage.
    let encrypted = samples::encrypted_pdf(&[lines(&["Secret page."])]);
    assert_eq!(refused(&encrypted, "application/pdf"), ExtractError::Encrypted);
}

/// Issue 60.9: a PDF protected only by an owner password opens with the empty user password
/// (readers show it without asking), so it is read, not refused as encrypted. The fixtures are
/// qpdf's (AES-128 and AES-256; `fixtures/pdf/README.md`).
#[test]
fn a_pdf_protected_only_by_an_owner_password_is_read() {
    for name in ["owner-password-only-aes128.pdf", "owner-password-only-aes256.pdf"] {
        let path = format!("{}/fixtures/pdf/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).expect("fixture");
        let extracted = extract(&bytes, "application/pdf", &limits()).expect(name);
        assert_eq!(extracted.text, "Owner password only: the annual fee is 42 euros.", "{name}");
        assert_eq!(extracted.layout.pages.len(), 1);
    }
}

#[test]
fn a_pdf_of_deeply_nested_arrays_does_not_overflow_the_stack() {
    let nested = format!(
        "%PDF-1.4\n1 0 obj\n{}{}\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF",
        "[".repeat(1_000_000),
        "]".repeat(1_000_000)
    );
    let error = refused(nested.as_bytes(), "application/pdf");
    assert_eq!(error.code(), "malformed_document");
}

#[test]
fn a_docx_zip_bomb_stops_at_the_decompression_limit() {
    // 200 MB of one repeated paragraph compresses to a few hundred kilobytes.
    let paragraph = "<w:p><w:r><w:t>aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa</w:t></w:r></w:p>";
    let mut xml = String::from("<w:document xmlns:w=\"w\"><w:body>");
    xml.push_str(&paragraph.repeat(200_000_000 / paragraph.len()));
    xml.push_str("</w:body></w:document>");
    let bomb = samples::zip(&[("word/document.xml", xml.as_bytes())]);
    drop(xml);
    assert!(bomb.len() < 2_000_000, "{} bytes", bomb.len());
    let error = refused(&bomb, DOCX_TYPE);
    assert_eq!(error.code(), "document_too_large", "{error}");
}

#[test]
fn html_with_a_million_nested_tags_is_extracted() {
    let html = format!("{}deep text{}", "<div><span>".repeat(500_000), "</span></div>".repeat(500_000));
    let extracted = extract(html.as_bytes(), "text/html", &limits()).expect("nested html");
    assert_eq!(extracted.text, "deep text");
}

#[test]
fn markdown_quotes_a_hundred_thousand_deep_and_lists_two_thousand_deep_are_extracted() {
    let lists: String = (0..2_000).map(|depth| format!("{}- deep item\n", "  ".repeat(depth))).collect();
    let markdown = format!("{} deep quote\n\n{lists}", ">".repeat(100_000));
    let extracted = extract(markdown.as_bytes(), "text/markdown", &limits()).expect("nested markdown");
    assert!(extracted.text.contains("deep quote"));
    assert_eq!(extracted.text.matches("deep item").count(), 2_000);
}

#[test]
fn text_over_the_limit_and_empty_files_are_refused() {
    let small = ExtractLimits { max_text_chars: 10, ..limits() };
    let error = extract(b"eleven chars", "text/plain", &small).expect_err("too long");
    assert_eq!(error.code(), "document_too_large");
    assert_eq!(refused(b"  \n ", "text/plain"), ExtractError::NoText);
    assert_eq!(refused(b"<script>only()</script>", "text/html"), ExtractError::NoText);
    let blank_pdf = samples::pdf(&[Vec::new()]);
    assert_eq!(refused(&blank_pdf, "application/pdf"), ExtractError::NoText);
}

#[test]
fn extraction_past_its_time_limit_is_refused() {
    let tight = ExtractLimits { time_limit: Duration::ZERO, ..limits() };
    let markdown = "word ".repeat(200_000).replace("word word", "word\n\nword");
    let error = extract(markdown.as_bytes(), "text/markdown", &tight).expect_err("timed out");
    assert_eq!(error.code(), "extraction_timeout");
}

/// Issue 57.3: a 62 KB PDF whose page held 60 MiB of `q` operators reached 2.3 GB while every
/// operator became an `Operation` in one vector. Operators are walked one at a time, a page's
/// are counted against `max_operators_per_page`, and `q` nesting no deeper than the walk needs.
#[test]
fn a_page_of_millions_of_operators_is_refused_at_the_operator_limit() {
    let content = b"q ".repeat(1_500_000);
    let pdf = samples::pdf_from_content_streams(vec![content], &[0]);
    assert!(pdf.len() < 100_000, "{} bytes", pdf.len());
    let small = ExtractLimits { max_operators_per_page: 1_000_000, ..limits() };
    let error = extract(&pdf, "application/pdf", &small).expect_err("too many operators");
    assert_eq!(error.code(), "document_too_large", "{error}");
    assert_eq!(error.to_string(), "a pdf page exceeds the limit of 1000000 content operators");
    // Under the limit, the text after 1.5 million unmatched `q` is read.
    let mut content = b"q ".repeat(1_500_000);
    content.extend_from_slice(b"BT /F1 11 Tf 72 700 Td (after the noise) Tj ET");
    let pdf = samples::pdf_from_content_streams(vec![content], &[0]);
    let extracted = extract(&pdf, "application/pdf", &limits()).expect("under the default limit");
    assert_eq!(extracted.text, "after the noise");
}

/// Issue 57.4: the deadline was checked only when text was appended, so 40 blank pages sharing
/// one large stream ran to their end (21 s) after the limit (3 s) had passed.
#[test]
fn blank_pages_stop_at_the_deadline() {
    let blank = b"q Q ".repeat(10_000);
    let pdf = samples::pdf_from_content_streams(vec![blank], &[0; 40]);
    let error = extract(&pdf, "application/pdf", &limits()).expect_err("blank");
    assert_eq!(error, ExtractError::NoText);
    let tight = ExtractLimits { time_limit: Duration::ZERO, ..limits() };
    let error = extract(&pdf, "application/pdf", &tight).expect_err("past the deadline");
    assert_eq!(error.code(), "extraction_timeout", "{error}");
}

#[test]
fn the_corpus_benchmark_counts_a_corrupt_file_as_failed_and_names_it() {
    let folder = tempfile::tempdir().expect("folder");
    std::fs::create_dir(folder.path().join("nested")).expect("nested");
    std::fs::write(folder.path().join("policy.pdf"), policy_pdf()).expect("pdf");
    let mut truncated = policy_pdf();
    truncated.truncate(truncated.len() / 3);
    std::fs::write(folder.path().join("nested/broken.pdf"), truncated).expect("broken");
    std::fs::write(folder.path().join("notes.md"), "# Travel\n\nHotels.\n\n## Meals\n\nReceipts.\n").expect("md");
    std::fs::write(folder.path().join("image.png"), b"\x89PNG").expect("png");
    let report = warrant::bench::extract::run_corpus(folder.path(), 2).expect("corpus");
    let pdf = report.rows.iter().find(|row| row.format == "pdf").expect("pdf row");
    assert_eq!((pdf.files, pdf.failed, pdf.pages, pdf.declared_pages), (1, 1, 3, 3));
    assert_eq!(pdf.bytes, policy_pdf().len() as u64);
    let markdown = report.rows.iter().find(|row| row.format == "markdown").expect("markdown row");
    assert_eq!((markdown.files, markdown.failed, markdown.pages), (1, 0, 2));
    assert_eq!(report.failures.len(), 1);
    assert!(report.failures[0].file.ends_with("nested/broken.pdf"), "{:?}", report.failures);
    assert!(report.failures[0].reason.starts_with("malformed_document"), "{}", report.failures[0].reason);
    assert_eq!(report.skipped, vec![folder.path().join("image.png")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_past_its_time_limit_keeps_its_extraction_slot_until_its_parser_returns() {
    // lopdf reads the whole file before the first page: 30,000 pages keep it busy long after a
    // 1 ms limit has answered (about a second in a debug build).
    let pages: Vec<Vec<String>> =
        (0..30_000).map(|page| lines(&[&format!("page {page} of the handbook"), "another line"])).collect();
    let pdf = bytes::Bytes::from(samples::pdf(&pages));
    let slots = ExtractionSlots::new(1);
    let tight = ExtractLimits { time_limit: Duration::from_millis(1), ..limits() };
    let error = extract_off_thread(pdf, "application/pdf".into(), tight, &slots).await.expect_err("past its limit");
    assert_eq!(error.code(), "extraction_timeout");
    // Its parser still runs, so the one slot is still taken: the next file waits its own limit
    // (50 ms) for it and is turned away as `overloaded`, not started beside the runaway.
    assert_eq!(slots.available(), 0, "the timed-out extraction gave its slot back while still running");
    let plain = bytes::Bytes::from_static(b"Hotel stays are reimbursed.");
    let short = ExtractLimits { time_limit: Duration::from_millis(50), ..limits() };
    let error =
        extract_off_thread(plain.clone(), "text/plain".into(), short, &slots).await.expect_err("no slot came free");
    assert_eq!(error.code(), "overloaded");
    // Once the parser returns, the slot is free again.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while slots.available() == 0 {
        assert!(std::time::Instant::now() < deadline, "the runaway extraction never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let extracted = extract_off_thread(plain, "text/plain".into(), limits(), &slots).await.expect("a free slot");
    assert_eq!(extracted.text, "Hotel stays are reimbursed.");
}

// Issue 60: PDF text as a reader sees it (paragraphs, words whole across line ends, columns in
// order, running headers and footers out of the body), on pages laid out as reportlab and
// report generators place text: each run its own text object at its own position.

/// `text` wrapped greedily into lines of at most `width` points (`F3` at 10 points).
fn wrap(text: &str, width: f32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let candidate = if line.is_empty() { word.to_owned() } else { format!("{line} {word}") };
        if samples::f3_width(&candidate, 10.0) <= width || line.is_empty() {
            line = candidate;
        } else {
            lines.push(std::mem::replace(&mut line, word.to_owned()));
        }
    }
    lines.push(line);
    lines
}

/// Runs of `lines` from the baseline `top` down, 12 points apart, at `x`.
fn column(lines: &[String], x: f32, top: f32) -> Vec<Run> {
    lines.iter().enumerate().map(|(index, line)| Run::new(x, top - 12.0 * index as f32, line)).collect()
}

fn pdf_text(pages: &[Vec<Run>]) -> Extracted {
    let extracted = extract(&samples::pdf_of_runs(pages), "application/pdf", &limits()).expect("pdf");
    assert!(extracted.layout.check(extracted.text.chars().count()).is_ok());
    extracted
}

const HALVARD: &str = "The annual report covers the northern sites of the group. The Halvard plant shipped 5,812 \
     turbines in 2031. Most of them went to coastal wind farms, and the rest were kept as spares for the \
     maintenance teams of the region.";

/// Issue 60.1: every line of a PDF ended with a newline, which ends a sentence, so "The Halvard
/// plant shipped 5,812 turbines in 2031." was quoted as "The Halvard plant shipped".
#[test]
fn a_wrapped_pdf_paragraph_is_one_paragraph_with_its_sentences_whole() {
    let lines = wrap(HALVARD, 250.0);
    assert!(!lines.iter().any(|line| line.contains("5,812 turbines in 2031.")), "the sentence crosses a line end");
    let mut runs = column(&lines, 72.0, 760.0);
    let after = 760.0 - 12.0 * (lines.len() as f32 + 1.0);
    runs.push(Run::new(72.0, after, "Staff numbers rose by a tenth."));
    let extracted = pdf_text(&[runs]);
    assert_eq!(extracted.text, format!("{HALVARD}\n\nStaff numbers rose by a tenth."));
}

/// Issue 60.3: a word hyphenated at a line end ("recali-" "bration") is one word again; a
/// hyphen before a capital or between digits is kept ("Jean-Paul", "2019-2020").
#[test]
fn a_pdf_word_hyphenated_at_a_line_end_is_joined() {
    let runs = vec![
        Run::new(72.0, 760.0, "The gauges at the northern plant need an annual recali-"),
        Run::new(72.0, 748.0, "bration by the site engineers."),
        Run::new(72.0, 724.0, "The audit was written by the chief site engineer, Jean-"),
        Run::new(72.0, 712.0, "Paul Martin in the spring."),
        Run::new(72.0, 688.0, "The figures cover the whole period of the years 2019-"),
        Run::new(72.0, 676.0, "2020 for the northern sites."),
    ];
    assert_eq!(
        pdf_text(&[runs]).text,
        "The gauges at the northern plant need an annual recalibration by the site engineers.\n\n\
         The audit was written by the chief site engineer, Jean-Paul Martin in the spring.\n\n\
         The figures cover the whole period of the years 2019-2020 for the northern sites."
    );
}

/// Issue 60.4: a two-column page drawn row by row (a left line, then the right line beside it)
/// interleaved the columns; it reads down the left column, then down the right.
#[test]
fn a_two_column_pdf_page_drawn_row_by_row_reads_column_by_column() {
    let left = "The Halvard plant shipped 5,812 turbines in 2031 and hired forty new engineers for the \
                coastal projects of the northern region.";
    let right = "The Tessby plant repaired ninety gearboxes and trained its whole staff on the new \
                 safety rules during the long winter months.";
    let (left_lines, right_lines) = (wrap(left, 220.0), wrap(right, 220.0));
    assert_eq!(left_lines.len(), right_lines.len());
    let title = "Quarterly operations review of the Halvard and Tessby plants";
    let mut runs = vec![Run { size: 14.0, ..Run::new(72.0, 790.0, title) }];
    for (index, (left_line, right_line)) in left_lines.iter().zip(&right_lines).enumerate() {
        let y = 760.0 - 12.0 * index as f32;
        runs.push(Run::new(72.0, y, left_line));
        runs.push(Run::new(320.0, y, right_line));
    }
    assert_eq!(pdf_text(&[runs]).text, format!("{title}\n\n{left}\n\n{right}"));
}

/// Issue 60.4: a line drawn one word per text object came out one word per line.
#[test]
fn a_pdf_line_drawn_one_word_per_text_object_is_one_line() {
    let mut runs = Vec::new();
    let mut x = 72.0;
    for word in "The Halvard plant shipped 5,812 turbines in 2031.".split(' ') {
        runs.push(Run::new(x, 700.0, word));
        x += samples::f3_width(&format!("{word} "), 10.0);
    }
    assert_eq!(pdf_text(&[runs]).text, "The Halvard plant shipped 5,812 turbines in 2031.");
}

/// Issue 60.4: a running header and footer landed inside the sentence that crosses a page
/// break. They are recognized (the same text at the same place on most pages, page numbers
/// aside): a header is kept once, at the start of the first page it is on, and a page number is
/// dropped; the sentence reads whole, each part on its own page.
#[test]
fn running_headers_and_footers_stay_out_of_a_sentence_that_crosses_a_page_break() {
    let body = "The annual report covers the northern sites of the group and their deliveries. \
        The Halvard plant opened its third hall in the spring, and the Tessby plant renewed its \
        cranes. Most of the turbines built at the Halvard plant in 2031 were shipped to northern \
        ports before the winter storms began. The rest were kept as spares for the maintenance \
        teams of the region, who replaced forty gearboxes during the year.";
    let lines = wrap(body, 250.0);
    let first_page = lines.iter().position(|line| line.ends_with("were")).expect("a line ends with 'were'") + 1;
    let second_page = first_page + 2;
    let pages: Vec<Vec<Run>> = [&lines[..first_page], &lines[first_page..second_page], &lines[second_page..]]
        .iter()
        .enumerate()
        .map(|(index, part)| {
            let mut runs = vec![Run::new(72.0, 800.0, "Halvard Annual Report 2031")];
            runs.extend(column(part, 72.0, 760.0));
            runs.push(Run::new(280.0, 40.0, &format!("Page {} of 3", index + 1)));
            runs
        })
        .collect();
    let extracted = pdf_text(&pages);
    let sentence = "Most of the turbines built at the Halvard plant in 2031 were shipped to northern ports before the winter storms began.";
    assert!(extracted.text.contains(sentence), "{:?}", extracted.text);
    assert_eq!(extracted.text.matches("Halvard Annual Report").count(), 1, "{:?}", extracted.text);
    assert!(!extracted.text.contains("Page 2 of 3") && !extracted.text.contains("Page 3 of 3"), "{:?}", extracted.text);
    assert!(extracted.text.starts_with("Halvard Annual Report 2031\n\nThe annual report"), "{:?}", extracted.text);
    assert!(!extracted.text.contains("Page 1 of 3"), "{:?}", extracted.text);
    assert_eq!(section_at(&extracted, "were shipped").pages, vec![1, 2]);
    assert_eq!(section_at(&extracted, "shipped to northern").page, Some(2));
    assert_eq!(section_at(&extracted, "cranes").page, Some(1));
}

/// Issue 60.4: a report of two pages has its running header and footer on both; the header is
/// kept once, the page number dropped, and the sentence across the break is whole (the footer
/// drawn first on the second page was read into it).
#[test]
fn a_two_page_pdf_keeps_its_running_header_once_and_its_sentence_whole() {
    let pages: Vec<Vec<Run>> = [
        vec![
            "The plant reported its figures for the year. Revenue from service",
            "contracts rose to 214 million crowns,",
        ],
        vec!["carried mostly by the offshore maintenance agreements."],
    ]
    .iter()
    .enumerate()
    .map(|(index, body)| {
        let mut runs = vec![Run::new(280.0, 40.0, &format!("Halvard Energy - page {}", index + 1))];
        runs.push(Run::new(72.0, 800.0, "Halvard Energy - Annual Report 2031"));
        runs.extend(body.iter().enumerate().map(|(line, text)| Run::new(72.0, 760.0 - 12.0 * line as f32, text)));
        runs
    })
    .collect();
    let extracted = pdf_text(&pages);
    assert_eq!(
        extracted.text,
        "Halvard Energy - Annual Report 2031\n\nThe plant reported its figures for the year. Revenue from service contracts \
         rose to 214 million crowns, carried mostly by the offshore maintenance agreements."
    );
    assert_eq!(section_at(&extracted, "carried mostly").page, Some(2));
}

/// Issue 60.4: reportlab writes its text in Helvetica with no `/Widths`; guessed at half an em a
/// character, the left column's lines ran into the right column's, so a bulletin drawn row by
/// row stayed interleaved ("published ble detail") and its facts were cut. The fixture is the
/// documents corpus's (`benches/docs_corpus/generate.py`).
#[test]
fn a_reportlab_bulletin_in_two_columns_reads_in_column_order() {
    let path = format!("{}/fixtures/docs/tern-bulletin.pdf", env!("CARGO_MANIFEST_DIR"));
    let extracted = extract(&std::fs::read(path).expect("fixture"), "application/pdf", &limits()).expect("pdf");
    for sentence in [
        "Container traffic through Tern Harbour reached 48,200 units in the second quarter, an increase that the \
         berth planners had not foreseen.",
        "Dredging of the inner basin will remove approximately 31,000 cubic metres of sediment before the autumn \
         storms begin.",
        "The steering board discussed the communication timetable in considerable detail.",
    ] {
        assert!(extracted.text.contains(sentence), "{sentence:?} not in {:?}", extracted.text);
    }
}

/// Issue 60: a PDF table row came out as its cells joined with a space ("Vesterholm 412 1,904"),
/// so nothing told a row from prose and the answer quoted the header row instead of the row
/// holding the value. Cells far apart on one line are joined with ` | `, as the DOCX, HTML and
/// Markdown extractors write a table row; words a space apart stay a space apart.
#[test]
fn a_pdf_table_row_has_its_cells_separated_as_other_formats_write_them() {
    let mut runs = vec![Run::new(72.0, 760.0, "Staff and output per site:")];
    for (row, cells) in [["Site", "Staff", "Output (MW)"], ["Vesterholm", "412", "1,904"], ["Osterby", "268", "1,150"]]
        .iter()
        .enumerate()
    {
        let y = 736.0 - 14.0 * row as f32;
        runs.extend(cells.iter().enumerate().map(|(column, cell)| Run::new(72.0 + 110.0 * column as f32, y, cell)));
    }
    assert_eq!(
        pdf_text(&[runs]).text,
        "Staff and output per site:\n\nSite | Staff | Output (MW)\n\nVesterholm | 412 | 1,904\n\nOsterby | 268 | 1,150"
    );
}

/// Issue 60.1: hard-wrapped plain text (e-mail, RFC style) had every line a sentence too; its
/// prose paragraphs are joined, and text laid out on purpose (a list, a table) is kept.
#[test]
fn hard_wrapped_plain_text_prose_is_joined_into_paragraphs() {
    let mail = "Dear team,\r\n\r\nThe annual report covers the northern sites. The Halvard plant\r\n\
                shipped 5,812 turbines in 2031, and the Tessby plant repaired ninety\r\n\
                gearboxes during the winter.\r\n\r\n- first item\r\n- second item\r\n";
    let extracted = extract(mail.as_bytes(), "text/plain", &limits()).expect("text");
    assert_eq!(
        extracted.text,
        "Dear team,\n\nThe annual report covers the northern sites. The Halvard plant shipped 5,812 turbines \
         in 2031, and the Tessby plant repaired ninety gearboxes during the winter.\n\n- first item\n- second item"
    );
}

/// Issue 60.1, end to end: a PDF whose paragraph wraps the fact across lines is uploaded as a
/// file and asked about; the extractive answer quotes the whole sentence, value included (it
/// quoted "The Halvard plant shipped", a line).
#[actix_web::test]
async fn an_answer_from_a_wrapped_pdf_paragraph_quotes_the_fact() {
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use warrant::http::auth::{Claims, mint_hs256};

    const SECRET: &str = "test-secret-for-pdf-paragraphs";
    let mut settings = warrant::config::Settings::defaults();
    settings.auth.hs256_secret = SECRET.into();
    settings.embedder.dim = 64;
    let providers = super::support::hashed_providers(&settings, None);
    let state = super::support::demo_state(std::sync::Arc::new(settings), providers).await;
    let service = init_service(warrant::http::server::app(state)).await;
    let token = |sub: &str, admin: bool| {
        let claims = Claims {
            sub: sub.into(),
            tenant: "reports".into(),
            groups: vec!["staff".into()],
            roles: if admin { vec!["admin".into()] } else { vec![] },
            exp: 4_000_000_000,
            iss: None,
            aud: None,
        };
        mint_hs256(SECRET, &claims).expect("token")
    };
    let pdf = samples::pdf_of_runs(&[column(&wrap(HALVARD, 250.0), 72.0, 760.0)]);
    let boundary = "warrant-pdf-paragraphs";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"groups\"\r\n\r\nstaff\r\n--{boundary}\r\n\
         Content-Disposition: form-data; name=\"file\"; filename=\"report.pdf\"\r\nContent-Type: application/pdf\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&pdf);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let upload = TestRequest::post()
        .uri("/v1/admin/files")
        .insert_header(("authorization", format!("Bearer {}", token("root", true))))
        .insert_header(("content-type", format!("multipart/form-data; boundary={boundary}")))
        .set_payload(body)
        .to_request();
    let response = call_service(&service, upload).await;
    let status = response.status().as_u16();
    assert_eq!(status, 200, "{:?}", read_body(response).await);
    let question = TestRequest::post()
        .uri("/v1/answer")
        .insert_header(("authorization", format!("Bearer {}", token("ann", false))))
        .set_json(serde_json::json!({"question": "How many turbines did the Halvard plant ship in 2031?"}))
        .to_request();
    let answer: serde_json::Value =
        serde_json::from_slice(&read_body(call_service(&service, question).await).await).expect("json");
    assert_eq!(answer["status"], "answered", "{answer}");
    let quotes: Vec<&str> = answer["answer"]["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|claim| claim["citations"].as_array().into_iter().flatten())
        .filter_map(|citation| citation["quote"].as_str())
        .collect();
    assert!(
        quotes.contains(&"The Halvard plant shipped 5,812 turbines in 2031."),
        "the quote holds the fact: {quotes:?}"
    );
}
