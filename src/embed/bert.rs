//! A BERT encoder forward pass for sentence embeddings on the CPU (f32), written for speed on a
//! few cores; [`super::MiniLmEmbedder`] runs all-MiniLM-L6-v2 through it.
//!
//! Why not `candle_transformers::models::bert`: on the project's 2-core machine candle ran at about
//! a third of PyTorch's passages/s (BENCHMARKS.md, "Embeddings"). Its profile showed the matrix
//! products well served by `gemm` but everything around them costly: scalar `erf` in GELU, scalar
//! `exp` in softmax, a fresh tensor (and page faults) for every bias add, transpose and mask, 384
//! small multi-threaded products per attention layer, and padded rows computed in full. Here:
//!
//! - the tokens of a batch are packed (no padding): the dense layers see one `[tokens, hidden]`
//!   matrix and attention runs per sequence over its own tokens only, so no mask is needed and a
//!   text's vector cannot depend on its batch neighbours;
//! - matrix products go through `ndarray`'s `general_mat_mul` (matrixmultiply's AVX2/FMA kernels,
//!   chosen at run time) on strided views: Q, K and V are read in place from one fused QKV product,
//!   head outputs are written in place, bias and residual are the product's accumulator;
//! - GELU (exact erf form), softmax and layer norm are fused loops in preallocated buffers,
//!   vectorized under pulp's run-time AVX2 dispatch;
//! - threads (rayon's pool): a batch is split into two halves of about equal token counts encoded
//!   independently; a single text (a query) splits each dense product's output columns instead.

use candle_nn::VarBuilder;
use candle_transformers::models::bert::{Config as BertConfig, HiddenAct};
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, Axis, ShapeBuilder};
use pulp::{Arch, Simd, WithSimd};

/// A dense layer: `weight` is `[outputs, inputs]` row-major, as stored in the checkpoint.
struct Dense {
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    /// Query, key and value stacked into one `[3 * hidden, hidden]` product.
    qkv: Dense,
    attention_output: Dense,
    attention_norm: LayerNorm,
    intermediate: Dense,
    output: Dense,
    output_norm: LayerNorm,
}

/// Weights of a BERT encoder (embeddings and layers; the pooler is not used).
pub(super) struct BertEncoder {
    word_embeddings: Vec<f32>,
    position_embeddings: Vec<f32>,
    /// Row 0 of the token type embeddings: single-segment inputs only.
    token_type_embedding: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    vocabulary: usize,
    max_positions: usize,
    eps: f32,
}

/// Dense products split their output columns at multiples of this (the kernels' tile width).
const COLUMN_TILE: usize = 16;

/// A batch is split into two halves only when the larger holds at most this share of the tokens;
/// otherwise the dense products are split by columns.
const MAX_SPLIT_SHARE: f64 = 0.7;

fn tensor(variables: &VarBuilder, name: &str, shape: &[usize]) -> candle_core::Result<Vec<f32>> {
    variables.get(shape, name)?.flatten_all()?.to_vec1::<f32>()
}

fn dense(variables: &VarBuilder, outputs: usize, inputs: usize) -> candle_core::Result<Dense> {
    Ok(Dense {
        weight: tensor(variables, "weight", &[outputs, inputs])?,
        bias: tensor(variables, "bias", &[outputs])?,
        inputs,
        outputs,
    })
}

fn layer_norm(variables: &VarBuilder, size: usize) -> candle_core::Result<LayerNorm> {
    Ok(LayerNorm { gamma: tensor(variables, "weight", &[size])?, beta: tensor(variables, "bias", &[size])? })
}

