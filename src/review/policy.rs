//! The routing policy (`[review]`): which finished answers go to human review. A pure decision
//! over an answer's outcome and request id: abstentions whose reason is listed, partial answers
//! (when `partial`), and a sample of the answered ones.
//!
//! Sampling is deterministic: an answer is sampled when the first 8 bytes of a keyed BLAKE3 hash
//! of its request id (the key derived from `review.seed`), read as a little-endian integer, fall
//! below `sample_answered * 2^64`. The same request id and seed always decide alike (a test or a
//! replayed request gets the same decision); without the seed, which ids are sampled cannot be
//! predicted from them.

use crate::config::ReviewSettings;

use super::item::Route;

/// The context string of the sampling key's derivation (BLAKE3 `derive_key`).
const SAMPLE_KEY_CONTEXT: &str = "warrant review sample 2025-01 v1";

/// What routing looks at of a finished answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// It answered; `partial` when validation withheld some of its claims.
    Answered {
        /// Claims were withheld.
        partial: bool,
    },
    /// It abstained with this reason code.
    Abstained(&'a str),
}

/// The routing policy of `[review]`.
#[derive(Clone, Debug)]
pub struct RoutingPolicy {
    enabled: bool,
    abstentions: Vec<String>,
    partial: bool,
    /// `sample_answered * 2^64`, saturating; `None` when every answer is sampled.
    sample_below: Option<u64>,
    key: [u8; 32],
}

impl RoutingPolicy {
    /// The policy of the settings.
    pub fn from_settings(settings: &ReviewSettings) -> Self {
        let rate = settings.sample_answered.clamp(0.0, 1.0);
        // 2^64 as f64 is exact; the product saturates in the cast.
        let sample_below = (rate < 1.0).then_some((rate * 18_446_744_073_709_551_616.0) as u64);
        Self {
            enabled: settings.enabled,
            abstentions: settings.abstentions.clone(),
            partial: settings.partial,
            sample_below,
            key: blake3::derive_key(SAMPLE_KEY_CONTEXT, &settings.seed.to_le_bytes()),
        }
    }

    /// Whether anything is ever routed.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Why the answer `request_id` with `outcome` goes to review, or `None`. An abstention is
    /// routed by its reason only; a partial answer as partial when the policy says so, else (like
    /// any answer) when sampled.
    pub fn route(&self, request_id: &str, outcome: Outcome<'_>) -> Option<Route> {
        if !self.enabled {
            return None;
        }
        match outcome {
            Outcome::Abstained(reason) => {
                self.abstentions.iter().any(|listed| listed == reason).then_some(Route::Abstention)
            }
            Outcome::Answered { partial: true } if self.partial => Some(Route::Partial),
            Outcome::Answered { .. } => self.sampled(request_id).then_some(Route::Sample),
        }
    }

    /// Whether an answered request with this id falls in the sample.
    pub fn sampled(&self, request_id: &str) -> bool {
        let Some(below) = self.sample_below else { return true };
        let hash = blake3::keyed_hash(&self.key, request_id.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        u64::from_le_bytes(first) < below
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(change: impl FnOnce(&mut ReviewSettings)) -> RoutingPolicy {
        let mut settings = ReviewSettings { enabled: true, ..ReviewSettings::default() };
        change(&mut settings);
        RoutingPolicy::from_settings(&settings)
    }

    #[test]
    fn each_outcome_is_routed_as_the_policy_says() {
        let default = policy(|_| {});
        for listed in [
            "unsupported_citation",
            "missing_citation",
            "invalid_output",
            "source_revoked",
            "material_claim_unsupported",
        ] {
            assert_eq!(default.route("r", Outcome::Abstained(listed)), Some(Route::Abstention), "{listed}");
        }
        for unlisted in ["no_authorized_evidence", "insufficient_evidence", "generator_timeout", "deadline_exceeded"] {
            assert_eq!(default.route("r", Outcome::Abstained(unlisted)), None, "{unlisted}");
        }
        assert_eq!(default.route("r", Outcome::Answered { partial: true }), Some(Route::Partial));
        let no_partial = policy(|settings| {
            settings.partial = false;
            settings.sample_answered = 0.0;
        });
        assert_eq!(no_partial.route("r", Outcome::Answered { partial: true }), None);
        let everything = policy(|settings| settings.sample_answered = 1.0);
        assert_eq!(everything.route("r", Outcome::Answered { partial: false }), Some(Route::Sample));
        let off = policy(|settings| {
            settings.enabled = false;
            settings.sample_answered = 1.0;
        });
        assert_eq!(off.route("r", Outcome::Abstained("invalid_output")), None);
        assert_eq!(off.route("r", Outcome::Answered { partial: true }), None);
        assert_eq!(off.route("r", Outcome::Answered { partial: false }), None);
    }

    /// The sample is deterministic for one seed, about the configured share, and another seed
    /// picks other requests.
    #[test]
    fn sampling_is_seeded_deterministic_and_near_its_rate() {
        let ids: Vec<String> = (0..100_000).map(|index| format!("request-{index}")).collect();
        let sampled = |policy: &RoutingPolicy| -> Vec<bool> { ids.iter().map(|id| policy.sampled(id)).collect() };
        let first = policy(|settings| settings.seed = 7);
        let picks = sampled(&first);
        assert_eq!(picks, sampled(&policy(|settings| settings.seed = 7)));
        let share = picks.iter().filter(|picked| **picked).count() as f64 / ids.len() as f64;
        // 0.02 ± 5 standard deviations of a binomial over 100,000 draws (0.00221).
        assert!((share - 0.02).abs() < 0.0023, "sampled {share}");
        let other = sampled(&policy(|settings| settings.seed = 8));
        let both = picks.iter().zip(&other).filter(|(a, b)| **a && **b).count();
        assert!(both < 200, "seeds 7 and 8 agree on {both} of ~2000 samples");
        assert!(sampled(&policy(|settings| settings.sample_answered = 0.0)).iter().all(|picked| !picked));
        assert!(sampled(&policy(|settings| settings.sample_answered = 1.0)).iter().all(|picked| *picked));
    }
}
