//! Provider selection from configuration: embedder, generator and support verifier.
//!
//! Embedded defaults need no paid service (hashed or MiniLM embeddings, the extractive
//! generator, the lexical/semantic verifier); OpenAI-compatible providers are chosen with
//! `kind = "openai"`, and a language model as the verifier's judge with `verifier.kind = "judge"`.

use std::sync::Arc;

use crate::answer::providers::extractive::ExtractiveGenerator;
use crate::answer::providers::generator::Generator;
use crate::answer::providers::judge_verifier::JudgeSupportVerifier;
use crate::answer::providers::lexical_verifier::LexicalSupportVerifier;
use crate::answer::providers::openai::OpenAiCompatibleGenerator;
use crate::answer::providers::verifier::SupportVerifier;
use crate::config::{EmbedderKind, GeneratorKind, Settings, VerifierKind};
use crate::embed::{Embedder, HashedEmbedder, MiniLmEmbedder, OpenAiCompatibleEmbedder};

/// Providers chosen for a run.
pub struct Providers {
    /// Embedder.
    pub embedder: Arc<dyn Embedder>,
    /// Generator.
    pub generator: Arc<dyn Generator>,
    /// Support verifier.
    pub verifier: Arc<dyn SupportVerifier>,
}

/// Errors choosing providers.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A provider could not be built from its settings.
    #[error("{kind} provider: {reason}")]
    Invalid {
        /// Which provider.
        kind: &'static str,
        /// Why.
        reason: String,
    },
}

/// Builds the configured embedder.
pub async fn embedder(settings: &Settings) -> Result<Arc<dyn Embedder>, ProviderError> {
    let config = &settings.embedder;
    match config.kind {
        EmbedderKind::Openai => {
            let embedder = OpenAiCompatibleEmbedder::from_settings(config)
                .map_err(|error| ProviderError::Invalid { kind: "embedder", reason: error.to_string() })?;
            Ok(Arc::new(embedder))
        }
        EmbedderKind::Minilm => Ok(minilm_or_fallback(settings).await),
        EmbedderKind::Hashed => Ok(Arc::new(HashedEmbedder::new(config.dim))),
    }
}

/// MiniLM from `embedder.model_dir`; when absent, tries `model fetch`; when that fails too,
/// falls back to the hashed embedder with a loud warning (the active embedder is reported by
/// `/readyz` and in the index).
async fn minilm_or_fallback(settings: &Settings) -> Arc<dyn Embedder> {
    let directory = std::path::PathBuf::from(&settings.embedder.model_dir);
    let loaded = tokio::task::spawn_blocking(move || {
        if crate::embed::model::verify(&directory).is_err() {
            tracing::warn!(dir = %directory.display(), "MiniLM model files absent: fetching them");
            crate::embed::model::fetch(&directory)?;
        }
        MiniLmEmbedder::load(&directory)
    })
    .await;
    match loaded {
        Ok(Ok(embedder)) if embedder.dimension() == settings.embedder.dim => Arc::new(embedder),
        Ok(Ok(embedder)) => {
            tracing::error!(
                model = embedder.dimension(),
                configured = settings.embedder.dim,
                "MiniLM dimension differs from embedder.dim: FALLING BACK to the hashed embedder"
            );
            Arc::new(HashedEmbedder::new(settings.embedder.dim))
        }
        Ok(Err(error)) => {
            tracing::error!(%error, "MiniLM unavailable: FALLING BACK to the hashed embedder (lexical-grade vectors)");
            Arc::new(HashedEmbedder::new(settings.embedder.dim))
        }
        Err(error) => {
            tracing::error!(%error, "MiniLM loading panicked: FALLING BACK to the hashed embedder");
            Arc::new(HashedEmbedder::new(settings.embedder.dim))
        }
    }
}

/// The embedder the verifier uses: only a semantic model. Feature hashing measured no gain on
/// the SciFact claim labels (identical precision/recall for `min_similarity` 0.0..0.2, worse
/// above), so with the hashed embedder the verifier decides on lexical signals alone.
fn semantic(embedder: &Arc<dyn Embedder>) -> Option<Arc<dyn Embedder>> {
    embedder.semantic().then(|| Arc::clone(embedder))
}

/// The verifier's embedder under `settings` (for `warrant eval verifier`).
pub async fn verifier_embedder(settings: &Settings) -> Result<Option<Arc<dyn Embedder>>, ProviderError> {
    Ok(semantic(&embedder(settings).await?))
}

/// Builds every provider.
pub async fn from_settings(settings: &Settings) -> Result<Providers, ProviderError> {
    let embedder = embedder(settings).await?;
    let generator: Arc<dyn Generator> = match settings.generator.kind {
        GeneratorKind::Openai => Arc::new(
            OpenAiCompatibleGenerator::from_settings(&settings.generator)
                .map_err(|error| ProviderError::Invalid { kind: "generator", reason: error.to_string() })?,
        ),
        GeneratorKind::Extractive => Arc::new(ExtractiveGenerator::new(settings.generator.max_claims)),
    };
    let verifier = verifier(settings, semantic(&embedder))?;
    Ok(Providers { embedder, generator, verifier })
}

/// The configured support verifier (`verifier.kind`) over the verifier's embedder
/// ([`verifier_embedder`]).
pub fn verifier(
    settings: &Settings,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<Arc<dyn SupportVerifier>, ProviderError> {
    let config = &settings.verifier;
    let lexical = LexicalSupportVerifier::new(config.min_coverage, config.min_similarity, embedder)
        .with_sentence_cache(config.sentence_cache);
    Ok(match config.kind {
        VerifierKind::Lexical => Arc::new(lexical),
        VerifierKind::Judge => Arc::new(
            JudgeSupportVerifier::from_settings(lexical, &config.judge)
                .map_err(|reason| ProviderError::Invalid { kind: "verifier", reason })?,
        ),
    })
}
