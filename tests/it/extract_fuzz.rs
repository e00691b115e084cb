//! Property-based fuzzing of extraction (issue 49): damaged files of every format (bytes flipped,
//! cut, inserted) and PDF pages of arbitrary text operations never panic, never hang past the
//! time limit, and either give text whose layout map covers it exactly or a coded refusal.

use std::time::{Duration, Instant};

use lopdf::Object;
use lopdf::content::Operation;
use proptest::prelude::*;
use warrant::extract::samples::{self, Block, Run};
use warrant::extract::{DOCX_TYPE, ExtractLimits, extract};

const CODES: &[&str] = &[
    "unsupported_content_type",
    "content_type_mismatch",
    "invalid_utf8",
    "encrypted_document",
    "malformed_document",
    "document_too_large",
    "no_text",
    "extraction_timeout",
];

fn limits() -> ExtractLimits {
    ExtractLimits { time_limit: Duration::from_secs(5), ..ExtractLimits::default() }
}

/// Extracts `bytes` as `content_type` and checks the outcome: a layout map that fits the text,
/// or a refusal with one of the codes; within the time limit (and a margin).
fn holds(bytes: &[u8], content_type: &str) {
    let limits = limits();
    let started = Instant::now();
    match extract(bytes, content_type, &limits) {
        Ok(extracted) => {
            let chars = extracted.text.chars().count();
            assert!(extracted.layout.check(chars).is_ok(), "layout of {chars} characters: {:?}", extracted.layout);
        }
        Err(error) => assert!(CODES.contains(&error.code()), "{error}"),
    }
    assert!(started.elapsed() < limits.time_limit + Duration::from_secs(5), "ran {:?}", started.elapsed());
}

/// The valid file of each format that the damage starts from.
fn samples() -> Vec<(Vec<u8>, &'static str)> {
    let pages = [vec!["Travel policy".to_owned(), "Hotels up to 180 euros.".to_owned()], vec!["Page two".to_owned()]];
    vec![
        (samples::pdf(&pages), "application/pdf"),
        (
            samples::docx(&[
                Block::Heading(1, "Travel".into()),
                Block::Paragraph("Book flights early.".into()),
                Block::Table(vec![vec!["City".into(), "Limit".into()], vec!["Paris".into(), "180".into()]]),
            ]),
            DOCX_TYPE,
        ),
        (
            b"<html><nav>menu</nav><h1>Travel</h1><h2>Hotels</h2><p>180 euros &amp; more</p></html>".to_vec(),
            "text/html",
        ),
        (b"# Travel\n\n## Hotels\n\n- 180 euros\n- `code`\n\n> quoted\n".to_vec(), "text/markdown"),
        (b"Plain text policy.\nSecond line.".to_vec(), "text/plain"),
    ]
}

/// One kind of damage.
#[derive(Clone, Debug)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Damage::Flip(at, byte)),
        any::<usize>().prop_map(Damage::Cut),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(at, bytes)| Damage::Insert(at, bytes)),
    ]
}

fn damaged(mut bytes: Vec<u8>, damages: &[Damage]) -> Vec<u8> {
    for damage in damages {
        let length = bytes.len().max(1);
        match damage {
            Damage::Flip(at, byte) => {
                if let Some(slot) = bytes.get_mut(at % length) {
                    *slot ^= byte | 1;
                }
            }
            Damage::Cut(at) => bytes.truncate(at % length),
            Damage::Insert(at, inserted) => {
                let at = (at % length).min(bytes.len());
                bytes.splice(at..at, inserted.iter().copied());
            }
        }
    }
    bytes
}

/// Bytes of a string operand: mostly codes the fonts decode (printable ASCII, accented letters,
/// the ligature codes 174-178), sometimes any byte.
fn string_operand() -> impl Strategy<Value = Object> {
    let byte = prop_oneof![4 => 32u8..127, 2 => 160u8..=255, 1 => 174u8..179, 1 => any::<u8>()];
    proptest::collection::vec(byte, 0..24).prop_map(|bytes| Object::String(bytes, lopdf::StringFormat::Literal))
}

fn number_operand() -> impl Strategy<Value = Object> {
    prop_oneof![
        (-2000i64..2000).prop_map(Object::Integer),
        (-2000.0f32..2000.0).prop_map(Object::Real),
        any::<i64>().prop_map(Object::Integer),
        any::<f32>().prop_map(Object::Real),
    ]
}