impl BertEncoder {
    /// Reads the weights of a Hugging Face `BertModel` checkpoint (with or without the `bert.`
    /// prefix). Only the exact-erf GELU activation and absolute positions are supported.
    pub(super) fn load(variables: VarBuilder, config: &BertConfig) -> Result<Self, String> {
        if config.hidden_act != HiddenAct::Gelu {
            return Err(format!("unsupported hidden_act {:?} (only gelu)", config.hidden_act));
        }
        let hidden = config.hidden_size;
        let heads = config.num_attention_heads;
        if heads == 0 || !hidden.is_multiple_of(heads) {
            return Err(format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads}"));
        }
        let variables = if variables.contains_tensor("embeddings.word_embeddings.weight") {
            variables
        } else {
            variables.pp("bert")
        };
        let load = || -> candle_core::Result<Self> {
            let embeddings = variables.pp("embeddings");
            let mut token_type =
                tensor(&embeddings.pp("token_type_embeddings"), "weight", &[config.type_vocab_size, hidden])?;
            token_type.truncate(hidden);
            let mut layers = Vec::with_capacity(config.num_hidden_layers);
            for index in 0..config.num_hidden_layers {
                let layer = variables.pp(format!("encoder.layer.{index}"));
                let attention = layer.pp("attention");
                let mut qkv = dense(&attention.pp("self.query"), hidden, hidden)?;
                for name in ["self.key", "self.value"] {
                    let part = dense(&attention.pp(name), hidden, hidden)?;
                    qkv.weight.extend(part.weight);
                    qkv.bias.extend(part.bias);
                }
                qkv.outputs = 3 * hidden;
                layers.push(Layer {
                    qkv,
                    attention_output: dense(&attention.pp("output.dense"), hidden, hidden)?,
                    attention_norm: layer_norm(&attention.pp("output.LayerNorm"), hidden)?,
                    intermediate: dense(&layer.pp("intermediate.dense"), config.intermediate_size, hidden)?,
                    output: dense(&layer.pp("output.dense"), hidden, config.intermediate_size)?,
                    output_norm: layer_norm(&layer.pp("output.LayerNorm"), hidden)?,
                });
            }
            Ok(Self {
                word_embeddings: tensor(&embeddings.pp("word_embeddings"), "weight", &[config.vocab_size, hidden])?,
                position_embeddings: tensor(
                    &embeddings.pp("position_embeddings"),
                    "weight",
                    &[config.max_position_embeddings, hidden],
                )?,
                token_type_embedding: token_type,
                embedding_norm: layer_norm(&embeddings.pp("LayerNorm"), hidden)?,
                layers,
                hidden,
                heads,
                vocabulary: config.vocab_size,
                max_positions: config.max_position_embeddings,
                eps: config.layer_norm_eps as f32,
            })
        };
        load().map_err(|error| error.to_string())
    }

