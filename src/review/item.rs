//! What a review item holds, in three parts kept apart so that a document's deletion can purge
//! its text by deleting rows, without decoding anything:
//!
//! - [`ReviewItem`]: the item without any text taken from documents — request id, time, the
//!   asker's `sub` (never the token), the question, the final context as label → chunk id,
//!   document id, version and offsets, every claim the generator produced in every attempt
//!   (returned or rejected, with its rejection codes; a returned claim's citations with their
//!   quoted span as document offsets), the attempts (labels shown, outcome, output-level codes),
//!   the abstention if any, and stage timings;
//! - [`SourceText`]s, one row per (item, document): the text and title of that document's chunks
//!   in the final context;
//! - [`GeneratedText`], one row per item: what the generator wrote (each claim's text, answer
//!   and citations as written; its raw output per attempt, which item 7's fixture export replays
//!   as a scripted generator). It may quote any source of the prompt, so it goes with the first
//!   of them to be deleted.
//!
//! Verdicts ([`Verdict`]) are rows of their own, appended (an audit trail: reviewer and time).
//!
//! Encoding: bincode 2 (standard configuration) after one format byte, [`FORMAT`]; the same
//! bytes on both backends (`fixtures/reviews/` holds the golden encoding of format 1).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ReviewError, ReviewResult};

/// The format byte every encoded part starts with.
pub const FORMAT: u8 = 1;

/// Longest claim text, answer or quote kept, in characters (what validation accepts).
pub const MAX_CLAIM_CHARS: usize = 2_000;
/// Most claims kept of one output (what validation accepts).
pub const MAX_CLAIMS: usize = 32;
/// Longest raw output kept per attempt, in characters.
pub const MAX_RAW_CHARS: usize = 32_768;

/// Why an answer was routed to review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Route {
    /// An abstention whose reason the policy lists.
    Abstention,
    /// An answer whose claims were partly withheld.
    Partial,
    /// A sampled answer.
    Sample,
}

impl Route {
    /// Every route, in order.
    pub const ALL: [Route; 3] = [Route::Abstention, Route::Partial, Route::Sample];

    /// Wire and metrics name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Abstention => "abstention",
            Self::Partial => "partial",
            Self::Sample => "sample",
        }
    }
}

/// An abstention: its reason and diagnostic codes (codes only, as in the response).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbstentionRecord {
    /// Reason code (`unsupported_citation`…).
    pub reason: String,
    /// Diagnostic codes.
    pub diagnostics: Vec<String>,
}

/// One source of the final context, by reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// `S1`, `S2`, …
    pub label: String,
    /// Canonical chunk id.
    pub chunk_id: [u8; 16],
    /// Document id.
    pub doc_id: String,
    /// Document version.
    pub doc_version: u64,
    /// Ordinal of that document version (what authorization is asked about).
    pub doc_ordinal: u32,
    /// Position of the chunk in its document.
    pub chunk_ordinal: u32,
    /// Character offset of the chunk in the document text.
    pub start: u64,
    /// Character offset one past its end.
    pub end: u64,
}

/// How one generation attempt ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AttemptOutcome {
    /// Its claims answered (some may have been withheld).
    Answered,
    /// The generator said the sources do not answer.
    Unanswerable,
    /// Nothing valid remained: the reason it would abstain with.
    Failed(String),
}

/// One generation attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 1 for the first, 2 for the repair.
    pub number: u32,
    /// Labels of the sources shown.
    pub shown: Vec<String>,
    /// How validation ended it; `None` when its output was never judged (the deadline ran out).
    pub outcome: Option<AttemptOutcome>,
    /// Rejection codes of the whole output (unparseable, off schema…).
    pub codes: Vec<String>,
}

/// A citation of a returned claim, as validation resolved it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CitationRecord {
    /// The label cited.
    pub label: String,
    /// Character offset of the supporting quote in the document text.
    pub quote_start: u64,
    /// One past its end.
    pub quote_end: u64,
}

/// One claim the generator produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The attempt that produced it.
    pub attempt: u32,
    /// Its position in that attempt's output (1-based, as validation numbers claims).
    pub position: u32,
    /// Whether it was returned to the asker.
    pub returned: bool,
    /// Rejection codes: why it was withheld, or the citations dropped from a returned claim.
    pub codes: Vec<String>,
    /// A returned claim's citations (a rejected claim's are in [`GeneratedText`], as written).
    pub citations: Vec<CitationRecord>,
    /// Whether the server chose its citation (`generator.anchor_answers`).
    pub anchored: bool,
}

