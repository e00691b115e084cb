//! Settings of the review queue (`[review]`): which answers are routed to human review, how the
//! queue is bounded, and what a reviewer may write. Off by default: an item keeps the question
//! and the cited text, so an operator turns it on knowingly.

use super::*;

/// The abstention reason codes of the HTTP contract (`shared/spec/API.md`), which
/// `review.abstentions` may name. `crate::review` holds a test that every reason the pipeline
/// can give is listed here.
pub const ABSTENTION_REASONS: &[&str] = &[
    "no_authorized_evidence",
    "insufficient_evidence",
    "invalid_output",
    "unsupported_citation",
    "missing_citation",
    "source_revoked",
    "generator_timeout",
    "generator_error",
    "context_overflow",
    "deadline_exceeded",
    "material_claim_unsupported",
];

/// `[review]`: routing policy and bounds of the review queue (see `crate::review`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewSettings {
    /// Route answers to review at all. Off: nothing is queued (items already stored stay
    /// readable by reviewers until they expire).
    pub enabled: bool,
    /// Abstentions queued, by reason code.
    pub abstentions: Vec<String>,
    /// Queue partial answers (claims withheld by validation).
    pub partial: bool,
    /// Share of answered requests queued as a sample, in 0..=1, decided by a keyed hash of the
    /// request id (deterministic for one `seed`).
    pub sample_answered: f64,
    /// Key of the sampling hash. Keep it private where clients choose their request ids
    /// (`x-request-id`): with it, a client could pick ids that are never sampled.
    pub seed: u64,
    /// Items waiting for the writer; when full, an item is dropped (counted), never waited for.
    pub queue_capacity: usize,
    /// Items older than this many days are deleted.
    pub retention_days: u64,
    /// Most items one tenant keeps; beyond, the oldest are deleted first (counted).
    pub max_items_per_tenant: u64,
    /// Longest reviewer note, in characters.
    pub max_note_chars: usize,
    /// Most verdicts one item keeps; beyond, 409 `too_many_verdicts` (issue 57: 3,000 verdicts
    /// made a 6.35 MB item, read whole for every further verdict).
    pub max_verdicts_per_item: u32,
}

impl Default for ReviewSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            abstentions: [
                "unsupported_citation",
                "missing_citation",
                "invalid_output",
                "source_revoked",
                "material_claim_unsupported",
            ]
            .map(str::to_owned)
            .to_vec(),
            partial: true,
            sample_answered: 0.02,
            seed: 0,
            queue_capacity: 1024,
            retention_days: 30,
            max_items_per_tenant: 10_000,
            max_note_chars: 2000,
            max_verdicts_per_item: 100,
        }
    }
}

impl ReviewSettings {
    /// The problems of these settings, each naming its key.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for reason in &self.abstentions {
            if !ABSTENTION_REASONS.contains(&reason.as_str()) {
                problems.push(format!(
                    "review.abstentions: {:?} is not an abstention reason (one of {})",
                    reason.chars().take(64).collect::<String>(),
                    ABSTENTION_REASONS.join(", ")
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.sample_answered) {
            problems.push("review.sample_answered must be in 0..=1".to_owned());
        }
        if !(1..=1_000_000).contains(&self.queue_capacity) {
            problems.push("review.queue_capacity must be in 1..=1000000".to_owned());
        }
        if !(1..=36_500).contains(&self.retention_days) {
            problems.push("review.retention_days must be in 1..=36500".to_owned());
        }
        if !(1..=100_000_000).contains(&self.max_items_per_tenant) {
            problems.push("review.max_items_per_tenant must be in 1..=100000000".to_owned());
        }
        if !(1..=100_000).contains(&self.max_note_chars) {
            problems.push("review.max_note_chars must be in 1..=100000".to_owned());
        }
        if !(1..=10_000).contains(&self.max_verdicts_per_item) {
            problems.push("review.max_verdicts_per_item must be in 1..=10000".to_owned());
        }
        problems
    }
}
