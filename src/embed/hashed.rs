use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{EmbedResult, Embedder, normalize};
use crate::domain::tokens::words;

/// Texts embedded on the calling thread; larger batches go to the blocking pool.
const INLINE_TEXTS: usize = 4;

/// Deterministic feature-hashing embedder: lowercased words (weight 1.0), word bigrams (0.5) and
/// character trigrams of each word (0.25) are hashed into `dimension` buckets with a sign bit,
/// then the vector is L2-normalized. No model, no IO; similar wording gives similar vectors.
pub struct HashedEmbedder {
    dimension: usize,
    name: String,
}

impl HashedEmbedder {
    /// An embedder producing `dimension`-component vectors.
    pub fn new(dimension: usize) -> Self {
        Self { dimension, name: format!("hashed-{dimension}") }
    }

    /// Embeds one text synchronously.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0f32; self.dimension];
        let tokens: Vec<String> = words(text).collect();
        let mut add = |feature: &str, weight: f32| {
            let digest = Sha256::digest(feature.as_bytes());
            let bucket = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) as usize % self.dimension;
            let sign = if digest[8] & 1 == 0 { 1.0 } else { -1.0 };
            vector[bucket] += sign * weight;
        };
        for word in &tokens {
            add(&format!("w:{word}"), 1.0);
            let padded: Vec<char> = format!("^{word}$").chars().collect();
            for window in padded.windows(3) {
                add(&format!("c:{}", window.iter().collect::<String>()), 0.25);
            }
        }
        for pair in tokens.windows(2) {
            add(&format!("b:{} {}", pair[0], pair[1]), 0.5);
        }
        normalize(&mut vector);
        vector
    }
}

#[async_trait]
impl Embedder for HashedEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    /// Feature hashing sees shared words only; the verifier's lexical signals already do.
    fn semantic(&self) -> bool {
        false
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        // A query embeds inline; a document batch (about half a millisecond per passage) runs on
        // the blocking pool so it never stalls the async thread that serves other requests (a
        // revoke must not wait for another request's embedding).
        if texts.len() <= INLINE_TEXTS || tokio::runtime::Handle::try_current().is_err() {
            return Ok(texts.iter().map(|text| self.embed_one(text)).collect());
        }
        let worker = Self::new(self.dimension);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || texts.iter().map(|text| worker.embed_one(text)).collect())
            .await
            .map_err(|error| super::EmbedError::Model(format!("hashed embedding task failed: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::dot;

    #[test]
    fn similar_texts_are_closer_than_unrelated_ones() {
        let embedder = HashedEmbedder::new(256);
        let query = embedder.embed_one("vacation policy for engineers");
        let near = embedder.embed_one("The vacation policy of the engineering team");
        let far = embedder.embed_one("quarterly revenue grew in Europe");
        assert!(dot(&query, &near) > dot(&query, &far));
        assert!((dot(&near, &near) - 1.0).abs() < 1e-5);
        assert_eq!(embedder.embed_one("same text"), embedder.embed_one("same text"));
    }
}
