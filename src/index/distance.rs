//! Dot products with SIMD chosen at run time, and the cache prefetch hint of the graph walk.
//!
//! - [`dot`]: two f32 vectors (pulp: AVX-512 / AVX2+FMA on x86-64, NEON on aarch64, scalar
//!   elsewhere); the embedders' and the verifier's cosine.
//! - [`dot_half`] / [`dot_halves`]: an f32 query with a stored row, and two stored rows. The
//!   vector index keeps its vectors as IEEE 754 binary16 ([`Half`]: half the bytes of f32, and
//!   the graph walk's cost is reading rows from memory; BENCHMARKS.md, "Vectors stored as
//!   binary16"). Rows are widened to f32 in registers (AVX-512F `vcvtph2ps`, or AVX2 + F16C +
//!   FMA) and multiplied in f32; elsewhere a portable loop widens them one by one.
//!
//! Invariants kept by this module:
//! - each function gives the same result for the same inputs for the whole life of the process
//!   (the instruction set is detected once), so a score computed by the exact scan and by the
//!   graph walk of the same row is bit-identical;
//! - `dot_halves(a, b) == dot_halves(b, a) == dot_half(&widen(a), b)` to the bit (widening is
//!   exact and the same lanes are summed in the same order);
//! - every dot agrees with [`dot_scalar`] over the widened values to within rounding (the
//!   summation order differs).

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

/// Bytes in one cache line.
const LINE_BYTES: usize = 64;

/// Asks the CPU to start loading every cache line of `values` into its caches and returns at
/// once: a hint for memory that will be read soon (the graph walk issues it for the rows a few
/// places ahead in a neighbour list, so their cache misses overlap instead of queueing behind
/// each dot product, and for the adjacency it will read next). It changes no value and
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

/// One stored vector component: the bits of an IEEE 754 binary16 value.
pub type Half = u16;

/// Largest magnitude a component may have to be stored ([`to_half`] keeps it finite).
pub const HALF_MAX: f32 = 65504.0;

/// Whether `value` can be stored as a [`Half`] without becoming infinite or NaN.
#[inline]
pub fn fits_half(value: f32) -> bool {
    value.is_finite() && value.abs() <= HALF_MAX
}

/// Whether the binary16 `bits` are finite (their exponent is not all ones: not infinite, not NaN).
#[inline]
pub fn half_is_finite(bits: Half) -> bool {
    bits & 0x7c00 != 0x7c00
}

/// `values` rounded to binary16 (to nearest, ties to even) into `out` (one length; half's
/// slice conversion: F16C four or eight at a time where the CPU has it).
pub fn to_half(values: &[f32], out: &mut [Half]) {
    use half::slice::HalfFloatSliceExt;
    bytemuck::cast_slice_mut::<Half, half::f16>(out).convert_from_f32_slice(values);
}

/// `halves` widened to f32 (exact).
pub fn from_half(halves: &[Half]) -> Vec<f32> {
    use half::slice::HalfFloatSliceExt;
    bytemuck::cast_slice::<Half, half::f16>(halves).to_f32_vec()
}

/// `bits` widened to f32 (exact).
#[inline(always)]
pub fn widen(bits: Half) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// The kernels [`dot_half`] can run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HalfKernel {
    /// 16 lanes: AVX-512F (`vcvtph2ps` on 512-bit registers).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// 8 lanes: AVX2 + FMA + F16C.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Sixteen accumulators over branch-free widened components, vectorized by the compiler.
    Portable,
}

impl HalfKernel {
    /// The widest kernel this CPU runs (detected once).
    fn detected() -> Self {
        static KERNEL: OnceLock<HalfKernel> = OnceLock::new();
        *KERNEL.get_or_init(|| Self::available()[0])
    }