/// A review item without any text taken from documents (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewItem {
    /// The review id (a UUID): the key reviewers use.
    pub review_id: String,
    /// The answer's request id.
    pub request_id: String,
    /// When the answer was routed, ms since the Unix epoch.
    pub created_ms: u64,
    /// The asker's `sub`.
    pub asker: String,
    /// The question.
    pub question: String,
    /// Why it was routed.
    pub route: Route,
    /// Whether the answer carried claims (else it abstained).
    pub answered: bool,
    /// Whether claims were withheld from the answer.
    pub partial: bool,
    /// The abstention, if it abstained.
    pub abstention: Option<AbstentionRecord>,
    /// The ACL epoch the answer was validated against.
    pub acl_epoch: u64,
    /// The final context.
    pub sources: Vec<SourceRecord>,
    /// The generation attempts, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Every claim of every attempt, in order: a verdict names a claim by its index here.
    pub claims: Vec<ClaimRecord>,
    /// Milliseconds per stage.
    pub stages_ms: BTreeMap<String, f64>,
}

impl ReviewItem {
    /// The documents of the final context, each once.
    pub fn doc_ids(&self) -> Vec<&str> {
        let mut doc_ids: Vec<&str> = self.sources.iter().map(|source| source.doc_id.as_str()).collect();
        doc_ids.sort_unstable();
        doc_ids.dedup();
        doc_ids
    }
}

/// The text of one source of the final context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceText {
    /// Its label.
    pub label: String,
    /// Document title.
    pub title: String,
    /// The chunk text (`doc.text[start..end]`).
    pub text: String,
}

/// A citation as the generator wrote it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WrittenCitation {
    /// What it cited (a label, or whatever the model wrote there).
    pub label: String,
    /// Its quote, if it gave one.
    pub quote: Option<String>,
}

/// The text of one claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimText {
    /// The claim text: as returned for a returned claim, as written for a rejected one (`None`
    /// for a claim that is its quotes and was rejected).
    pub text: Option<String>,
    /// Its short answer, when it is its quotes.
    pub answer: Option<String>,
    /// Its citations as written.
    pub citations: Vec<WrittenCitation>,
}

/// What the generator wrote (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GeneratedText {
    /// One per [`ReviewItem::claims`], same order.
    pub claims: Vec<ClaimText>,
    /// The raw output of each attempt that produced one: (attempt number, output).
    pub outputs: Vec<(u32, String)>,
}

/// An item to store, with its text.
#[derive(Clone, Debug, PartialEq)]
pub struct NewItem {
    /// The asker's tenant.
    pub tenant: String,
    /// The item.
    pub item: ReviewItem,
    /// Per document id, the texts of its sources.
    pub sources: BTreeMap<String, Vec<SourceText>>,
    /// What the generator wrote.
    pub generated: GeneratedText,
}

/// A reviewer's judgement of one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimLabel {
    /// The cited text supports the claim.
    Supported,
    /// It supports part of it.
    PartiallySupported,
    /// It does not support it.
    Unsupported,
    /// The claim may be true, but the citation points at the wrong source.
    WrongCitation,
}

/// A reviewer's judgement of an abstention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AbstentionLabel {
    /// Abstaining was right.
    CorrectAbstention,
    /// The server should have answered (optionally from a named document).
    ShouldHaveAnswered,
}

/// Names on the wire of a closed set of labels.
macro_rules! labels {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            /// Every label's wire name, in order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The wire name.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            /// The label named `text` (exact).
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

labels!(ClaimLabel {
    Supported => "supported",
    PartiallySupported => "partially_supported",
    Unsupported => "unsupported",
    WrongCitation => "wrong_citation",
});

labels!(AbstentionLabel {
    CorrectAbstention => "correct_abstention",
    ShouldHaveAnswered => "should_have_answered",
});

/// One claim's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimVerdict {
    /// Index of the claim in [`ReviewItem::claims`].
    pub index: u32,
    /// The judgement.
    pub label: ClaimLabel,
}

/// An abstention's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbstentionVerdict {
    /// The judgement.
    pub label: AbstentionLabel,
    /// The document that answers the question, when the reviewer names one.
    pub doc_id: Option<String>,
}

