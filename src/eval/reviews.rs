//! Quality as people judged it (`warrant eval reviews`): figures from the verdicts stored in the
//! review queue (`crate::review`), never from the server's own verifier.
//!
//! A claim's label is the one its first verdict gives it (verdicts are kept oldest first); a
//! second reviewer's label of the same claim serves only for agreement. From those:
//! - human-judged groundedness: of the returned claims judged, the share labelled `supported`
//!   (`partially_supported` is not);
//! - citation precision: of the returned claims judged, the share not labelled `wrong_citation`;
//! - abstention correctness by reason: of the abstentions judged, the share labelled
//!   `correct_abstention`;
//! - the server's checks against the people: a claim the server returned is its "supported", a
//!   claim it withheld (for any rejection code) its "not supported"; the items hold both, so
//!   precision (returned claims judged `supported`) and recall (claims judged `supported` that
//!   were returned) are both measured;
//! - agreement between reviewers: Cohen's kappa (Cohen 1960) of the first two reviewers'
//!   labels wherever two reviewers judged the same claim (four categories) or abstention (two).
//!
//! Every share and kappa comes with a 95 % percentile bootstrap interval over the judged units
//! (claims, abstentions, pairs), seeded ([`super::stats::bootstrap`]). An item counts when it
//! was created at or after `since` (the answer's time, not the verdict's).

use std::collections::BTreeMap;

use serde::Serialize;

use super::stats::{Interval, bootstrap, cohen_kappa};
use crate::review::{AbstentionLabel, ClaimLabel, StoredItem};

/// A share with its interval, and how many units it is over.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Share {
    /// Units judged.
    pub judged: usize,
    /// The share with its 95 % bootstrap interval.
    pub rate: Interval,
}

impl Share {
    fn of(flags: &[bool]) -> Option<Self> {
        if flags.is_empty() {
            return None;
        }
        let rate = bootstrap(flags.len(), |indices| {
            indices.iter().filter(|&&index| flags[index]).count() as f64 / indices.len() as f64
        });
        Some(Self { judged: flags.len(), rate })
    }
}

/// The server's checks judged against the people's labels.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerAgreement {
    /// Claims judged (returned or withheld).
    pub claims: usize,
    /// Returned, judged `supported`.
    pub true_positives: usize,
    /// Returned, judged otherwise.
    pub false_positives: usize,
    /// Withheld, judged otherwise.
    pub true_negatives: usize,
    /// Withheld, judged `supported`.
    pub false_negatives: usize,
    /// Returned claims judged `supported` over returned claims judged.
    pub precision: Interval,
    /// Claims judged `supported` that were returned, over claims judged `supported`.
    pub recall: Interval,
}

/// Agreement of two reviewers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Kappa {
    /// Units both judged.
    pub pairs: usize,
    /// Share of pairs with the same label.
    pub observed: f64,
    /// Cohen's kappa with its interval.
    pub kappa: Interval,
}

/// The report of `warrant eval reviews`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReviewsReport {
    /// Items created at or after this time (ms since the Unix epoch) were counted.
    pub since_ms: u64,
    /// Reviewed items counted.
    pub items: usize,
    /// Verdicts on them.
    pub verdicts: usize,
    /// Labels of returned claims (first verdict), by label.
    pub returned_labels: BTreeMap<String, usize>,
    /// Labels of withheld claims (first verdict), by label.
    pub withheld_labels: BTreeMap<String, usize>,
    /// Human-judged groundedness: returned claims judged `supported`.
    pub groundedness: Option<Share>,
    /// Returned claims not judged `wrong_citation`.
    pub citation_precision: Option<Share>,
    /// Per abstention reason: abstentions judged `correct_abstention`.
    pub abstention_correctness: BTreeMap<String, Share>,
    /// The server's checks against the people (claims returned against claims judged supported).
    pub server_checks: Option<ServerAgreement>,
    /// Two reviewers on one claim.
    pub claim_agreement: Option<Kappa>,
    /// Two reviewers on one abstention.
    pub abstention_agreement: Option<Kappa>,
}

fn claim_category(label: ClaimLabel) -> usize {
    match label {
        ClaimLabel::Supported => 0,
        ClaimLabel::PartiallySupported => 1,
        ClaimLabel::Unsupported => 2,
        ClaimLabel::WrongCitation => 3,
    }
}

fn abstention_category(label: AbstentionLabel) -> usize {
    match label {
        AbstentionLabel::CorrectAbstention => 0,
        AbstentionLabel::ShouldHaveAnswered => 1,
    }
}

