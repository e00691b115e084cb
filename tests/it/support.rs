//! Shared helpers of the integration tests: an engine on the hashed embedder, documents,
//! principals.

use std::sync::Arc;

use warrant::config::Settings;
use warrant::domain::{DocAcl, Principal};
use warrant::embed::HashedEmbedder;
use warrant::retrieval::{DocumentInput, Engine, EngineParams};

/// Default settings with small candidate budgets and `shards` shards.
pub fn settings(shards: usize) -> Settings {
    let mut settings = Settings::defaults();
    settings.index.shards = shards;
    settings.embedder.dim = 64;
    settings
}

/// Starts an engine on the hashed embedder (inside an actix System).
pub fn engine(settings: &Settings) -> Arc<Engine> {
    let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    Engine::start(EngineParams::from_settings(settings, settings.embedder.dim), embedder).expect("engine starts")
}

/// A document readable by `groups`.
pub fn doc(doc_id: &str, title: &str, text: &str, groups: &[&str]) -> DocumentInput {
    DocumentInput {
        doc_id: doc_id.into(),
        title: title.into(),
        text: text.into(),
        acl: DocAcl { groups: groups.iter().map(|g| g.to_string()).collect(), users: vec![] },
        version: None,
    }
}

/// A principal.
pub fn principal(tenant: &str, user: &str, groups: &[&str]) -> Principal {
    Principal::new(tenant, user, groups.iter().copied())
}
