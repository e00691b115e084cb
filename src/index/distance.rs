//! Dot products of f32 vectors with SIMD chosen at run time (pulp: AVX-512 / AVX2+FMA on x86-64,
//! NEON on aarch64, scalar elsewhere), and the flat store the vector index keeps its vectors in.
//!
//! Invariants kept by this module:
//! - [`dot`] gives the same result for the same inputs for the whole life of the process (the
//!   instruction set is detected once), so a score computed by the exact scan and by the graph
//!   walk of the same vector is bit-identical;
//! - [`dot`] agrees with [`dot_scalar`] to within rounding (the summation order differs: four
//!   FMA accumulators of the widest register instead of eight scalar lanes).

use std::sync::OnceLock;

use pulp::{Arch, Simd, WithSimd};

/// The instruction set detected on first use.
fn arch() -> Arch {
    static ARCH: OnceLock<Arch> = OnceLock::new();
    *ARCH.get_or_init(Arch::new)
}

/// The reference dot product: eight scalar accumulators (what the index used before SIMD; also
/// the embedders' cosine of unit vectors, re-exported as `embed::dot`).
#[inline]
pub fn dot_scalar(left: &[f32], right: &[f32]) -> f32 {
    debug_assert_eq!(left.len(), right.len());
    // Eight independent accumulators let the compiler vectorize without fast-math.
    let mut sums = [0f32; 8];
    let chunks = left.len() / 8 * 8;
    for (left_block, right_block) in left[..chunks].chunks_exact(8).zip(right[..chunks].chunks_exact(8)) {
        for lane in 0..8 {
            sums[lane] += left_block[lane] * right_block[lane];
        }
    }
    let tail: f32 = left[chunks..].iter().zip(&right[chunks..]).map(|(a, b)| a * b).sum();
    sums.iter().sum::<f32>() + tail
}

/// Dot product with the widest SIMD the CPU offers. `left` and `right` must have one length.
#[inline]
pub fn dot(left: &[f32], right: &[f32]) -> f32 {
    debug_assert_eq!(left.len(), right.len());
    arch().dispatch(Dot { left, right })
}

/// Name of the instruction set [`dot`] runs with (for benchmark output).
pub fn simd_name() -> &'static str {
    struct Name;
    impl WithSimd for Name {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            S::F32_LANES
        }
    }
    match arch().dispatch(Name) {
        16 => "avx512 (16 f32 lanes)",
        8 => "avx2+fma (8 f32 lanes)",
        4 => "128-bit (4 f32 lanes)",
        _ => "scalar",
    }
}

/// Bytes in one cache line.
const LINE_BYTES: usize = 64;

/// Asks the CPU to start loading every cache line of `values` into its caches and returns at
/// once: a hint for memory that will be read soon (the graph walk issues it for a neighbour
/// list's rows before scoring any of them, so their cache misses overlap instead of queueing
/// behind each dot product, and for the adjacency it will read next). It changes no value and
/// cannot fault; on targets other than x86-64 it does nothing.
#[inline(always)]
pub fn prefetch<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in values.chunks((LINE_BYTES / std::mem::size_of::<T>().max(1)).max(1)) {
        // SAFETY: `prefetcht0` only hints the cache: it loads nothing into a register, never
        // faults (even on an invalid address) and has no effect a program can observe but
        // timing; the address comes from a live slice anyway. SSE, the intrinsic's one target
        // feature, is part of the x86-64 baseline every build of this crate targets.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast::<i8>());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

struct Dot<'a> {
    left: &'a [f32],
    right: &'a [f32],
}

impl WithSimd for Dot<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        let length = self.left.len().min(self.right.len());
        let (left, left_tail) = S::as_simd_f32s(&self.left[..length]);
        let (right, right_tail) = S::as_simd_f32s(&self.right[..length]);
        // Four independent accumulators hide the FMA latency.
        let mut sums = [simd.splat_f32s(0.0); 4];
        let mut left_blocks = left.chunks_exact(4);
        let mut right_blocks = right.chunks_exact(4);
        for (left_block, right_block) in (&mut left_blocks).zip(&mut right_blocks) {
            for lane in 0..4 {
                sums[lane] = simd.mul_add_f32s(left_block[lane], right_block[lane], sums[lane]);
            }
        }
        for (left_value, right_value) in left_blocks.remainder().iter().zip(right_blocks.remainder()) {
            sums[0] = simd.mul_add_f32s(*left_value, *right_value, sums[0]);
        }
        let total = simd.add_f32s(simd.add_f32s(sums[0], sums[1]), simd.add_f32s(sums[2], sums[3]));
        let tail: f32 = left_tail.iter().zip(right_tail).map(|(a, b)| a * b).sum();
        simd.reduce_sum_f32s(total) + tail
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(dot(&[], &[]), 0.0);
        assert_eq!(dot(&[2.0], &[3.0]), 6.0);
        let ones = vec![1.0f32; 385];
        assert_eq!(dot(&ones, &ones), 385.0);
        assert!(!simd_name().is_empty());
    }

    #[test]
    fn prefetch_takes_any_slice_and_changes_nothing() {
        let values: Vec<f32> = (0..100).map(|value| value as f32).collect();
        for (start, end) in [(0, 0), (0, 100), (3, 50), (17, 18), (99, 100)] {
            prefetch(&values[start..end]);
        }
        prefetch::<f32>(&[]);
        prefetch::<u32>(&[1, 2, 3]);
        prefetch::<()>(&[(), ()]);
        assert!(values.iter().enumerate().all(|(position, value)| *value == position as f32));
    }

    proptest! {
        #[test]
        fn simd_dot_matches_scalar_dot(
            pairs in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..600),
        ) {
            let (left, right): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let simd = dot(&left, &right);
            let scalar = dot_scalar(&left, &right);
            // Relative to the magnitude of the terms (each product is at most 1 here).
            let scale = left.iter().zip(&right).map(|(a, b)| (a * b).abs()).sum::<f32>().max(1.0);
            prop_assert!((simd - scalar).abs() <= 1e-5 * scale, "simd {simd} scalar {scalar}");
        }
    }
}