    /// Every kernel this CPU runs, widest first (the portable one last, always there; tests
    /// compare them all).
    fn available() -> Vec<Self> {
        let mut kernels = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                kernels.push(HalfKernel::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                kernels.push(HalfKernel::Avx2);
            }
        }
        kernels.push(HalfKernel::Portable);
        kernels
    }

    fn dot(self, query: &[f32], row: &[Half]) -> f32 {
        let length = query.len().min(row.len());
        let (query, row) = (&query[..length], &row[..length]);
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the kernel was detected (`detected`, `available`): this CPU has AVX-512F.
            #[allow(unsafe_code)]
            HalfKernel::Avx512 => unsafe { x86::dot_avx512(query, row) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the kernel was detected: this CPU has AVX2, FMA and F16C.
            #[allow(unsafe_code)]
            HalfKernel::Avx2 => unsafe { x86::dot_avx2(query, row) },
            HalfKernel::Portable => dot_portable(query, row),
        }
    }

    /// [`HalfKernel::dot`] of `left` widened, without widening it first.
    fn dot_halves(self, left: &[Half], right: &[Half]) -> f32 {
        let length = left.len().min(right.len());
        let (left, right) = (&left[..length], &right[..length]);
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `dot`.
            #[allow(unsafe_code)]
            HalfKernel::Avx512 => unsafe { x86::dot_halves_avx512(left, right) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `dot`.
            #[allow(unsafe_code)]
            HalfKernel::Avx2 => unsafe { x86::dot_halves_avx2(left, right) },
            HalfKernel::Portable => dot_portable(left, right),
        }
    }

    fn name(self) -> &'static str {
        match self {
            #[cfg(target_arch = "x86_64")]
            HalfKernel::Avx512 => "avx512f (16 lanes, vcvtph2ps)",
            #[cfg(target_arch = "x86_64")]
            HalfKernel::Avx2 => "avx2+fma+f16c (8 lanes)",
            HalfKernel::Portable => "portable",
        }
    }
}

/// Dot product of an f32 `query` with a stored binary16 `row` (over the shorter length), with
/// the widest kernel the CPU offers: what the vector index scores with.
#[inline]
pub fn dot_half(query: &[f32], row: &[Half]) -> f32 {
    HalfKernel::detected().dot(query, row)
}

/// Dot product of two stored rows: `dot_half` of `left` widened (exact) with `right`, to the
/// bit (the graph's construction compares stored rows with each other).
#[inline]
pub fn dot_halves(left: &[Half], right: &[Half]) -> f32 {
    HalfKernel::detected().dot_halves(left, right)
}

/// Name of the kernel [`dot_half`] runs with (for benchmark output).
pub fn half_kernel_name() -> &'static str {
    HalfKernel::detected().name()
}

/// A component a kernel's left operand may be: an f32 query's, or a stored row's.
trait Component: Copy {
    fn value(self) -> f32;
}

impl Component for f32 {
    #[inline(always)]
    fn value(self) -> f32 {
        self
    }
}

impl Component for Half {
    #[inline(always)]
    fn value(self) -> f32 {
        widen_finite(self)
    }
}

/// The scalar tail every kernel ends with.
#[inline(always)]
fn tail<L: Component>(left: &[L], row: &[Half]) -> f32 {
    left.iter().zip(row).map(|(value, &bits)| value.value() * widen_finite(bits)).sum()
}

/// `bits` widened to f32 without a branch, exact for every finite binary16 value (the only
/// values a stored row holds: inserts and images refuse the others); an infinity or NaN comes
/// out as a finite value instead. The magnitude's exponent and fraction bits are shifted into
/// an f32's fields as they stand, which reads as the value times 2^-112 (the exponent biases
/// are 15 and 127); the product with 2^112 restores it exactly, subnormals included (scaling
/// by a power of two does not round when the result is an f32 normal, as every binary16 value
/// is); the sign goes back on last. Lane-wise integer and float operations only, so the
/// compiler vectorizes it (SSE2, NEON) where no conversion instruction is detected.
#[inline(always)]
fn widen_finite(bits: Half) -> f32 {
    const TWO_TO_112: f32 = f32::from_bits((112 + 127) << 23);
    let sign = u32::from(bits & 0x8000) << 16;
    let magnitude = f32::from_bits(u32::from(bits & 0x7fff) << 13) * TWO_TO_112;
    f32::from_bits(magnitude.to_bits() | sign)
}

/// Lanes of the portable kernel: sixteen independent accumulators, which the compiler maps
/// onto whatever vector registers the target has (four of SSE2 or NEON), with the widening of
/// the row's components in the same registers.
const PORTABLE_LANES: usize = 16;

/// The portable kernel (every target; the widest one on aarch64 and on x86-64 without
/// AVX2+FMA+F16C): sixteen accumulators over branch-free widened components, then a scalar
/// tail. Rows are finite, so it equals the scalar dot of the widened row up to the order of
/// the sums.
fn dot_portable<L: Component>(left: &[L], row: &[Half]) -> f32 {
    let mut sums = [0f32; PORTABLE_LANES];
    let chunks = left.len() / PORTABLE_LANES * PORTABLE_LANES;
    for (left_block, row_block) in
        left[..chunks].chunks_exact(PORTABLE_LANES).zip(row[..chunks].chunks_exact(PORTABLE_LANES))
    {
        for lane in 0..PORTABLE_LANES {
            sums[lane] += left_block[lane].value() * row_block[lane].value();
        }
    }
    sums.iter().sum::<f32>() + tail(&left[chunks..], &row[chunks..])
}

