//! Shared helpers of the integration tests: an engine on the hashed embedder, documents,
//! principals, and a counting fake embedder.

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

/// FAKE embedder: hashed vectors of `dimension`, counting the texts it is asked to embed.
pub struct FakeCountingEmbedder {
    inner: HashedEmbedder,
    texts: std::sync::atomic::AtomicUsize,
}

impl FakeCountingEmbedder {
    /// A counter at zero.
    pub fn new(dimension: usize) -> Arc<Self> {
        Arc::new(Self { inner: HashedEmbedder::new(dimension), texts: Default::default() })
    }

    /// Texts embedded so far.
    pub fn count(&self) -> usize {
        self.texts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Texts embedded since the last `take`, resetting the counter.
    pub fn take(&self) -> usize {
        self.texts.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl warrant::embed::Embedder for FakeCountingEmbedder {
    fn name(&self) -> &str {
        "fake-counting"
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    async fn embed(&self, texts: &[String]) -> warrant::embed::EmbedResult<Vec<Vec<f32>>> {
        self.texts.fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        self.inner.embed(texts).await
    }
}
