//! How far a mean over queries can be trusted: percentile bootstrap confidence intervals
//! (Efron & Tibshirani 1993) for one system's mean and for the mean paired difference of two
//! systems on the same queries (the test Sakai 2006 and Smucker et al. 2007 recommend for IR
//! comparisons).
//!
//! Any other statistic of a set of units (a precision, Cohen's kappa) gets its interval from
//! [`bootstrap`], which resamples the units themselves; [`cohen_kappa`] is Cohen (1960)'s
//! chance-corrected agreement of two raters.
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
    bootstrap(values.len(), |indices| indices.iter().map(|&index| values[index]).sum::<f64>() / indices.len() as f64)
}

/// The mean paired difference `left - right` (same queries, same order) with its interval.
/// Pairs beyond the shorter slice are ignored.
pub fn paired_difference(left: &[f64], right: &[f64]) -> Interval {
    let differences: Vec<f64> = left.iter().zip(right).map(|(left, right)| left - right).collect();
    mean_interval(&differences)
}

/// `statistic` of `count` units with its 95 % percentile bootstrap interval: `statistic` gets the
/// unit indices of one sample (`0..count` in order for the point value, then [`RESAMPLES`]
/// resamples drawn with replacement under a fixed seed). A resample whose statistic is undefined
/// (NaN, e.g. a precision with nothing predicted) is left out; with none defined, or no units,
/// the interval is the point value alone.
pub fn bootstrap(count: usize, statistic: impl Fn(&[usize]) -> f64) -> Interval {
    let all: Vec<usize> = (0..count).collect();
    let mean = statistic(&all);
    if count == 0 {
        return Interval { mean, low: mean, high: mean };
    }
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut indices = vec![0; count];
    let mut values: Vec<f64> = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        for index in &mut indices {
            *index = rng.gen_range(0..count);
        }
        let value = statistic(&indices);
        if !value.is_nan() {
            values.push(value);
        }
    }
    if values.is_empty() {
        return Interval { mean, low: mean, high: mean };
    }
    values.sort_by(f64::total_cmp);
    let last = values.len() - 1;
    let at = |quantile: f64| values[((quantile * last as f64).round() as usize).min(last)];
    Interval { mean, low: at(0.025), high: at(0.975) }
}

/// Cohen's kappa of two raters over `pairs` of category indices (each below `categories`):
/// (observed agreement − chance agreement) / (1 − chance agreement), chance agreement being the
/// sum over categories of the product of the two raters' shares. 1 when both raters put every
/// unit in one and the same category; NaN without pairs.
pub fn cohen_kappa(pairs: &[(usize, usize)], categories: usize) -> f64 {
    if pairs.is_empty() {
        return f64::NAN;
    }
    let count = pairs.len() as f64;
    let mut first = vec![0usize; categories];
    let mut second = vec![0usize; categories];
    let mut agreed = 0usize;
    for &(left, right) in pairs {
        debug_assert!(left < categories && right < categories, "category out of range");
        first[left] += 1;
        second[right] += 1;
        agreed += usize::from(left == right);
    }
    let observed = agreed as f64 / count;
    let chance: f64 =
        first.iter().zip(&second).map(|(&left, &right)| left as f64 * right as f64).sum::<f64>() / (count * count);
    if (1.0 - chance).abs() < f64::EPSILON {
        return if observed >= 1.0 { 1.0 } else { 0.0 };
    }
    (observed - chance) / (1.0 - chance)
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

    #[test]
    fn kappa_matches_hand_computed_cases() {
        // 50 units: both yes 20, yes/no 5, no/yes 10, both no 15. Observed 35/50 = 0.7; first
        // says yes 25/50, second 30/50; chance 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa 0.2 / 0.5.
        let mut pairs = vec![(0, 0); 20];
        pairs.extend([(0, 1); 5]);
        pairs.extend([(1, 0); 10]);
        pairs.extend([(1, 1); 15]);
        assert!((cohen_kappa(&pairs, 2) - 0.4).abs() < 1e-12);
        // Perfect agreement over three categories; total disagreement on a balanced pair.
        assert_eq!(cohen_kappa(&[(0, 0), (1, 1), (2, 2), (1, 1)], 3), 1.0);
        assert_eq!(cohen_kappa(&[(0, 1), (1, 0)], 2), -1.0);
        // One category only, agreed: 1; no pairs: undefined.
        assert_eq!(cohen_kappa(&[(3, 3); 4], 4), 1.0);
        assert!(cohen_kappa(&[], 2).is_nan());
        // Three categories: observed 4/6; first (2, 2, 2)/6, second (3, 2, 1)/6; chance
        // (6 + 4 + 2) / 36 = 1/3; kappa (2/3 - 1/3) / (2/3) = 0.5.
        let three = [(0, 0), (0, 0), (1, 1), (1, 0), (2, 1), (2, 2)];
        assert!((cohen_kappa(&three, 3) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn bootstrap_brackets_its_point_value_skips_undefined_resamples_and_is_seeded() {
        let flags: Vec<f64> = (0..200).map(|index| f64::from(u8::from(index % 4 != 0))).collect();
        let share = |indices: &[usize]| indices.iter().map(|&index| flags[index]).sum::<f64>() / indices.len() as f64;
        let interval = bootstrap(flags.len(), share);
        assert_eq!(interval.mean, 0.75);
        assert!(interval.low < 0.75 && 0.75 < interval.high, "{interval:?}");
        assert_eq!(bootstrap(flags.len(), share), interval, "seeded");
        // A ratio undefined on some resamples: those are skipped, the rest still bracket it.
        let rare: Vec<bool> = (0..40).map(|index| index == 7).collect();
        let ratio = |indices: &[usize]| {
            let hits = indices.iter().filter(|&&index| rare[index]).count();
            if hits == 0 { f64::NAN } else { 1.0 }
        };
        assert_eq!(bootstrap(rare.len(), ratio), Interval { mean: 1.0, low: 1.0, high: 1.0 });
        let empty = bootstrap(0, |_| f64::NAN);
        assert!(empty.mean.is_nan() && empty.low.is_nan());
    }
}
