//! Shared helpers of the integration tests: an engine on the hashed embedder, the service with
//! the demo corpus (in process, or listening on a loopback port), documents, principals, and a
//! counting fake embedder.

use std::sync::Arc;

use warrant::answer::providers::extractive::ExtractiveGenerator;
use warrant::answer::providers::generator::Generator;
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::app::{build_state, seed_corpus};
use warrant::config::Settings;
use warrant::domain::{DocAcl, Principal};
use warrant::embed::{Embedder, HashedEmbedder};
use warrant::embedded::{Engine, EngineParams};
use warrant::http::AppState;
use warrant::providers::Providers;
use warrant::retrieval::DocumentInput;

/// Providers of an in-process service: the hashed embedder of `settings.embedder.dim`,
/// `generator` (the extractive one when `None`) and the lexical verifier at the settings'
/// thresholds.
pub fn hashed_providers(settings: &Settings, generator: Option<Arc<dyn Generator>>) -> Providers {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    Providers {
        embedder: Arc::clone(&embedder),
        generator: generator.unwrap_or_else(|| Arc::new(ExtractiveGenerator::new(settings.generator.max_claims))),
        verifier: Arc::new(LexicalSupportVerifier::new(
            settings.verifier.min_coverage,
            settings.verifier.min_similarity,
            Some(embedder),
        )),
    }
}

/// The service state on `settings` and `providers` with the demo corpus loaded, marked ready.
pub async fn demo_state(settings: Arc<Settings>, providers: Providers) -> actix_web::web::Data<AppState> {
    let state = build_state(settings, providers).await.expect("state");
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo/corpus.json");
    seed_corpus(&state.documents, &corpus).await.expect("demo corpus");
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    state
}

/// `state` served by `workers` workers on a loopback port the kernel picks: (base URL, handle).
pub fn listen(state: actix_web::web::Data<AppState>, workers: usize) -> (String, actix_web::dev::ServerHandle) {
    let server = actix_web::HttpServer::new(move || warrant::http::server::app(state.clone()))
        .workers(workers)
        .bind("127.0.0.1:0")
        .expect("bind a loopback port");
    let address = server.addrs()[0];
    let running = server.run();
    let handle = running.handle();
    actix_rt::spawn(running);
    (format!("http://{address}"), handle)
}

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
        layout: None,
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
