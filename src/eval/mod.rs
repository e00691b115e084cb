//! Offline evaluation against labeled data that lives outside the repository (see
//! `../shared/data`): retrieval quality per retriever (`retrieval`), the shared dataset loader
//! and ingestion (`dataset`), an on-disk embedding cache for repeated runs (`cache`), bootstrap
//! confidence intervals (`stats`) and the support verifier calibration (`verifier`), answer quality
//! through the answer pipeline (`answers`, with an optional model judge of each returned claim:
//! `judge`)
//! and quality as reviewers judged it, from the verdicts of the review queue (`reviews`).
//! Nothing here runs on the request path.

pub mod answers;
pub mod cache;
pub mod dataset;
pub mod judge;
pub mod retrieval;
pub mod reviews;
pub mod stats;
pub mod verifier;

use crate::config::{EmbedderKind, Settings};

/// `--embedder` of the evaluation and benchmark commands: a local embedder (`hashed` or
/// `minilm`), never a paid service.
pub fn local_embedder(name: &str) -> Result<EmbedderKind, String> {
    match name.parse::<EmbedderKind>()? {
        EmbedderKind::Openai => Err("--embedder must be hashed or minilm".to_owned()),
        kind => Ok(kind),
    }
}

/// Settings from `config`, with the embedder kind replaced when one is named.
pub fn settings_with_embedder(
    config: Option<&std::path::Path>,
    embedder: Option<EmbedderKind>,
) -> Result<Settings, crate::config::ConfigError> {
    let mut settings = Settings::load(config)?;
    if let Some(kind) = embedder {
        settings.embedder.kind = kind;
    }
    Ok(settings)
}