/// Text operations as producers write them (the right operands), and as a hostile one may
/// (any operator with operands of any type, in any order).
fn operation() -> impl Strategy<Value = Operation> {
    let font = proptest::sample::select(vec!["F1", "F2", "F3", "F9", ""])
        .prop_map(|name| Object::Name(name.as_bytes().to_vec()));
    let well_formed = prop_oneof![
        (font.clone(), number_operand()).prop_map(|(font, size)| Operation::new("Tf", vec![font, size])),
        string_operand().prop_map(|text| Operation::new("Tj", vec![text])),
        proptest::collection::vec(prop_oneof![string_operand(), number_operand()], 0..8)
            .prop_map(|items| Operation::new("TJ", vec![Object::Array(items)])),
        (number_operand(), number_operand()).prop_map(|(x, y)| Operation::new("Td", vec![x, y])),
        proptest::collection::vec(number_operand(), 6).prop_map(|matrix| Operation::new("Tm", matrix)),
        number_operand().prop_map(|spacing| Operation::new("Tc", vec![spacing])),
        number_operand().prop_map(|spacing| Operation::new("Tw", vec![spacing])),
        proptest::sample::select(vec!["BT", "ET", "T*"]).prop_map(|operator| Operation::new(operator, vec![])),
        (number_operand(), number_operand(), string_operand())
            .prop_map(|(word, letter, text)| Operation::new("\"", vec![word, letter, text])),
    ];
    let operator = proptest::sample::select(vec![
        "BT", "ET", "Tf", "Td", "TD", "Tm", "T*", "Tj", "TJ", "'", "\"", "Tc", "Tw", "Tz", "TL", "Ts", "q", "Q", "cm",
    ]);
    let operand = prop_oneof![
        number_operand(),
        string_operand(),
        font,
        proptest::collection::vec(prop_oneof![number_operand(), string_operand()], 0..8).prop_map(Object::Array),
        Just(Object::Null),
    ];
    let arbitrary = (operator, proptest::collection::vec(operand, 0..7))
        .prop_map(|(operator, operands)| Operation::new(operator, operands));
    prop_oneof![3 => well_formed, 1 => arbitrary]
}

/// Runs of one to five words placed anywhere on a page, in any size (issue 60's layout: columns,
/// lines, paragraphs, running lines read from positions alone).
fn runs() -> impl Strategy<Value = Vec<Run>> {
    let word =
        proptest::sample::select(vec!["plant", "Halvard", "shipped", "turbines", "a", "of", "The", "x", "report"]);
    let run = (
        0.0f32..560.0,
        0.0f32..820.0,
        proptest::sample::select(vec![8.0f32, 10.0, 12.0, 14.0]),
        proptest::collection::vec(word, 1..6),
    )
        .prop_map(|(x, y, size, words)| Run { size, ..Run::new(x, y, &words.join(" ")) });
    proptest::collection::vec(run, 0..30)
}

/// The count of each character that is not whitespace nor `|` (what joins the cells of a line
/// whose runs lie far apart, a table row; the runs' words hold none).
fn letters(text: &str) -> std::collections::BTreeMap<char, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for character in text.chars().filter(|character| !character.is_whitespace() && *character != '|') {
        *counts.entry(character).or_insert(0) += 1;
    }
    counts
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Laid out from positions, a page's text is its runs' text, each letter once: reordering
    /// (columns), joining (lines, paragraphs, pages) neither loses, doubles nor invents any; only
    /// running lines (on two pages or more) are dropped. The layout map fits the text.
    #[test]
    fn pdf_runs_placed_anywhere_come_out_each_letter_once(pages in proptest::collection::vec(runs(), 1..5)) {
        let input: String = pages.iter().flatten().map(|run| format!("{} ", run.text)).collect();
        match extract(&samples::pdf_of_runs(&pages), "application/pdf", &limits()) {
            Ok(extracted) => {
                prop_assert!(extracted.layout.check(extracted.text.chars().count()).is_ok());
                let (out, expected) = (letters(&extracted.text), letters(&input));
                if pages.len() < 2 {
                    prop_assert_eq!(out, expected);
                } else {
                    for (character, count) in out {
                        prop_assert!(expected.get(&character).is_some_and(|&most| count <= most), "{character} {count} times");
                    }
                }
            }
            Err(error) => prop_assert!(error.code() == "no_text" && (input.trim().is_empty() || pages.len() >= 2), "{error}"),
        }
    }

    #[test]
    fn a_damaged_file_of_any_format_is_extracted_or_refused_with_its_code(
        which in 0usize..5,
        damages in proptest::collection::vec(damage(), 1..6),
    ) {
        let (bytes, content_type) = samples().swap_remove(which);
        holds(&damaged(bytes, &damages), content_type);
    }

    #[test]
    fn pdf_pages_of_arbitrary_text_operations_are_extracted_or_refused(
        pages in proptest::collection::vec(proptest::collection::vec(operation(), 0..40), 1..4),
    ) {
        holds(&samples::pdf_from_operations(pages), "application/pdf");
    }
}