/// One reviewer's verdict on an item (several reviewers may judge one item; each verdict is
/// kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The reviewer's `sub`.
    pub reviewer: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Claims judged.
    pub claims: Vec<ClaimVerdict>,
    /// The abstention judged, if any.
    pub abstention: Option<AbstentionVerdict>,
    /// A note (bounded by `review.max_note_chars`).
    pub note: Option<String>,
}

/// Whether an item has a verdict yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewStatus {
    /// No verdict yet.
    Pending,
    /// At least one verdict.
    Reviewed,
}

impl ReviewStatus {
    /// Wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Reviewed => "reviewed",
        }
    }
}

/// A stored item as read back: its place in the tenant's order, what is left of its text, and
/// its verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredItem {
    /// Its position in the tenant's queue (increasing in write order; the cursor's unit).
    pub seq: u64,
    /// The item.
    pub item: ReviewItem,
    /// Per document id, the texts still stored (a deleted document's are gone).
    pub sources: BTreeMap<String, Vec<SourceText>>,
    /// What the generator wrote, unless purged (a source's document was deleted).
    pub generated: Option<GeneratedText>,
    /// Its verdicts, oldest first.
    pub verdicts: Vec<Verdict>,
}

/// One entry of a page of the queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Its position in the tenant's queue.
    pub seq: u64,
    /// The item.
    pub item: ReviewItem,
    /// Verdicts given so far.
    pub verdicts: u32,
}

/// Encodes one part: the format byte, then bincode.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = vec![FORMAT];
    bincode::serde::encode_into_std_write(value, &mut bytes, bincode::config::standard())
        .expect("plain data always encodes");
    bytes
}

/// Decodes one part written by [`encode`]: the format byte must be known and the value must use
/// every byte.
pub fn decode<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> ReviewResult<T> {
    let corrupt = |reason: String| ReviewError::Corrupted(format!("{what}: {reason}"));
    let Some((&format, rest)) = bytes.split_first() else {
        return Err(corrupt("empty".into()));
    };
    if format != FORMAT {
        return Err(corrupt(format!("unknown format {format}")));
    }
    let (value, read) = bincode::serde::decode_from_slice::<T, _>(rest, bincode::config::standard())
        .map_err(|error| corrupt(error.to_string()))?;
    if read != rest.len() {
        return Err(corrupt("trailing bytes".into()));
    }
    Ok(value)
}