    /// Mean over its tokens of the last hidden states of each sequence (not normalized), in order.
    /// Every sequence needs at least one token, at most `max_position_embeddings`, all in the
    /// vocabulary.
    pub(super) fn mean_pooled(&self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, String> {
        for sequence in sequences {
            if sequence.is_empty() || sequence.len() > self.max_positions {
                return Err(format!("sequence of {} tokens (1 to {} allowed)", sequence.len(), self.max_positions));
            }
            if let Some(&id) = sequence.iter().find(|&&id| id as usize >= self.vocabulary) {
                return Err(format!("token id {id} outside the vocabulary of {}", self.vocabulary));
            }
        }
        if rayon::current_num_threads() < 2 {
            return Ok(self.encode(sequences, false));
        }
        match split_point(sequences) {
            Some(cut) => {
                let (first, second) = sequences.split_at(cut);
                let (mut pooled, rest) = rayon::join(|| self.encode(first, false), || self.encode(second, false));
                pooled.extend(rest);
                Ok(pooled)
            }
            None => Ok(self.encode(sequences, true)),
        }
    }

    /// The forward pass over the packed tokens of `sequences`; `split_columns` runs each dense
    /// product on two threads.
    fn encode(&self, sequences: &[&[u32]], split_columns: bool) -> Vec<Vec<f32>> {
        let hidden = self.hidden;
        let tokens: usize = sequences.iter().map(|sequence| sequence.len()).sum();
        if tokens == 0 {
            return Vec::new();
        }
        let mut states = vec![0f32; tokens * hidden];
        for (row, (position, &id)) in
            states.chunks_exact_mut(hidden).zip(sequences.iter().flat_map(|sequence| sequence.iter().enumerate()))
        {
            let word = &self.word_embeddings[id as usize * hidden..][..hidden];
            let position = &self.position_embeddings[position * hidden..][..hidden];
            for (((value, word), position), token_type) in
                row.iter_mut().zip(word).zip(position).zip(&self.token_type_embedding)
            {
                *value = word + position + token_type;
            }
        }
        normalize_rows(&mut states, hidden, &self.embedding_norm, self.eps);

        let intermediate = self.layers.first().map_or(0, |layer| layer.intermediate.outputs);
        let mut qkv = vec![0f32; tokens * 3 * hidden];
        let mut context = vec![0f32; tokens * hidden];
        let mut expanded = vec![0f32; tokens * intermediate];
        let longest = sequences.iter().map(|sequence| sequence.len()).max().unwrap_or(0);
        let mut scores = vec![0f32; longest * longest];
        for layer in &self.layers {
            layer.qkv.forward(&states, &mut qkv, false, split_columns);
            let mut start = 0;
            for sequence in sequences {
                let length = sequence.len();
                self.attend(
                    &qkv[start * 3 * hidden..(start + length) * 3 * hidden],
                    &mut context[start * hidden..(start + length) * hidden],
                    &mut scores[..length * length],
                    length,
                );
                start += length;
            }
            layer.attention_output.forward(&context, &mut states, true, split_columns);
            normalize_rows(&mut states, hidden, &layer.attention_norm, self.eps);
            layer.intermediate.forward(&states, &mut expanded, false, split_columns);
            gelu(&mut expanded);
            layer.output.forward(&expanded, &mut states, true, split_columns);
            normalize_rows(&mut states, hidden, &layer.output_norm, self.eps);
        }

        let mut start = 0;
        sequences
            .iter()
            .map(|sequence| {
                let rows = &states[start * hidden..(start + sequence.len()) * hidden];
                start += sequence.len();
                let mut mean = vec![0f32; hidden];
                for row in rows.chunks_exact(hidden) {
                    mean.iter_mut().zip(row).for_each(|(sum, value)| *sum += value);
                }
                let count = sequence.len() as f32;
                mean.iter_mut().for_each(|sum| *sum /= count);
                mean
            })
            .collect()
    }

    /// Self-attention of one sequence: `qkv` holds its `[length, 3 * hidden]` projections,
    /// `context` receives `[length, hidden]`, `scores` is `length * length` scratch.
    fn attend(&self, qkv: &[f32], context: &mut [f32], scores: &mut [f32], length: usize) {
        let hidden = self.hidden;
        let head_size = hidden / self.heads;
        let scale = 1.0 / (head_size as f32).sqrt();
        let row_stride = 3 * hidden;
        for head in 0..self.heads {
            let offset = head * head_size;
            let view = |start: usize| {
                ArrayView2::from_shape((length, head_size).strides((row_stride, 1)), &qkv[start..])
                    .expect("a head's view lies inside its sequence's projections")
            };
            let (query, key, value) = (view(offset), view(hidden + offset), view(2 * hidden + offset));
            let mut weights = ArrayViewMut2::from_shape((length, length), &mut *scores).expect("scores fit");
            general_mat_mul(scale, &query, &key.t(), 0.0, &mut weights);
            softmax_rows(scores, length);
            let weights = ArrayView2::from_shape((length, length), &*scores).expect("scores fit");
            let mut output =
                ArrayViewMut2::from_shape((length, head_size).strides((hidden, 1)), &mut context[offset..])
                    .expect("a head's output lies inside the context");
            general_mat_mul(1.0, &weights, &value, 0.0, &mut output);
        }
    }
}

impl Dense {
    /// `output = input * weight^T + bias`, or `output += input * weight^T + bias` with
    /// `accumulate` (the residual connection).
    fn forward(&self, input: &[f32], output: &mut [f32], accumulate: bool, split_columns: bool) {
        let rows = input.len() / self.inputs;
        for row in output.chunks_exact_mut(self.outputs) {
            if accumulate {
                row.iter_mut().zip(&self.bias).for_each(|(value, bias)| *value += bias);
            } else {
                row.copy_from_slice(&self.bias);
            }
        }
        let input = ArrayView2::from_shape((rows, self.inputs), input).expect("input rows");
        let weight = ArrayView2::from_shape((self.outputs, self.inputs), &self.weight[..]).expect("weight shape");
        let weight = weight.t();
        let mut output = ArrayViewMut2::from_shape((rows, self.outputs), output).expect("output rows");
        let cut = self.outputs / 2 / COLUMN_TILE * COLUMN_TILE;
        if split_columns && cut > 0 {
            let (mut left, mut right) = output.view_mut().split_at(Axis(1), cut);
            let (weight_left, weight_right) = weight.split_at(Axis(1), cut);
            rayon::join(
                || general_mat_mul(1.0, &input, &weight_left, 1.0, &mut left),
                || general_mat_mul(1.0, &input, &weight_right, 1.0, &mut right),
            );
        } else {
            general_mat_mul(1.0, &input, &weight, 1.0, &mut output);
        }
    }
}

/// Where to cut `sequences` into two runs of about equal token counts, if both get a fair share.
fn split_point(sequences: &[&[u32]]) -> Option<usize> {
    if sequences.len() < 2 {
        return None;
    }
    let total: usize = sequences.iter().map(|sequence| sequence.len()).sum();
    let mut best = (usize::MAX, 0);
    let mut before = 0;
    for (cut, sequence) in sequences.iter().enumerate().skip(1).map(|(cut, _)| (cut, sequences[cut - 1])) {
        before += sequence.len();
        let larger = before.max(total - before);
        if larger < best.0 {
            best = (larger, cut);
        }
    }
    (best.0 as f64 <= MAX_SPLIT_SHARE * total as f64).then_some(best.1)
}

/// Runs a closure with the best instruction set found at run time (AVX2/FMA or AVX-512 on
/// x86-64), so its loops are vectorized for it.
struct Vectorized<F>(F);

impl<F: FnOnce()> WithSimd for Vectorized<F> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        (self.0)()
    }
}