fn kappa(pairs: &[(usize, usize)], categories: usize) -> Option<Kappa> {
    if pairs.is_empty() {
        return None;
    }
    let agreed = pairs.iter().filter(|(left, right)| left == right).count();
    let kappa = bootstrap(pairs.len(), |indices| {
        let sample: Vec<(usize, usize)> = indices.iter().map(|&index| pairs[index]).collect();
        cohen_kappa(&sample, categories)
    });
    Some(Kappa { pairs: pairs.len(), observed: agreed as f64 / pairs.len() as f64, kappa })
}

/// The labels the first two distinct reviewers gave one unit, in verdict order: the first
/// reviewer's first label and, when another reviewer judged it too, theirs.
fn first_two<T: Copy>(labels: impl Iterator<Item = (String, T)>) -> (Option<T>, Option<T>) {
    let mut first: Option<(String, T)> = None;
    for (reviewer, label) in labels {
        match &first {
            None => first = Some((reviewer, label)),
            Some((by, first_label)) if *by != reviewer => return (Some(*first_label), Some(label)),
            Some(_) => {}
        }
    }
    (first.map(|(_, label)| label), None)
}

/// Aggregates the verdicts of `items` created at or after `since_ms` (see the module's
/// documentation).
pub fn report(items: &[StoredItem], since_ms: u64) -> ReviewsReport {
    let items: Vec<&StoredItem> =
        items.iter().filter(|stored| stored.item.created_ms >= since_ms && !stored.verdicts.is_empty()).collect();
    let mut returned_labels = BTreeMap::new();
    let mut withheld_labels = BTreeMap::new();
    // (returned, label) of every judged claim.
    let mut judged: Vec<(bool, ClaimLabel)> = Vec::new();
    let mut claim_pairs = Vec::new();
    let mut abstentions: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    let mut abstention_pairs = Vec::new();
    for stored in &items {
        for (index, claim) in stored.item.claims.iter().enumerate() {
            let labels = stored.verdicts.iter().flat_map(|verdict| {
                verdict
                    .claims
                    .iter()
                    .filter(move |judged| judged.index as usize == index)
                    .map(move |judged| (verdict.reviewer.clone(), judged.label))
            });
            let (Some(first), second) = first_two(labels) else { continue };
            let counts = if claim.returned { &mut returned_labels } else { &mut withheld_labels };
            *counts.entry(first.as_str().to_owned()).or_insert(0) += 1;
            judged.push((claim.returned, first));
            if let Some(second) = second {
                claim_pairs.push((claim_category(first), claim_category(second)));
            }
        }
        let Some(abstention) = &stored.item.abstention else { continue };
        let labels = stored
            .verdicts
            .iter()
            .filter_map(|verdict| verdict.abstention.as_ref().map(|judged| (verdict.reviewer.clone(), judged.label)));
        let (Some(first), second) = first_two(labels) else { continue };
        abstentions.entry(abstention.reason.clone()).or_default().push(first == AbstentionLabel::CorrectAbstention);
        if let Some(second) = second {
            abstention_pairs.push((abstention_category(first), abstention_category(second)));
        }
    }
    let returned: Vec<ClaimLabel> = judged.iter().filter(|(returned, _)| *returned).map(|(_, label)| *label).collect();
    let groundedness: Vec<bool> = returned.iter().map(|label| *label == ClaimLabel::Supported).collect();
    let cited_right: Vec<bool> = returned.iter().map(|label| *label != ClaimLabel::WrongCitation).collect();
    ReviewsReport {
        since_ms,
        items: items.len(),
        verdicts: items.iter().map(|stored| stored.verdicts.len()).sum(),
        returned_labels,
        withheld_labels,
        groundedness: Share::of(&groundedness),
        citation_precision: Share::of(&cited_right),
        abstention_correctness: abstentions
            .into_iter()
            .filter_map(|(reason, flags)| Share::of(&flags).map(|share| (reason, share)))
            .collect(),
        server_checks: server_checks(&judged),
        claim_agreement: kappa(&claim_pairs, 4),
        abstention_agreement: kappa(&abstention_pairs, 2),
    }
}

/// Precision and recall of "returned" against "judged supported" over `judged` claims.
fn server_checks(judged: &[(bool, ClaimLabel)]) -> Option<ServerAgreement> {
    if judged.is_empty() {
        return None;
    }
    let outcomes: Vec<(bool, bool)> =
        judged.iter().map(|(returned, label)| (*returned, *label == ClaimLabel::Supported)).collect();
    let count = |indices: &[usize], wanted: (bool, bool)| {
        indices.iter().filter(|&&index| outcomes[index] == wanted).count() as f64
    };
    let ratio = |hits: f64, of: f64| if of == 0.0 { f64::NAN } else { hits / of };
    let precision = bootstrap(outcomes.len(), |indices| {
        let hits = count(indices, (true, true));
        ratio(hits, hits + count(indices, (true, false)))
    });
    let recall = bootstrap(outcomes.len(), |indices| {
        let hits = count(indices, (true, true));
        ratio(hits, hits + count(indices, (false, true)))
    });
    let all: Vec<usize> = (0..outcomes.len()).collect();
    Some(ServerAgreement {
        claims: outcomes.len(),
        true_positives: count(&all, (true, true)) as usize,
        false_positives: count(&all, (true, false)) as usize,
        true_negatives: count(&all, (false, false)) as usize,
        false_negatives: count(&all, (false, true)) as usize,
        precision,
        recall,
    })
}

