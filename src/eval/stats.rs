//! How far a mean over queries can be trusted: percentile bootstrap confidence intervals
//! (Efron & Tibshirani 1993) for one system's mean and for the mean paired difference of two
//! systems on the same queries (the test Sakai 2006 and Smucker et al. 2007 recommend for IR
//! comparisons).
//!
//! Deterministic: resampling uses a fixed seed, so a report is reproducible bit for bit.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 2_000;
/// Seed of the resampling generator.
const SEED: u64 = 0x5eed_ba11;

/// A mean with its 95 % percentile bootstrap interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// Mean over queries.
    pub mean: f64,
    /// 2.5th percentile of the resampled means.
    pub low: f64,
    /// 97.5th percentile of the resampled means.
    pub high: f64,
}

impl Interval {
    /// Whether the whole interval lies above zero (a paired difference that is not noise at
    /// the 95 % level).
    pub fn above_zero(&self) -> bool {
        self.low > 0.0
    }
}

/// The mean of `values` with its 95 % bootstrap interval (all three 0 for no values).
pub fn mean_interval(values: &[f64]) -> Interval {
    if values.is_empty() {
        return Interval { mean: 0.0, low: 0.0, high: 0.0 };
    }
    let count = values.len();
    let mean = values.iter().sum::<f64>() / count as f64;
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..count).map(|_| values[rng.gen_range(0..count)]).sum::<f64>() / count as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |quantile: f64| means[((quantile * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    Interval { mean, low: at(0.025), high: at(0.975) }
}

/// The mean paired difference `left - right` (same queries, same order) with its interval.
/// Pairs beyond the shorter slice are ignored.
pub fn paired_difference(left: &[f64], right: &[f64]) -> Interval {
    let differences: Vec<f64> = left.iter().zip(right).map(|(left, right)| left - right).collect();
    mean_interval(&differences)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_values_have_a_degenerate_interval() {
        let interval = mean_interval(&[0.5; 40]);
        assert_eq!(interval, Interval { mean: 0.5, low: 0.5, high: 0.5 });
        assert_eq!(mean_interval(&[]), Interval { mean: 0.0, low: 0.0, high: 0.0 });
    }

    #[test]
    fn interval_brackets_the_mean_and_narrows_with_more_queries() {
        let few: Vec<f64> = (0..20).map(|index| f64::from(index % 2)).collect();
        let many: Vec<f64> = (0..2_000).map(|index| f64::from(index % 2)).collect();
        let (few, many) = (mean_interval(&few), mean_interval(&many));
        for interval in [few, many] {
            assert!(interval.low < interval.mean && interval.mean < interval.high, "{interval:?}");
        }
        assert!(many.high - many.low < (few.high - few.low) / 5.0, "{few:?} {many:?}");
        // Standard error of a fair coin's mean over 2000 draws is ~0.011; the 95 % interval is
        // about ±1.96 of it.
        assert!((many.high - many.low - 2.0 * 1.96 * 0.5 / 2_000f64.sqrt()).abs() < 0.01, "{many:?}");
    }

    #[test]
    fn paired_difference_sees_a_consistent_small_gain_that_unpaired_intervals_hide() {
        // System b = a + 0.01 on every query, with a spread widely over [0, 1].
        let a: Vec<f64> = (0..300).map(|index| f64::from(index * 37 % 100) / 100.0).collect();
        let b: Vec<f64> = a.iter().map(|value| value + 0.01).collect();
        let (alone_a, alone_b) = (mean_interval(&a), mean_interval(&b));
        assert!(alone_b.low < alone_a.high, "unpaired intervals overlap");
        let difference = paired_difference(&b, &a);
        assert!(difference.above_zero(), "{difference:?}");
        assert!((difference.mean - 0.01).abs() < 1e-12);
        assert!(!paired_difference(&a, &b).above_zero());
    }
}