/// The first `limit` characters of `text`.
pub fn bounded(text: &str, limit: usize) -> String {
    text.chars().take(limit).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An item with every field set, every number distinct.
    pub(crate) fn sample() -> NewItem {
        let item = ReviewItem {
            review_id: "0b7e3c1a-5d2f-4e8a-9c6b-1f2e3d4c5b6a".into(),
            request_id: "request-7".into(),
            created_ms: 1_760_000_000_123,
            asker: "alice".into(),
            question: "How much are hotel stays reimbursed per night in London?".into(),
            route: Route::Partial,
            answered: true,
            partial: true,
            abstention: None,
            acl_epoch: 42,
            sources: vec![
                SourceRecord {
                    label: "S1".into(),
                    chunk_id: [7; 16],
                    doc_id: "travel-policy".into(),
                    doc_version: 3,
                    doc_ordinal: 11,
                    chunk_ordinal: 2,
                    start: 120,
                    end: 480,
                },
                SourceRecord {
                    label: "S2".into(),
                    chunk_id: [9; 16],
                    doc_id: "london-rates".into(),
                    doc_version: 1,
                    doc_ordinal: 12,
                    chunk_ordinal: 0,
                    start: 0,
                    end: 90,
                },
            ],
            attempts: vec![AttemptRecord {
                number: 1,
                shown: vec!["S1".into(), "S2".into()],
                outcome: Some(AttemptOutcome::Answered),
                codes: vec![],
            }],
            claims: vec![
                ClaimRecord {
                    attempt: 1,
                    position: 1,
                    returned: true,
                    codes: vec!["unsupported_citation".into()],
                    citations: vec![CitationRecord { label: "S1".into(), quote_start: 134, quote_end: 157 }],
                    anchored: false,
                },
                ClaimRecord {
                    attempt: 1,
                    position: 2,
                    returned: false,
                    codes: vec!["unsupported_claim".into()],
                    citations: vec![],
                    anchored: false,
                },
            ],
            stages_ms: BTreeMap::from([("generation".into(), 12.5), ("retrieval".into(), 3.25)]),
        };
        let generated = GeneratedText {
            claims: vec![
                ClaimText {
                    text: Some("Hotel stays in London are reimbursed up to 250 GBP per night.".into()),
                    answer: None,
                    citations: vec![WrittenCitation { label: "S1".into(), quote: Some("up to 250 GBP".into()) }],
                },
                ClaimText {
                    text: Some("Breakfast is included.".into()),
                    answer: None,
                    citations: vec![WrittenCitation { label: "S2".into(), quote: None }],
                },
            ],
            outputs: vec![(1, r#"{"answerable": true, "claims": []}"#.into())],
        };
        let sources = BTreeMap::from([
            (
                "london-rates".to_owned(),
                vec![SourceText { label: "S2".into(), title: "London rates".into(), text: "London: 250 GBP".into() }],
            ),
            (
                "travel-policy".to_owned(),
                vec![SourceText {
                    label: "S1".into(),
                    title: "Travel policy".into(),
                    text: "Hotel stays are reimbursed up to 250 GBP per night in London.".into(),
                }],
            ),
        ]);
        NewItem { tenant: "acme".into(), item, sources, generated }
    }

    fn verdict() -> Verdict {
        Verdict {
            reviewer: "rita".into(),
            at_ms: 1_760_000_100_000,
            claims: vec![ClaimVerdict { index: 1, label: ClaimLabel::WrongCitation }],
            abstention: Some(AbstentionVerdict {
                label: AbstentionLabel::ShouldHaveAnswered,
                doc_id: Some("travel-policy".into()),
            }),
            note: Some("cites the wrong table".into()),
        }
    }

    fn golden(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reviews").join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        hex::decode(text.trim()).expect("golden files hold hex")
    }

    /// Format 1 stays readable: the committed encodings decode to the values they were made from,
    /// and encoding those values gives the same bytes. (To add a format, keep these files and add
    /// new ones.)
    #[test]
    fn golden_encodings_of_format_1_still_decode() {
        let sample = sample();
        let cases: [(&str, Vec<u8>); 4] = [
            ("item_v1.hex", encode(&sample.item)),
            ("sources_v1.hex", encode(&sample.sources["travel-policy"])),
            ("generated_v1.hex", encode(&sample.generated)),
            ("verdict_v1.hex", encode(&verdict())),
        ];
        if std::env::var_os("WARRANT_WRITE_GOLDEN").is_some() {
            for (name, bytes) in &cases {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reviews").join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, hex::encode(bytes) + "\n").unwrap();
            }
        }
        for (name, bytes) in &cases {
            assert_eq!(&golden(name), bytes, "{name}");
        }
        assert_eq!(decode::<ReviewItem>("item", &golden("item_v1.hex")).unwrap(), sample.item);
        assert_eq!(
            decode::<Vec<SourceText>>("sources", &golden("sources_v1.hex")).unwrap(),
            sample.sources["travel-policy"]
        );
        assert_eq!(decode::<GeneratedText>("generated", &golden("generated_v1.hex")).unwrap(), sample.generated);
        assert_eq!(decode::<Verdict>("verdict", &golden("verdict_v1.hex")).unwrap(), verdict());
    }

    #[test]
    fn damaged_encodings_are_refused_not_misread() {
        let bytes = encode(&sample().item);
        assert!(decode::<ReviewItem>("item", &[]).is_err());
        assert!(decode::<ReviewItem>("item", &bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<ReviewItem>("item", &longer).is_err());
        let mut other_format = bytes;
        other_format[0] = FORMAT + 1;
        assert!(decode::<ReviewItem>("item", &other_format).is_err());
    }

    #[test]
    fn labels_parse_exactly_their_names() {
        for name in ClaimLabel::NAMES {
            assert_eq!(ClaimLabel::parse(name).map(|label| label.as_str()), Some(*name));
        }
        for name in AbstentionLabel::NAMES {
            assert_eq!(AbstentionLabel::parse(name).map(|label| label.as_str()), Some(*name));
        }
        for name in ["Supported", "supported ", "correct", "", "unsupported_claim"] {
            assert_eq!(ClaimLabel::parse(name), None, "{name}");
            assert_eq!(AbstentionLabel::parse(name), None, "{name}");
        }
    }
}
