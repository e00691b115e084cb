//! Sentence embeddings from a sentence-transformers BERT model (all-MiniLM-L6-v2 by default) run
//! on the CPU by the encoder in [`super::bert`] (weights read with candle).
//!
//! The pipeline reproduces sentence-transformers exactly: WordPiece tokens truncated at
//! `max_seq_length` (256 for all-MiniLM-L6-v2; the bundled tokenizer.json says 128 and is
//! overridden), padding to the longest text of each micro-batch, the BERT encoder, mean pooling
//! over the attention mask, then L2 normalization (Reimers & Gurevych 2019, Sentence-BERT).
//!
//! Invariants: every returned vector has `dimension()` (= config `hidden_size`) components and
//! unit norm; a text's vector does not depend on the other texts of its batch (padded positions
//! are masked out of attention and pooling).

use std::fs;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::Config as BertConfig;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::BertEncoder;
use super::{EmbedError, EmbedResult, Embedder, normalize};

/// Tokens per text (special tokens included) when the model directory does not say otherwise;
/// sentence-transformers' `max_seq_length` of all-MiniLM-L6-v2.
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// Texts run through the encoder at once (bounds its buffers: 32 texts of 256 tokens need ~70 MB).
/// Texts are sorted by length first, so the encoder's two halves of a micro-batch get similar work.
const MICRO_BATCH: usize = 32;

/// `sentence_bert_config.json`: the sequence length sentence-transformers truncates at.
#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// `1_Pooling/config.json`: only mean pooling is implemented here.
#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
}

/// A sentence-transformers BERT model (e.g. all-MiniLM-L6-v2) on the CPU.
///
/// Cloning is cheap: the weights and tokenizer are shared.
#[derive(Clone)]
pub struct MiniLmEmbedder {
    encoder: Arc<Encoder>,
    name: String,
}

/// Weights and tokenizer; all CPU work happens here.
struct Encoder {
    model: BertEncoder,
    tokenizer: Tokenizer,
    dimension: usize,
}