/// A time given to `--since`: milliseconds since the Unix epoch, a UTC date `YYYY-MM-DD`, a UTC
/// time `YYYY-MM-DDTHH:MM:SSZ`, or an age before `now_ms` (`90m`, `36h`, `7d`).
pub fn parse_since(text: &str, now_ms: u64) -> Result<u64, String> {
    let text = text.trim();
    let refused = || {
        format!(
            "--since {text:?}: give milliseconds since the epoch, YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or an age such as 7d"
        )
    };
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    if let Some(unit) = text.chars().last().filter(|unit| matches!(unit, 'm' | 'h' | 'd')) {
        let amount: u64 = text[..text.len() - 1].parse().map_err(|_| refused())?;
        let per = match unit {
            'm' => 60_000,
            'h' => 3_600_000,
            _ => 86_400_000,
        };
        return Ok(now_ms.saturating_sub(amount.saturating_mul(per)));
    }
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z').ok_or_else(refused)?)),
        None => (text, None),
    };
    let numbers = |part: &str, separator: char, count: usize| -> Result<Vec<i64>, String> {
        let numbers: Vec<i64> =
            part.split(separator).map(|number| number.parse().map_err(|_| refused())).collect::<Result<_, _>>()?;
        if numbers.len() == count { Ok(numbers) } else { Err(refused()) }
    };
    let date = numbers(date, '-', 3)?;
    let (year, month, day) = (date[0], date[1], date[2]);
    if !(1970..=9999).contains(&year) || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(refused());
    }
    let clock = match time {
        Some(time) => numbers(time, ':', 3)?,
        None => vec![0, 0, 0],
    };
    if !(0..24).contains(&clock[0]) || !(0..60).contains(&clock[1]) || !(0..61).contains(&clock[2]) {
        return Err(refused());
    }
    // Days from civil (Howard Hinnant's algorithm), proleptic Gregorian.
    let shifted = if month <= 2 { year - 1 } else { year };
    let era = shifted.div_euclid(400);
    let year_of_era = shifted - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + clock[0] * 3_600 + clock[1] * 60 + clock[2];
    u64::try_from(seconds * 1_000).map_err(|_| refused())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::item::{AbstentionRecord, AbstentionVerdict, ClaimVerdict, Verdict};

    /// An item whose claims were `returned` (one entry per claim), abstaining for `reason` when
    /// given, created at `created_ms`, with `verdicts`.
    fn item(returned: &[bool], reason: Option<&str>, created_ms: u64, verdicts: Vec<Verdict>) -> StoredItem {
        let mut new = crate::review::item::tests::sample();
        let template = new.item.claims[0].clone();
        new.item.claims = returned
            .iter()
            .map(|&returned| crate::review::item::ClaimRecord { returned, ..template.clone() })
            .collect();
        new.item.abstention =
            reason.map(|reason| AbstentionRecord { reason: reason.to_owned(), diagnostics: Vec::new() });
        new.item.created_ms = created_ms;
        StoredItem { seq: 1, item: new.item, sources: BTreeMap::new(), generated: None, verdicts }
    }

    fn verdict(reviewer: &str, claims: &[(u32, ClaimLabel)], abstention: Option<AbstentionLabel>) -> Verdict {
        Verdict {
            reviewer: reviewer.to_owned(),
            at_ms: 0,
            claims: claims.iter().map(|&(index, label)| ClaimVerdict { index, label }).collect(),
            abstention: abstention.map(|label| AbstentionVerdict { label, doc_id: None }),
            note: None,
        }
    }

    fn inside(interval: Interval) {
        assert!(interval.low <= interval.mean && interval.mean <= interval.high, "{interval:?}");
    }

    #[test]
    fn figures_match_a_hand_computed_set() {
        use ClaimLabel::*;
        let items = vec![
            // Returned: supported, wrong_citation; withheld: supported (a server miss).
            item(
                &[true, true, false],
                None,
                10,
                vec![verdict("ann", &[(0, Supported), (1, WrongCitation), (2, Supported)], None)],
            ),
            // Returned: partially_supported; withheld: unsupported. A second reviewer disagrees on
            // claim 0 and agrees on claim 1.
            item(
                &[true, false],
                None,
                20,
                vec![
                    verdict("ann", &[(0, PartiallySupported), (1, Unsupported)], None),
                    verdict("ann", &[(0, Supported)], None),
                    verdict("bob", &[(0, Supported), (1, Unsupported)], None),
                ],
            ),
            // Returned: supported, supported; bob agrees on both.
            item(
                &[true, true],
                None,
                30,
                vec![
                    verdict("cy", &[(0, Supported), (1, Supported)], None),
                    verdict("bob", &[(0, Supported), (1, Supported)], None),
                ],
            ),
            // Abstentions: two judged right, one wrong, one reason each; the last judged twice.
            item(
                &[],
                Some("unsupported_citation"),
                40,
                vec![verdict("ann", &[], Some(AbstentionLabel::CorrectAbstention))],
            ),
            item(
                &[],
                Some("unsupported_citation"),
                50,
                vec![verdict("ann", &[], Some(AbstentionLabel::ShouldHaveAnswered))],
            ),
            item(
                &[],
                Some("invalid_output"),
                60,
                vec![
                    verdict("ann", &[], Some(AbstentionLabel::CorrectAbstention)),
                    verdict("bob", &[], Some(AbstentionLabel::CorrectAbstention)),
                ],
            ),
            // Unreviewed: not counted.
            item(&[true], None, 70, vec![]),
        ];
        let report = report(&items, 0);
        assert_eq!((report.items, report.verdicts), (6, 10));
        // Returned claims judged: supported, wrong_citation, partially_supported, supported, supported.
        let groundedness = report.groundedness.unwrap();
        assert_eq!(groundedness.judged, 5);
        assert!((groundedness.rate.mean - 3.0 / 5.0).abs() < 1e-12);
        assert!((report.citation_precision.unwrap().rate.mean - 4.0 / 5.0).abs() < 1e-12);
        assert_eq!(report.returned_labels["supported"], 3);
        assert_eq!(report.withheld_labels, BTreeMap::from([("supported".into(), 1), ("unsupported".into(), 1)]));
        // Server: returned & supported 3, returned & not 2, withheld & supported 1, withheld & not 1.
        let server = report.server_checks.clone().unwrap();
        assert_eq!(
            (server.true_positives, server.false_positives, server.false_negatives, server.true_negatives),
            (3, 2, 1, 1)
        );
        assert!((server.precision.mean - 3.0 / 5.0).abs() < 1e-12);
        assert!((server.recall.mean - 3.0 / 4.0).abs() < 1e-12);
        // Abstentions by reason.
        assert_eq!(report.abstention_correctness["unsupported_citation"].rate.mean, 0.5);
        assert_eq!(report.abstention_correctness["invalid_output"].rate.mean, 1.0);
        // Claim pairs (ann's first label, not her second, against bob): (partial, supported),
        // (unsupported, unsupported), (supported, supported) twice. Observed 3/4; first rater
        // (supported 2, partial 1, unsupported 1), second (supported 3, unsupported 1): chance
        // (2*3 + 0 + 1*1) / 16 = 7/16; kappa (12/16 - 7/16) / (9/16) = 5/9.
        let claims = report.claim_agreement.unwrap();
        assert_eq!((claims.pairs, claims.observed), (4, 0.75));
        assert!((claims.kappa.mean - 5.0 / 9.0).abs() < 1e-12, "{claims:?}");
        let abstentions = report.abstention_agreement.unwrap();
        assert_eq!((abstentions.pairs, abstentions.kappa.mean), (1, 1.0));
        for interval in [groundedness.rate, server.precision, server.recall, claims.kappa] {
            inside(interval);
        }
        assert_eq!(super::report(&items, 0), report, "seeded");
        // Since: only the items created at or after 30.
        let later = super::report(&items, 30);
        assert_eq!(later.items, 4);
        assert_eq!(later.groundedness.unwrap().rate.mean, 1.0);
        // Nothing reviewed: no figure, no panic.
        let empty = super::report(&items[6..], 0);
        assert_eq!((empty.items, empty.groundedness, empty.server_checks), (0, None, None));
    }

    #[test]
    fn since_accepts_epochs_dates_times_and_ages() {
        assert_eq!(parse_since("1700000000000", 0), Ok(1_700_000_000_000));
        assert_eq!(parse_since("1970-01-01", 0), Ok(0));
        assert_eq!(parse_since("2000-03-01", 0), Ok(951_868_800_000));
        assert_eq!(parse_since("2026-12-06T16:30:00Z", 0), Ok(1_796_574_600_000));
        assert_eq!(parse_since("7d", 10 * 86_400_000), Ok(3 * 86_400_000));
        assert_eq!(parse_since("2h", 1_000), Ok(0), "never before the epoch");
        for bad in
            ["", "yesterday", "2026-13-01", "2026-12-06T16:30:00", "2026-12", "-5d", "5w", "2026-12-06T25:00:00Z"]
        {
            assert!(parse_since(bad, 0).is_err(), "{bad}");
        }
    }
}
