//! [`OpenAiCompatibleEmbedder`]: `POST {base_url}/embeddings` with `{"model", "input": [texts]}`,
//! the request shape shared by OpenAI, vLLM, text-embeddings-inference and Ollama.
//!
//! Invariants (on top of the module's): the reply to each batch has exactly one finite vector
//! of `dimension()` components per input, placed by its `index` (servers may reorder); each
//! HTTP call is bounded by the configured total timeout; the API key never appears in logs,
//! `Debug` output or errors, nor do response bodies.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{EmbedError, EmbedResult, Embedder, normalize};
use crate::config::EmbedderSettings;
use crate::outbound;

/// Embedder calling an OpenAI-compatible `/embeddings` endpoint in batches.
/// `Debug` prints the API key as `<redacted>`.
#[derive(Debug)]
pub struct OpenAiCompatibleEmbedder {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<outbound::ApiKey>,
    dimension: usize,
    batch_size: usize,
    timeout: Duration,
    name: String,
}

impl OpenAiCompatibleEmbedder {
    /// An embedder for `model` at `base_url` (e.g. `http://127.0.0.1:8000/v1`) expecting
    /// `dimension`-component vectors, sending at most `batch_size` texts per call, each call
    /// bounded by `timeout` (also its connect timeout). Without `api_key` no `Authorization`
    /// header is sent.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        dimension: usize,
        batch_size: usize,
        timeout: Duration,
    ) -> EmbedResult<Self> {
        if dimension == 0 || batch_size == 0 {
            return Err(EmbedError::Provider("dimension and batch size must be positive".into()));
        }
        let client = outbound::client(timeout).map_err(EmbedError::Provider)?;
        Ok(Self {
            client,
            url: outbound::endpoint(base_url, "embeddings"),
            model: model.to_owned(),
            api_key: outbound::ApiKey::from(api_key),
            dimension,
            batch_size,
            timeout,
            name: format!("openai:{model}"),
        })
    }

    /// An embedder configured by `settings`; the API key is read from the environment variable
    /// named by `settings.api_key_env` (unset or empty: no key).
    pub fn from_settings(settings: &EmbedderSettings) -> EmbedResult<Self> {
        Self::new(
            &settings.base_url,
            &settings.model,
            outbound::api_key_from_env(&settings.api_key_env),
            settings.dim,
            settings.batch_size,
            Duration::from_millis(settings.timeout_ms),
        )
    }

    async fn embed_batch(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        tokio::time::timeout(self.timeout, self.call(texts)).await.unwrap_or(Err(EmbedError::Timeout))
    }

    async fn call(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        let body = json!({"model": self.model, "input": texts});
        let builder =
            outbound::authorize(self.client.post(&self.url).timeout(self.timeout).json(&body), self.api_key.as_ref());
        let response = builder.send().await.map_err(transport_error)?;
        let status = response.status();
        if !status.is_success() {
            return Err(EmbedError::Provider(format!("status {}", status.as_u16())));
        }
        let bytes = response.bytes().await.map_err(transport_error)?;
        let reply: EmbeddingReply =
            serde_json::from_slice(&bytes).map_err(|_| EmbedError::Provider("malformed response body".into()))?;
        place(reply.data, texts.len(), self.dimension)
    }
}

fn transport_error(error: reqwest::Error) -> EmbedError {
    if error.is_timeout() { EmbedError::Timeout } else { EmbedError::Provider(outbound::describe(error)) }
}

#[derive(Deserialize)]
struct EmbeddingReply {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    index: usize,
}

/// Puts each item at its `index`, checks count, dimension and finiteness, and normalizes.
fn place(items: Vec<EmbeddingItem>, expected: usize, dimension: usize) -> EmbedResult<Vec<Vec<f32>>> {
    if items.len() != expected {
        return Err(EmbedError::Shape { expected, got: items.len() });
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    for item in items {
        if item.embedding.len() != dimension {
            return Err(EmbedError::Shape { expected: dimension, got: item.embedding.len() });
        }
        if !item.embedding.iter().all(|value| value.is_finite()) {
            return Err(EmbedError::Provider("embedding has non-finite values".into()));
        }
        let slot = slots
            .get_mut(item.index)
            .ok_or_else(|| EmbedError::Provider(format!("embedding index {} out of range", item.index)))?;
        if slot.is_some() {
            return Err(EmbedError::Provider(format!("embedding index {} repeated", item.index)));
        }
        let mut vector = item.embedding;
        normalize(&mut vector);
        *slot = Some(vector);
    }
    // Count matched, indexes are in range and unique: every slot is filled.
    Ok(slots.into_iter().map(|slot| slot.expect("every index filled")).collect())
}

#[async_trait]
impl Embedder for OpenAiCompatibleEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    /// Embeds `texts` in batches of `batch_size`, one HTTP call (and one timeout) per batch.
    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size) {
            vectors.extend(self.embed_batch(batch).await?);
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(index: usize, embedding: Vec<f32>) -> EmbeddingItem {
        EmbeddingItem { embedding, index }
    }

    #[test]
    fn items_are_placed_by_index_and_normalized() {
        let vectors = place(vec![item(1, vec![0.0, 2.0]), item(0, vec![3.0, 4.0])], 2, 2).unwrap();
        assert_eq!(vectors, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
    }

    #[test]
    fn repeated_or_out_of_range_indexes_fail() {
        assert!(matches!(place(vec![item(0, vec![1.0]), item(0, vec![1.0])], 2, 1), Err(EmbedError::Provider(_))));
        assert!(matches!(place(vec![item(5, vec![1.0])], 1, 1), Err(EmbedError::Provider(_))));
    }

    #[test]
    fn wrong_count_or_dimension_is_a_shape_error() {
        assert!(matches!(place(vec![item(0, vec![1.0])], 2, 1), Err(EmbedError::Shape { expected: 2, got: 1 })));
        assert!(matches!(place(vec![item(0, vec![1.0])], 1, 3), Err(EmbedError::Shape { expected: 3, got: 1 })));
    }
}