impl MiniLmEmbedder {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` (f32) from `model_dir`, a
    /// directory laid out like a sentence-transformers BERT model. The optional
    /// `sentence_bert_config.json` sets the truncation length (default
    /// [`DEFAULT_MAX_TOKENS`]); an optional `1_Pooling/config.json` must ask for mean pooling.
    pub fn load(model_dir: &Path) -> EmbedResult<Self> {
        let config_text = read_text(&model_dir.join("config.json"))?;
        let config: BertConfig = serde_json::from_str(&config_text)
            .map_err(|error| EmbedError::Model(format!("invalid config.json in {}: {error}", model_dir.display())))?;

        check_pooling(model_dir)?;
        let max_tokens = max_tokens(model_dir)?.min(config.max_position_embeddings);

        let tokenizer_path = model_dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|error| EmbedError::Model(format!("invalid {}: {error}", tokenizer_path.display())))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_tokens, ..TruncationParams::default() }))
            .map_err(|error| EmbedError::Model(format!("cannot set truncation: {error}")))?;
        // No padding: the encoder packs the tokens of a batch.
        tokenizer.with_padding(None);

        let weights_path = model_dir.join("model.safetensors");
        let weights = fs::read(&weights_path)
            .map_err(|error| EmbedError::Model(format!("cannot read {}: {error}", weights_path.display())))?;
        let variables = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|error| EmbedError::Model(format!("invalid {}: {error}", weights_path.display())))?;
        let model = BertEncoder::load(variables, &config)
            .map_err(|error| EmbedError::Model(format!("cannot load BERT weights: {error}")))?;

        let dir_name = model_dir.file_name().map_or_else(|| "model".into(), |name| name.to_string_lossy());
        Ok(Self {
            encoder: Arc::new(Encoder { model, tokenizer, dimension: config.hidden_size }),
            name: format!("minilm:{dir_name}"),
        })
    }

    /// Embeds `texts` on the calling thread (for callers already off the async runtime, e.g. a
    /// `SyncArbiter` actor or `spawn_blocking`). One unit vector per text, in order.
    pub fn embed_blocking<S: AsRef<str>>(&self, texts: &[S]) -> EmbedResult<Vec<Vec<f32>>> {
        self.encoder.embed(texts)
    }
}

#[async_trait]
impl Embedder for MiniLmEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.encoder.dimension
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encoder = Arc::clone(&self.encoder);
        let owned = texts.to_vec();
        tokio::task::spawn_blocking(move || encoder.embed(&owned))
            .await
            .map_err(|error| EmbedError::Provider(format!("embedding task failed: {error}")))?
    }
}

impl Encoder {
    fn embed<S: AsRef<str>>(&self, texts: &[S]) -> EmbedResult<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|error| EmbedError::Provider(format!("tokenization failed: {error}")))?;
        let token_ids: Vec<&[u32]> = encodings.iter().map(|encoding| encoding.get_ids()).collect();

        // Longest first: similar lengths share a micro-batch.
        let mut order: Vec<usize> = (0..token_ids.len()).collect();
        order.sort_by_key(|&index| std::cmp::Reverse(token_ids[index].len()));

        let mut vectors = vec![Vec::new(); token_ids.len()];
        for batch in order.chunks(MICRO_BATCH) {
            let batch_ids: Vec<&[u32]> = batch.iter().map(|&index| token_ids[index]).collect();
            let pooled = self
                .model
                .mean_pooled(&batch_ids)
                .map_err(|error| EmbedError::Provider(format!("bert forward failed: {error}")))?;
            for (&index, mut vector) in batch.iter().zip(pooled) {
                if vector.len() != self.dimension {
                    return Err(EmbedError::Shape { expected: self.dimension, got: vector.len() });
                }
                normalize(&mut vector);
                vectors[index] = vector;
            }
        }
        Ok(vectors)
    }
}

fn read_text(path: &Path) -> EmbedResult<String> {
    fs::read_to_string(path).map_err(|error| EmbedError::Model(format!("cannot read {}: {error}", path.display())))
}

fn max_tokens(model_dir: &Path) -> EmbedResult<usize> {
    let path = model_dir.join("sentence_bert_config.json");
    if !path.exists() {
        return Ok(DEFAULT_MAX_TOKENS);
    }
    let config: SentenceBertConfig = serde_json::from_str(&read_text(&path)?)
        .map_err(|error| EmbedError::Model(format!("invalid {}: {error}", path.display())))?;
    Ok(config.max_seq_length.unwrap_or(DEFAULT_MAX_TOKENS))
}

fn check_pooling(model_dir: &Path) -> EmbedResult<()> {
    let path = model_dir.join("1_Pooling").join("config.json");
    if !path.exists() {
        return Ok(());
    }
    let config: PoolingConfig = serde_json::from_str(&read_text(&path)?)
        .map_err(|error| EmbedError::Model(format!("invalid {}: {error}", path.display())))?;
    if !config.pooling_mode_mean_tokens {
        return Err(EmbedError::Model(format!("{} asks for a pooling other than mean pooling", path.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use super::*;
    use crate::embed::dot;

    fn model_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("all-MiniLM-L6-v2")
    }

    fn load_or_skip() -> Option<MiniLmEmbedder> {
        let dir = model_dir();
        if !dir.join("model.safetensors").exists() {
            eprintln!("skipped: no model in {} (run the model fetch first)", dir.display());
            return None;
        }
        Some(MiniLmEmbedder::load(&dir).expect("model loads"))
    }

    #[test]
    fn vectors_do_not_depend_on_batch_neighbours() {
        let Some(embedder) = load_or_skip() else { return };
        let short = "Who approves vacation requests?";
        let long = "The engineering handbook says that vacation requests are approved by the team lead, \
                    and that requests longer than two weeks also need the department head's sign-off.";
        let alone = embedder.embed_blocking(&[short]).expect("embeds");
        let batched = embedder.embed_blocking(&[long, short]).expect("embeds");
        assert_eq!(alone[0].len(), embedder.dimension());
        assert!(dot(&alone[0], &batched[1]) > 0.999_999, "padding changed the vector");
        assert!((dot(&batched[0], &batched[0]) - 1.0).abs() < 1e-5);
        assert!(dot(&batched[0], &batched[1]) > 0.3, "related texts should be similar");
    }

    /// Vectors of tests/golden/minilm_candle.json were made by the previous implementation
    /// (candle's `BertModel`); the packed encoder must agree with them, embedded alone or together.
    #[test]
    fn vectors_match_the_candle_bert_golden_file() {
        #[derive(Deserialize)]
        struct Golden {
            texts: Vec<String>,
            vectors: Vec<Vec<f32>>,
        }
        let Some(embedder) = load_or_skip() else { return };
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/minilm_candle.json");
        let golden: Golden = serde_json::from_str(&fs::read_to_string(path).expect("golden file")).expect("parses");
        let together = embedder.embed_blocking(&golden.texts).expect("embeds");
        let mut lowest = f32::INFINITY;
        for ((text, expected), batched) in golden.texts.iter().zip(&golden.vectors).zip(&together) {
            let alone = embedder.embed_blocking(&[text]).expect("embeds");
            for actual in [batched, &alone[0]] {
                assert!((dot(actual, actual) - 1.0).abs() < 1e-5, "unit norm");
                let cosine = dot(actual, expected);
                assert!(cosine > 0.9999, "cosine {cosine} to the candle vector of {text:?}");
                lowest = lowest.min(cosine);
            }
        }
        eprintln!("lowest cosine to the candle vectors: {lowest:.7}");
    }

    /// Speed numbers, not assertions: `cargo test --release --lib embed::minilm -- --ignored --nocapture`.
    #[test]
    #[ignore = "benchmark; needs the model and a release build"]
    fn measure_latency_and_throughput() {
        let Some(embedder) = load_or_skip() else { return };
        let queries = [
            "who approves vacation requests",
            "quarterly revenue in europe",
            "how do I rotate an API key",
            "parental leave policy",
            "what is the on-call rotation for the payments team",
        ];
        for query in queries {
            embedder.embed_blocking(&[query]).expect("warm-up");
        }
        let mut millis = Vec::new();
        for round in 0..200 {
            let query = queries[round % queries.len()];
            let started = Instant::now();
            let vectors = embedder.embed_blocking(&[query]).expect("embeds");
            millis.push(started.elapsed().as_secs_f64() * 1e3);
            assert_eq!(vectors[0].len(), embedder.dimension());
        }
        millis.sort_by(f64::total_cmp);
        let percentile = |fraction: f64| millis[((millis.len() - 1) as f64 * fraction).round() as usize];
        println!(
            "single short query: p50 {:.2} ms, p99 {:.2} ms (n = {})",
            percentile(0.5),
            percentile(0.99),
            millis.len()
        );

        let sentence = "The committee reviewed the quarterly access-control audit and found that several \
                        service accounts still held write permissions on archived document collections. ";
        let passages: Vec<String> = (0..96).map(|index| format!("Passage {index}. {}", sentence.repeat(7))).collect();
        let tokens = embedder.encoder.tokenizer.encode(passages[0].as_str(), true).expect("tokenizes").len();
        let started = Instant::now();
        for batch in passages.chunks(32) {
            let vectors = embedder.embed_blocking(batch).expect("embeds");
            assert_eq!(vectors.len(), batch.len());
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "passages of {tokens} tokens, batches of 32: {:.1} passages/s ({} in {seconds:.2} s)",
            passages.len() as f64 / seconds,
            passages.len()
        );
    }
}