/// The x86-64 kernels, one per left operand (an f32 query, or a stored row widened in
/// registers: the same lanes, so the same sums). They read whole registers through `bytemuck`
/// casts of fixed-size arrays (no pointer arithmetic), sum four independent accumulators (FMA
/// latency), then the remaining whole registers into the first, then a scalar tail.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256, __m256i, __m512, _mm_add_ps, _mm_cvtss_f32, _mm_movehl_ps, _mm_shuffle_ps, _mm256_add_ps,
        _mm256_castps256_ps128, _mm256_cvtph_ps, _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_setzero_ps,
        _mm512_add_ps, _mm512_cvtph_ps, _mm512_fmadd_ps, _mm512_reduce_add_ps, _mm512_setzero_ps,
    };

    use super::{Half, tail};

    /// A kernel named `$name` on `$lanes`-lane registers (`$features`) whose left operand is
    /// `[$left]`, read by `$load`; rows are widened by `$widen`, summed with `$fmadd` and `$add`
    /// and reduced by `$reduce`.
    macro_rules! kernel {
        ($name:ident, $features:literal, $lanes:literal, $left:ty, $load:ident, $widen:ident, $zero:ident,
         $fmadd:ident, $add:ident, $reduce:ident) => {
            #[target_feature(enable = $features)]
            pub(super) fn $name(left: &[$left], row: &[Half]) -> f32 {
                let (left_registers, left_tail) = left.as_chunks::<$lanes>();
                let (row_registers, row_tail) = row.as_chunks::<$lanes>();
                let mut sums = [$zero(); 4];
                let mut left_blocks = left_registers.chunks_exact(4);
                let mut row_blocks = row_registers.chunks_exact(4);
                for (left_block, row_block) in (&mut left_blocks).zip(&mut row_blocks) {
                    for lane in 0..4 {
                        sums[lane] = $fmadd($load(&left_block[lane]), $widen(&row_block[lane]), sums[lane]);
                    }
                }
                for (left_values, row_bits) in left_blocks.remainder().iter().zip(row_blocks.remainder()) {
                    sums[0] = $fmadd($load(left_values), $widen(row_bits), sums[0]);
                }
                $reduce($add($add(sums[0], sums[1]), $add(sums[2], sums[3]))) + tail(left_tail, row_tail)
            }
        };
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn load16(values: &[f32; 16]) -> __m512 {
        bytemuck::cast(*values)
    }

    #[target_feature(enable = "avx512f")]
    #[inline]
    fn widen16(bits: &[Half; 16]) -> __m512 {
        _mm512_cvtph_ps(bytemuck::cast::<[Half; 16], __m256i>(*bits))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load8(values: &[f32; 8]) -> __m256 {
        bytemuck::cast(*values)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn widen8(bits: &[Half; 8]) -> __m256 {
        _mm256_cvtph_ps(bytemuck::cast::<[Half; 8], __m128i>(*bits))
    }

    /// (low half + high half), then pairs, then the last two: a fixed order.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn reduce8(total: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps::<1>(total));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ps(pair, _mm_shuffle_ps::<0b01>(pair, pair)))
    }

    kernel!(
        dot_avx512,
        "avx512f",
        16,
        f32,
        load16,
        widen16,
        _mm512_setzero_ps,
        _mm512_fmadd_ps,
        _mm512_add_ps,
        _mm512_reduce_add_ps
    );
    kernel!(
        dot_halves_avx512,
        "avx512f",
        16,
        Half,
        widen16,
        widen16,
        _mm512_setzero_ps,
        _mm512_fmadd_ps,
        _mm512_add_ps,
        _mm512_reduce_add_ps
    );
    kernel!(
        dot_avx2,
        "avx2,fma,f16c",
        8,
        f32,
        load8,
        widen8,
        _mm256_setzero_ps,
        _mm256_fmadd_ps,
        _mm256_add_ps,
        reduce8
    );
    kernel!(
        dot_halves_avx2,
        "avx2,fma,f16c",
        8,
        Half,
        widen8,
        widen8,
        _mm256_setzero_ps,
        _mm256_fmadd_ps,
        _mm256_add_ps,
        reduce8
    );
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

    /// `value` rounded to binary16 (as `to_half` rounds it).
    fn narrow(value: f32) -> Half {
        let mut out = [0];
        to_half(&[value], &mut out);
        out[0]
    }

    #[test]
    fn binary16_bounds_and_rounding() {
        assert!(fits_half(HALF_MAX) && fits_half(-HALF_MAX) && fits_half(0.0));
        assert!(!fits_half(65505.0) && !fits_half(f32::INFINITY) && !fits_half(f32::NAN));
        assert_eq!(narrow(1.0), 0x3c00);
        assert_eq!(narrow(-2.0), 0xc000);
        assert_eq!(widen(narrow(HALF_MAX)), HALF_MAX);
        assert!(half_is_finite(narrow(HALF_MAX)) && half_is_finite(narrow(-0.0)) && half_is_finite(1));
        assert!(!half_is_finite(narrow(f32::INFINITY)) && !half_is_finite(narrow(f32::NAN)));
        assert!(!half_is_finite(narrow(-65520.0)));
        // 11 significant bits: 1 + 2^-11 is a tie and rounds to even (1), 1 + 3 * 2^-11 up.
        assert_eq!(widen(narrow(1.0 + 2f32.powi(-11))), 1.0);
        assert_eq!(widen(narrow(1.0 + 3.0 * 2f32.powi(-11))), 1.0 + 2f32.powi(-9));
        let mut out = [0; 3];
        to_half(&[0.5, -0.25, 3.0], &mut out);
        assert_eq!(from_half(&out), vec![0.5, -0.25, 3.0]);
        assert!(!half_kernel_name().is_empty());
    }

    /// Every finite binary16 value (all 63,488 bit patterns, both zeros and every subnormal
    /// included) widens without a branch to exactly what half's conversion gives.
    #[test]
    fn branch_free_widening_is_exact_on_every_finite_half() {
        let mut finite = 0;
        for bits in 0..=u16::MAX {
            if half_is_finite(bits) {
                finite += 1;
                assert_eq!(widen_finite(bits).to_bits(), widen(bits).to_bits(), "bits {bits:#06x}");
            }
        }
        assert_eq!(finite, 63_488);
    }

    /// Small integers sum exactly in f32 whatever the order: every kernel, at every length
    /// (whole blocks of four registers, single registers, scalar tails), gives the exact value.
    #[test]
    fn every_half_kernel_is_exact_on_small_integers() {
        for length in 0..=200usize {
            let query: Vec<f32> = (0..length).map(|index| (index % 7) as f32 - 3.0).collect();
            let values: Vec<f32> = (0..length).map(|index| (index % 5) as f32 - 2.0).collect();
            let mut row = vec![0; length];
            to_half(&values, &mut row);
            let exact: f32 = query.iter().zip(&values).map(|(a, b)| a * b).sum();
            for kernel in HalfKernel::available() {
                assert_eq!(kernel.dot(&query, &row), exact, "{kernel:?} at length {length}");
            }
            let squares: f32 = values.iter().map(|value| value * value).sum();
            for kernel in HalfKernel::available() {
                assert_eq!(kernel.dot_halves(&row, &row), squares, "{kernel:?} at length {length}");
            }
        }
    }

    proptest! {
        #[test]
        fn half_kernels_match_the_scalar_dot_of_the_widened_row(
            pairs in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..600),
        ) {
            let (query, values): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let mut row = vec![0; values.len()];
            to_half(&values, &mut row);
            let widened = from_half(&row);
            let scalar = dot_scalar(&query, &widened);
            let scale = query.iter().zip(&widened).map(|(a, b)| (a * b).abs()).sum::<f32>().max(1.0);
            for kernel in HalfKernel::available() {
                let simd = kernel.dot(&query, &row);
                prop_assert!((simd - scalar).abs() <= 1e-5 * scale, "{kernel:?}: {simd} against {scalar}");
            }
            // What binary16 costs: each component within 2^-11 of its f32 value (relative).
            for (value, stored) in values.iter().zip(&widened) {
                prop_assert!((value - stored).abs() <= value.abs() * 2f32.powi(-11) + 2f32.powi(-25));
            }
        }

        #[test]
        fn dot_halves_is_symmetric_and_dot_half_of_the_widened_left(
            pairs in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..1100),
        ) {
            let (left, right): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let (mut left_row, mut right_row) = (vec![0; left.len()], vec![0; right.len()]);
            to_half(&left, &mut left_row);
            to_half(&right, &mut right_row);
            for kernel in HalfKernel::available() {
                let forward = kernel.dot_halves(&left_row, &right_row);
                prop_assert_eq!(forward.to_bits(), kernel.dot_halves(&right_row, &left_row).to_bits());
                prop_assert_eq!(forward.to_bits(), kernel.dot(&from_half(&left_row), &right_row).to_bits());
            }
            prop_assert_eq!(dot_halves(&left_row, &right_row).to_bits(), dot_half(&from_half(&left_row), &right_row).to_bits());
        }

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