fn vectorized(work: impl FnOnce()) {
    Arch::new().dispatch(Vectorized(work));
}

/// Sum in eight independent lanes (vectorizable; f32 addition is not reassociated otherwise).
#[inline(always)]
fn lane_sum(values: &[f32], term: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane += term(value);
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().map(|&value| term(value)).sum::<f32>()
}

/// Layer normalization of each `width`-wide row in place.
fn normalize_rows(values: &mut [f32], width: usize, norm: &LayerNorm, eps: f32) {
    vectorized(|| {
        for row in values.chunks_exact_mut(width) {
            let mean = lane_sum(row, |value| value) / width as f32;
            let variance = lane_sum(row, |value| (value - mean) * (value - mean)) / width as f32;
            let inverse = 1.0 / (variance + eps).sqrt();
            for ((value, gamma), beta) in row.iter_mut().zip(&norm.gamma).zip(&norm.beta) {
                *value = (*value - mean) * inverse * gamma + beta;
            }
        }
    });
}

/// Softmax of each `width`-wide row in place.
fn softmax_rows(values: &mut [f32], width: usize) {
    vectorized(|| {
        for row in values.chunks_exact_mut(width) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            row.iter_mut().for_each(|value| *value = exp(*value - max));
            let inverse = 1.0 / lane_sum(row, |value| value);
            row.iter_mut().for_each(|value| *value *= inverse);
        }
    });
}

/// GELU in its exact form, `x * (1 + erf(x / sqrt 2)) / 2`, in place.
fn gelu(values: &mut [f32]) {
    vectorized(|| {
        for value in values.iter_mut() {
            let x = *value;
            *value = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
        }
    });
}

/// `e^x` for f32 without a libm call, so loops over it vectorize: `x = n ln 2 + r`, `e^r` by its
/// degree-7 Taylor-like minimax polynomial on `|r| <= ln 2 / 2` (Cephes `expf`; relative error
/// about 1e-7), times `2^n` built from the exponent bits. Inputs are clamped to `[-87, 88]`.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (no `roundps` before SSE4.1).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// The error function by Abramowitz & Stegun 7.1.26 (absolute error at most 1.5e-7 in exact
/// arithmetic, below 1e-6 in f32; GELU's output moves by at most `|x|` times half that).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let polynomial = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    (1.0 - polynomial * exp(-a * a)).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_match_libm() {
        let mut worst_exp = 0f64;
        let mut worst_erf = 0f64;
        for step in -8000..=8000 {
            let x = step as f32 / 100.0;
            let exact = f64::from(x).exp();
            worst_exp = worst_exp.max(((f64::from(exp(x)) - exact) / exact).abs());
            let y = step as f32 / 1000.0;
            let libm_erf = f64::from(libm_erf(y));
            worst_erf = worst_erf.max((f64::from(erf(y)) - libm_erf).abs());
        }
        assert!(worst_exp < 3e-7, "exp relative error {worst_exp}");
        assert!(worst_erf < 1e-6, "erf absolute error {worst_erf}");
    }

    /// Reference erf (series / continued fraction in f64), only for the test.
    fn libm_erf(x: f32) -> f32 {
        let x = f64::from(x);
        // |erf x - sign x| < 3.5e-8 beyond 3.9; below, the series loses at most ~6 of f64's digits.
        if x.abs() < 3.9 {
            // Maclaurin series: erf x = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)).
            let mut term = x;
            let mut sum = x;
            for n in 1..200 {
                term *= -x * x / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            (sum * 2.0 / std::f64::consts::PI.sqrt()) as f32
        } else {
            x.signum() as f32
        }
    }

    #[test]
    fn batches_split_into_fair_halves_only() {
        let long = [1u32; 100];
        let short = [1u32; 10];
        assert_eq!(split_point(&[&long]), None);
        assert_eq!(split_point(&[&long, &short]), None, "91% of the tokens in one half");
        assert_eq!(split_point(&[&long, &long]), Some(1));
        assert_eq!(split_point(&[&long, &short, &short, &long]), Some(2));
        assert_eq!(split_point(&[&long, &long, &long, &short]), Some(2));
    }
}
