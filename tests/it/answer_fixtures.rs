//! Data-driven answer pipeline tests: every `fixtures/answer/*.json` file is one case (add a case
//! without code). Each case asserts status, abstention reason, citation links and stage metrics.
//!
//! The generator here is `FixtureGenerator`, a deterministic FAKE wrapping the library's
//! `ScriptedGenerator`: it resolves `@{snippet}` to the label of the source containing the
//! snippet and `#{doc_id}` to the chunk id of that document's first chunk, and can run admin
//! actions (delete, revoke) while the request is inside generation. The verifier is the real
//! `LexicalSupportVerifier` behind `FixtureVerifier`, a FAKE wrapper that can run admin actions
//! during its first call and be slow (`"verifier": {"first_call_actions": […], "delay_ms": n}`).
//! The pipeline reads the backend through `RecordingReader`, a FAKE wrapper that records the
//! candidates it retrieved and the chunks it asked authorization for (its final context), so a
//! case can prove what was retrieved and left out.
//! Every fixture runs; the test fails at the end naming each fixture that did not hold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::scripted::{ScriptStep, ScriptedGenerator};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use warrant::acl::{AclMutation, AuthorizationScope};
use warrant::answer::grounding::schema::{OutputShape, output_schema_for_model};
use warrant::answer::pipeline::response::{AnswerResponse, AnswerStatus};
use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::answer::providers::verifier::{CitedText, ClaimSupport, SupportVerifier};
use warrant::answer::{AnswerPipeline, AnswerRequest, PipelineSettings};
use warrant::config::{ClaimPolicy, Settings};
use warrant::domain::{Chunk, DocAcl, Document, Principal, chunk_document};
use warrant::embed::HashedEmbedder;
use warrant::retrieval::{
    Authorization, Candidate, ContextBudget, DocumentInput, DocumentView, ReadPath, ReadSide, RetrievalResult,
    Retrieved, WriteSide,
};

use crate::support::{engine, principal};

/// The backend a fixture runs on.
#[derive(Clone)]
pub enum Backend {
    /// The embedded engine (3 shards).
    Embedded,
    /// PostgreSQL: a fresh database per fixture, made by this function.
    Postgres(fn() -> futures::future::BoxFuture<'static, String>),
}

#[derive(Deserialize, Clone)]
struct CorpusDocument {
    tenant: String,
    doc_id: String,
    title: String,
    text: String,
    acl: DocAcl,
}

#[derive(Deserialize)]
struct Corpus {
    documents: Vec<CorpusDocument>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    name: String,
    about: String,
    #[serde(default)]
    settings: BTreeMap<String, Value>,
    #[serde(default)]
    documents: Vec<CorpusDocument>,
    #[serde(default)]
    setup: Vec<Action>,
    principal: PrincipalSpec,
    question: String,
    #[serde(default)]
    request: RequestSpec,
    generator: Vec<Step>,
    #[serde(default)]
    verifier: VerifierSpec,
    expect: Expect,
}

/// How the fixture's verifier misbehaves (by default it does not).
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct VerifierSpec {
    /// Admin actions run inside the first verifier call, before its verdict.
    #[serde(default)]
    first_call_actions: Vec<Action>,
    /// Async sleep in every verifier call, before its verdict.
    #[serde(default)]
    delay_ms: Option<u64>,
}

#[derive(Deserialize)]
struct PrincipalSpec {
    tenant: String,
    user: String,
    groups: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RequestSpec {
    top_k: Option<usize>,
    deadline_ms: Option<u64>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    before_reply: Vec<Action>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "snake_case")]
enum Action {
    Delete(String),
    Revoke { doc_id: String },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    reason_in: Vec<String>,
    #[serde(default)]
    generator_attempts: Option<u32>,
    #[serde(default)]
    generator_attempts_max: Option<u32>,
    #[serde(default)]
    cited_docs: Vec<String>,
    #[serde(default)]
    not_cited_docs: Vec<String>,
    #[serde(default)]
    claims: Option<usize>,
    #[serde(default)]
    stages: Vec<String>,
    #[serde(default)]
    citations_rejected: BTreeMap<String, u32>,
    #[serde(default)]
    citations_rejected_any: Vec<String>,
    #[serde(default)]
    prompt_excludes: Vec<String>,
    #[serde(default)]
    prompt_includes: Vec<String>,
    #[serde(default)]
    repair_prompt_includes: Vec<String>,
    #[serde(default)]
    repair_prompt_excludes: Vec<String>,
    /// Text the repair attempt's sources and schema (its quote choices) must not hold.
    #[serde(default)]
    repair_sources_exclude: Vec<String>,
    #[serde(default)]
    diagnostics_include: Vec<String>,
    #[serde(default)]
    distinct_labels_per_doc: Option<usize>,
    #[serde(default)]
    context_max: Option<usize>,
    #[serde(default)]
    deterministic_prompt: bool,
    /// Whether the repair attempt was shown the rejected output of the first one.
    #[serde(default)]
    repair_previous: Option<bool>,
    /// The answer's claim texts, in order.
    #[serde(default)]
    claim_texts: Option<Vec<String>>,
    /// Claims whose citation the server chose (`metrics.claims_anchored`).
    #[serde(default)]
    claims_anchored: Option<u32>,
    /// Text each attempt's prompt (its user message: sources and question) holds exactly once.
    #[serde(default)]
    prompt_mentions_once: Vec<String>,
    /// Documents (of the caller's tenant) with a chunk that the pipeline's retrieval returned
    /// and that was not in its final context.
    #[serde(default)]
    retrieved_not_in_context: Vec<String>,
    /// Documents with a chunk that the pipeline's retrieval returned as one candidate found by
    /// both BM25 and vector search.
    #[serde(default)]
    retrieved_by_both: Vec<String>,
    /// Claim texts the answer must return (a reviewer judged them supported; fixtures exported
    /// by `warrant review export-fixtures`).
    #[serde(default)]
    returned_claims_include: Vec<String>,
    /// Claim texts the answer must not return (a reviewer judged them unsupported or citing
    /// the wrong source).
    #[serde(default)]
    returned_claims_exclude: Vec<String>,
    /// Whether the answer is partial (`answer.partial`: claims withheld by validation); only for
    /// an answered case, and every answered case of `fixtures/answer` states it.
    #[serde(default)]
    partial: Option<bool>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/answer")
}

/// Test FAKE: scripted outputs with placeholders and actions, recording prompts.
struct FixtureGenerator {
    inner: ScriptedGenerator,
    steps: Vec<Step>,
    writer: Arc<dyn WriteSide>,
    tenant: String,
    chunk_ids: BTreeMap<String, String>,
    calls: Mutex<usize>,
    /// Every output returned, placeholders resolved.
    outputs: Mutex<Vec<String>>,
}

#[async_trait]
impl Generator for FixtureGenerator {
    fn name(&self) -> &str {
        "fixture-fake"
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        let step = &self.steps[(call - 1).min(self.steps.len() - 1)];
        for action in &step.before_reply {
            apply(self.writer.as_ref(), &self.tenant, action).await;
        }
        let raw = self.inner.generate(request).await?;
        let output = self.resolve(&raw, request);
        self.outputs.lock().unwrap().push(output.clone());
        Ok(output)
    }
}

impl FixtureGenerator {
    fn resolve(&self, raw: &str, request: &GenerationRequest) -> String {
        let mut text = raw.to_owned();
        while let Some(start) = text.find("@{") {
            let end = start + text[start..].find('}').expect("closed placeholder");
            let snippet = &text[start + 2..end];
            let label = request
                .sources
                .iter()
                .find(|source| source.text.contains(snippet))
                .map(|source| source.label.clone())
                .unwrap_or_else(|| "S1".to_owned());
            text.replace_range(start..=end, &label);
        }
        while let Some(start) = text.find("#{") {
            let end = start + text[start..].find('}').expect("closed placeholder");
            let id = self.chunk_ids.get(&text[start + 2..end]).cloned().unwrap_or_default();
            text.replace_range(start..=end, &id);
        }
        text
    }
}

/// Test FAKE: the real lexical verifier, plus actions during its first call and a delay.
struct FixtureVerifier {
    inner: LexicalSupportVerifier,
    spec: VerifierSpec,
    writer: Arc<dyn WriteSide>,
    tenant: String,
    calls: Mutex<usize>,
}

#[async_trait]
impl SupportVerifier for FixtureVerifier {
    fn name(&self) -> &str {
        "fixture-fake-verifier"
    }

    async fn verify(&self, claim: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        self.before_verdict().await;
        self.inner.verify(claim, cited).await
    }

    async fn verify_answer(&self, answer: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        self.before_verdict().await;
        self.inner.verify_answer(answer, cited).await
    }
}

impl FixtureVerifier {
    /// The fixture's misbehaviour: actions inside the first call, then a delay in every call.
    async fn before_verdict(&self) {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        if call == 1 {
            for action in &self.spec.first_call_actions {
                apply(self.writer.as_ref(), &self.tenant, action).await;
            }
        }
        if let Some(ms) = self.spec.delay_ms {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
}

/// Test FAKE: the backend's read side, recording the candidates of every retrieval and the
/// chunks of every authorization asked (the pipeline asks it of its final context only).
struct RecordingReader {
    inner: Arc<dyn ReadSide>,
    candidates: Mutex<Vec<Candidate>>,
    in_context: Mutex<Vec<Arc<Chunk>>>,
}

#[async_trait]
impl ReadSide for RecordingReader {
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        self.inner.scope(principal).await
    }

    fn read_path(&self) -> Arc<ReadPath> {
        self.inner.read_path()
    }

    async fn retrieve(
        &self,
        scope: &AuthorizationScope,
        text: &str,
        budget: Option<ContextBudget>,
    ) -> RetrievalResult<Retrieved> {
        let retrieved = self.inner.retrieve(scope, text, budget).await?;
        self.candidates.lock().unwrap().extend(retrieved.candidates.iter().cloned());
        Ok(retrieved)
    }

    async fn authorization(
        &self,
        principal: &Principal,
        chunks: &[Arc<Chunk>],
    ) -> RetrievalResult<Arc<dyn Authorization>> {
        self.in_context.lock().unwrap().extend(chunks.iter().cloned());
        self.inner.authorization(principal, chunks).await
    }

    async fn document(&self, principal: &Principal, doc_id: &str) -> RetrievalResult<Option<DocumentView>> {
        self.inner.document(principal, doc_id).await
    }

    fn embedder_name(&self) -> &str {
        self.inner.embedder_name()
    }

    async fn acl_state(&self) -> RetrievalResult<(u64, String)> {
        self.inner.acl_state().await
    }
}

async fn apply(writer: &dyn WriteSide, tenant: &str, action: &Action) {
    let mutation = match action {
        Action::Delete(doc_id) => AclMutation::Delete { tenant: tenant.into(), doc_id: doc_id.clone() },
        Action::Revoke { doc_id } => {
            AclMutation::Revoke { tenant: tenant.into(), doc_id: doc_id.clone(), groups: None, users: None }
        }
    };
    writer.mutate(mutation).await.expect("fixture action applies");
}

fn script(steps: &[Step]) -> Vec<ScriptStep> {
    steps
        .iter()
        .map(|step| {
            let base = match (&step.output, &step.error) {
                (Some(output), _) => ScriptStep::output(output.clone()),
                (None, Some(kind)) if kind == "status" => {
                    ScriptStep::Error(GeneratorError::Status { status: step.status.unwrap_or(500) })
                }
                (None, Some(kind)) if kind == "timeout" => ScriptStep::Error(GeneratorError::Timeout),
                (None, Some(_)) => ScriptStep::Error(GeneratorError::Connection("fixture".into())),
                (None, None) => panic!("a step needs an output or an error"),
            };
            match step.delay_ms {
                Some(ms) => base.delayed(Duration::from_millis(ms)),
                None => base,
            }
        })
        .collect()
}

fn apply_settings(settings: &mut Settings, overrides: &BTreeMap<String, Value>) {
    for (key, value) in overrides {
        match key.as_str() {
            "prompt_token_budget" => settings.answer.prompt_token_budget = value.as_u64().unwrap() as usize,
            "context_token_budget" => settings.retrieval.context_token_budget = value.as_u64().unwrap() as usize,
            "min_repair_ms" => settings.answer.min_repair_ms = value.as_u64().unwrap(),
            "claim_text" => settings.generator.claim_text = serde_json::from_value(value.clone()).unwrap(),
            "abstain_on_material_withheld" => settings.answer.abstain_on_material_withheld = value.as_bool().unwrap(),
            "claim_policy" => {
                settings.answer.claim_policy = match value.as_str().unwrap() {
                    "drop_claim" => ClaimPolicy::DropClaim,
                    _ => ClaimPolicy::FailAnswer,
                }
            }
            other => panic!("unknown fixture setting {other}"),
        }
    }
}

struct Run {
    response: AnswerResponse,
    prompts: Vec<GenerationRequest>,
    /// Every candidate the pipeline's retrieval returned.
    candidates: Vec<Candidate>,
    /// Every chunk of the final context (those the pipeline asked authorization for).
    in_context: Vec<Arc<Chunk>>,
    outputs: Vec<String>,
    corpus: Vec<CorpusDocument>,
    /// After the answer: the live version of each cited document the principal may still read.
    readable: BTreeMap<String, u64>,
    /// After the answer: the principal's ACL epoch.
    epoch: u64,
    /// How the generator was asked to answer (the fixture's settings).
    shape: OutputShape,
}

async fn sides(backend: &Backend, settings: &Settings) -> (Arc<dyn ReadSide>, Arc<dyn WriteSide>) {
    match backend {
        Backend::Embedded => {
            let engine = engine(settings);
            (engine.clone(), engine)
        }
        Backend::Postgres(database) => {
            let params = warrant::postgres::PostgresParams {
                url: database().await,
                pool_size: 4,
                acquire_timeout: std::time::Duration::from_secs(5),
                ef_search: 100,
                iterative_scan: warrant::postgres::IterativeScan::RelaxedOrder,
                max_scan_tuples: 20_000,
                exact_scan_chunks: 2_000,
                chunking: settings.chunking,
                rrf_k: settings.retrieval.rrf_k,
                lexical_candidates: settings.retrieval.lexical_candidates,
                vector_candidates: settings.retrieval.vector_candidates,
                ca_file: crate::postgres::test_database_ca(),
                sentence_vectors: true,
                reranker: settings.retrieval.reranker,
                query_cache: settings.embedder.query_cache,
                max_acl_names_per_document: settings.server.max_acl_names_per_document,
            };
            let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
            let backend = warrant::postgres::PostgresBackend::connect(params, embedder).await.expect("connects");
            (backend.clone(), backend)
        }
    }
}

async fn run(fixture: &Fixture, backend: &Backend) -> Run {
    let mut settings = crate::support::settings(3);
    // The fixtures' default policy is the strict one unless a case says otherwise.
    settings.answer.claim_policy = ClaimPolicy::FailAnswer;
    apply_settings(&mut settings, &fixture.settings);
    let (reader, writer) = sides(backend, &settings).await;
    let base: Corpus =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join("_corpus.json")).unwrap()).unwrap();
    let corpus: Vec<CorpusDocument> = base.documents.into_iter().chain(fixture.documents.iter().cloned()).collect();
    let mut per_tenant: BTreeMap<String, Vec<DocumentInput>> = BTreeMap::new();
    for document in &corpus {
        per_tenant.entry(document.tenant.clone()).or_default().push(DocumentInput {
            doc_id: document.doc_id.clone(),
            title: document.title.clone(),
            text: document.text.clone(),
            acl: document.acl.clone(),
            version: None,
            layout: None,
        });
    }
    for (tenant, documents) in per_tenant {
        writer.upsert(&tenant, documents).await.unwrap();
    }
    for action in &fixture.setup {
        apply(writer.as_ref(), &fixture.principal.tenant, action).await;
    }
    let chunk_ids = corpus
        .iter()
        .filter(|document| document.tenant == fixture.principal.tenant)
        .map(|document| {
            let full = Document {
                tenant: document.tenant.clone(),
                doc_id: document.doc_id.clone(),
                version: 1,
                title: document.title.clone(),
                text: document.text.clone(),
                acl: document.acl.clone(),
                layout: None,
            };
            (document.doc_id.clone(), chunk_document(&full, 0, &settings.chunking)[0].id.to_string())
        })
        .collect();
    let generator = Arc::new(FixtureGenerator {
        inner: ScriptedGenerator::new(script(&fixture.generator)),
        steps: fixture.generator.clone(),
        writer: Arc::clone(&writer),
        tenant: fixture.principal.tenant.clone(),
        chunk_ids,
        calls: Mutex::new(0),
        outputs: Mutex::new(Vec::new()),
    });
    let verifier = Arc::new(FixtureVerifier {
        inner: LexicalSupportVerifier::new(
            settings.verifier.min_coverage,
            settings.verifier.min_similarity,
            Some(Arc::new(HashedEmbedder::new(settings.embedder.dim))),
        )
        .with_sentence_cache(settings.verifier.sentence_cache),
        spec: fixture.verifier.clone(),
        writer: Arc::clone(&writer),
        tenant: fixture.principal.tenant.clone(),
        calls: Mutex::new(0),
    });
    let recorder = Arc::new(RecordingReader {
        inner: Arc::clone(&reader),
        candidates: Mutex::new(Vec::new()),
        in_context: Mutex::new(Vec::new()),
    });
    let pipeline =
        AnswerPipeline::new(recorder.clone(), generator.clone(), verifier, PipelineSettings::from_settings(&settings));
    let who = principal(
        &fixture.principal.tenant,
        &fixture.principal.user,
        &fixture.principal.groups.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let request = AnswerRequest {
        question: fixture.question.clone(),
        top_k: fixture.request.top_k,
        deadline_ms: fixture.request.deadline_ms,
    };
    let response = pipeline.answer(&who, request, format!("fixture-{}", fixture.name)).await.expect("no server fault");
    let mut readable = BTreeMap::new();
    for claim in response.answer.iter().flat_map(|answer| &answer.claims) {
        for citation in &claim.citations {
            let document = reader.document(&who, &citation.chunk.doc_id).await.expect("backend answers");
            if let Some(document) = document {
                readable.insert(document.doc_id, document.version);
            }
        }
    }
    let epoch = reader.scope(&who).await.expect("backend answers").epoch();
    let outputs = generator.outputs.lock().unwrap().clone();
    let shape = OutputShape::from_settings(&settings.generator);
    let candidates = recorder.candidates.lock().unwrap().clone();
    let in_context = recorder.in_context.lock().unwrap().clone();
    Run { response, prompts: generator.inner.calls(), candidates, in_context, outputs, corpus, readable, epoch, shape }
}

fn check(fixture: &Fixture, run: &Run) {
    let name = &fixture.name;
    let response = &run.response;
    let expect = &fixture.expect;
    let status = match response.status {
        AnswerStatus::Answered => "answered",
        AnswerStatus::Abstained => "abstained",
    };
    assert_eq!(status, expect.status, "{name}: status ({})", fixture.about);
    let reason = response.abstention.as_ref().map(|abstention| abstention.reason.as_str().to_owned());
    if let Some(expected) = &expect.reason {
        assert_eq!(reason.as_deref(), Some(expected.as_str()), "{name}: reason");
    }
    if !expect.reason_in.is_empty() {
        assert!(expect.reason_in.contains(reason.as_ref().unwrap()), "{name}: reason {reason:?}");
    }
    assert_eq!(response.answer.is_some(), status == "answered", "{name}: answer xor abstention");
    assert_eq!(response.abstention.is_some(), status == "abstained", "{name}: answer xor abstention");
    if let Some(partial) = expect.partial {
        let answer = response.answer.as_ref().unwrap_or_else(|| panic!("{name}: partial stated, but no answer"));
        assert_eq!(answer.partial, partial, "{name}: partial (withheld {:?})", answer.withheld);
        assert_eq!(answer.withheld.is_empty(), !partial, "{name}: withheld codes xor whole");
    }
    let metrics = &response.metrics;
    if let Some(anchored) = expect.claims_anchored {
        assert_eq!(metrics.claims_anchored, anchored, "{name}: claims anchored");
    }
    if let Some(attempts) = expect.generator_attempts {
        assert_eq!(metrics.generator_attempts, attempts, "{name}: generator attempts");
        assert_eq!(run.prompts.len() as u32, attempts, "{name}: generator calls made");
    }
    if let Some(max) = expect.generator_attempts_max {
        assert!(metrics.generator_attempts <= max, "{name}: generator attempts");
    }
    for stage in ["scope", "retrieval"].iter().map(|s| s.to_string()).chain(expect.stages.iter().cloned()) {
        let value = metrics.stages_ms.get(&stage).unwrap_or_else(|| panic!("{name}: stage {stage} not measured"));
        assert!(*value >= 0.0);
    }
    for (code, count) in &expect.citations_rejected {
        assert_eq!(
            metrics.citations_rejected.get(code),
            Some(count),
            "{name}: rejected {code} in {:?}",
            metrics.citations_rejected
        );
    }
    if !expect.citations_rejected_any.is_empty() {
        assert!(
            expect.citations_rejected_any.iter().any(|code| metrics.citations_rejected.contains_key(code)),
            "{name}: {:?}",
            metrics.citations_rejected
        );
    }
    if let Some(abstention) = &response.abstention {
        for code in &expect.diagnostics_include {
            assert!(abstention.diagnostics.contains(code), "{name}: diagnostics {:?}", abstention.diagnostics);
        }
        // Diagnostics are codes only: no source text leaks through them.
        for diagnostic in &abstention.diagnostics {
            assert!(diagnostic.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{name}: diagnostic {diagnostic}");
        }
    }
    // Everything the generator saw: excluded strings never, included strings somewhere.
    let seen: String = run
        .prompts
        .iter()
        .map(|p| format!("{}\n{}\n{}", p.system, p.user, p.repair.clone().unwrap_or_default()))
        .collect();
    // Each attempt's schema offers quotes from that attempt's own sources and no others, in
    // the shape the settings ask for, with that shape's instruction.
    for prompt in &run.prompts {
        let expected = output_schema_for_model(&prompt.sources, &prompt.question, run.shape);
        assert_eq!(prompt.schema, expected, "{name}: schema of the attempt's sources");
        assert_eq!(prompt.system, run.shape.system_instruction(), "{name}: system instruction");
    }
    // What the generator saw of source text: the sources, and the quotes its schema offers.
    let source_text = |prompt: &GenerationRequest| {
        let sources: String = prompt.sources.iter().map(|source| source.text.clone()).collect();
        format!("{sources}\n{}", prompt.schema)
    };
    for text in &expect.prompt_excludes {
        let sources_only: String = run.prompts.iter().map(source_text).collect();
        assert!(!sources_only.contains(text.as_str()), "{name}: prompt contains {text:?}");
    }
    for text in &expect.repair_sources_exclude {
        let repair = run.prompts.get(1).map(source_text).expect("a repair attempt");
        assert!(!repair.contains(text.as_str()), "{name}: the repair attempt shows {text:?}");
    }
    for text in &expect.prompt_includes {
        assert!(seen.contains(text.as_str()), "{name}: prompt lacks {text:?}");
    }
    for text in &expect.repair_prompt_includes {
        let repair = run.prompts.get(1).and_then(|p| p.repair.clone()).unwrap_or_default();
        assert!(repair.contains(text.as_str()), "{name}: repair prompt lacks {text:?}: {repair}");
    }
    for text in &expect.repair_prompt_excludes {
        let repair = run.prompts.get(1).and_then(|p| p.repair.clone()).unwrap_or_default();
        assert!(!repair.is_empty(), "{name}: no repair attempt");
        assert!(!repair.contains(text.as_str()), "{name}: repair prompt contains {text:?}: {repair}");
    }
    if let Some(shown) = expect.repair_previous {
        let previous = run.prompts.get(1).map(|prompt| prompt.previous.clone());
        assert_eq!(previous.as_ref().map(Option::is_some), Some(shown), "{name}: previous output on repair");
        if let Some(Some(previous)) = previous {
            assert_eq!(Some(&previous), run.outputs.first(), "{name}: the previous output verbatim");
        }
    }
    if let Some(max) = expect.context_max {
        assert!(metrics.context <= max, "{name}: context {}", metrics.context);
    }
    // Citation links: every citation resolves to an authorized chunk of the caller's tenant
    // whose offsets slice the document text and whose quote is inside the chunk.
    let claims = response.answer.as_ref().map(|answer| answer.claims.clone()).unwrap_or_default();
    if let Some(count) = expect.claims {
        assert_eq!(claims.len(), count, "{name}: claims");
    }
    if let Some(texts) = &expect.claim_texts {
        assert_eq!(&claims.iter().map(|claim| claim.text.clone()).collect::<Vec<_>>(), texts, "{name}: claim texts");
    }
    let returned: Vec<&str> = claims.iter().map(|claim| claim.text.as_str()).collect();
    for text in &expect.returned_claims_include {
        assert!(returned.contains(&text.as_str()), "{name}: {text:?} not returned ({returned:?})");
    }
    for text in &expect.returned_claims_exclude {
        assert!(!returned.contains(&text.as_str()), "{name}: {text:?} returned");
    }
    let mut cited_docs = Vec::new();
    for claim in &claims {
        assert!(!claim.citations.is_empty(), "{name}: uncited claim");
        for citation in &claim.citations {
            let document = run
                .corpus
                .iter()
                .find(|d| d.tenant == fixture.principal.tenant && d.doc_id == citation.chunk.doc_id)
                .unwrap_or_else(|| panic!("{name}: cited {} outside the tenant", citation.chunk.doc_id));
            let chunk: String = document
                .text
                .chars()
                .skip(citation.chunk.start)
                .take(citation.chunk.end - citation.chunk.start)
                .collect();
            assert!(!chunk.is_empty() && chunk.contains(&citation.quote), "{name}: quote not in chunk");
            assert_eq!(
                run.readable.get(&citation.chunk.doc_id),
                Some(&citation.chunk.doc_version),
                "{name}: cited document not live and authorized"
            );
            assert!(
                run.prompts.iter().any(|p| p.sources.iter().any(|s| s.label == citation.label)),
                "{name}: label not in context"
            );
            assert_eq!(response.acl_epoch, run.epoch, "{name}: epoch");
            cited_docs.push(citation.chunk.doc_id.clone());
        }
    }
    for doc in &expect.cited_docs {
        assert!(cited_docs.contains(doc), "{name}: {doc} not cited ({cited_docs:?})");
    }
    for doc in &expect.not_cited_docs {
        assert!(!cited_docs.contains(doc), "{name}: {doc} cited");
    }
    if let Some(per_doc) = expect.distinct_labels_per_doc {
        let labels: std::collections::BTreeSet<_> =
            claims.iter().flat_map(|c| c.citations.iter().map(|x| x.label.clone())).collect();
        assert_eq!(labels.len(), per_doc, "{name}: labels");
    }
    for text in &expect.prompt_mentions_once {
        assert!(!run.prompts.is_empty(), "{name}: no prompt");
        for prompt in &run.prompts {
            let mentions = prompt.user.matches(text.as_str()).count();
            assert_eq!(mentions, 1, "{name}: {text:?} in the prompt {mentions} times: {}", prompt.user);
        }
    }
    let tenant = &fixture.principal.tenant;
    let of_doc = |chunk: &Chunk, doc_id: &str| chunk.tenant == *tenant && chunk.doc_id == doc_id;
    for doc_id in &expect.retrieved_not_in_context {
        let retrieved: Vec<&Candidate> =
            run.candidates.iter().filter(|candidate| of_doc(&candidate.chunk, doc_id)).collect();
        assert!(!retrieved.is_empty(), "{name}: {doc_id} not retrieved");
        assert!(!run.in_context.is_empty(), "{name}: no final context");
        assert!(
            retrieved.iter().any(|candidate| !run.in_context.iter().any(|chunk| chunk.id == candidate.chunk.id)),
            "{name}: every retrieved chunk of {doc_id} is in the final context"
        );
    }
    for doc_id in &expect.retrieved_by_both {
        let both = run
            .candidates
            .iter()
            .filter(|candidate| of_doc(&candidate.chunk, doc_id))
            .any(|candidate| candidate.lexical.is_some() && candidate.vector.is_some());
        assert!(both, "{name}: no candidate of {doc_id} found by both retrievers");
    }
}

#[actix_web::test]
async fn every_answer_fixture_holds() {
    every_answer_fixture_holds_on(Backend::Embedded).await;
}

/// Runs the fixture file at `path` on `backend` (with the base corpus of fixtures/answer):
/// `Err` with the failed check's message when it does not hold.
pub async fn fixture_file_holds(path: &Path, backend: &Backend) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let fixture: Fixture = serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    let run = run(&fixture, backend).await;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&fixture, &run))).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
            .unwrap_or_else(|| "the fixture did not hold".to_owned())
    })
}

/// Runs every fixture on `backend`; fails naming each fixture that did not hold.
pub async fn every_answer_fixture_holds_on(backend: Backend) {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "json")
                && !path.file_name().unwrap().to_string_lossy().starts_with('_')
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 20, "fixtures missing");
    let mut failed = Vec::new();
    for path in paths {
        let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        // Every answered case says whether it is whole or partial (exported ones need not).
        if fixture.expect.status == "answered" && fixture.expect.partial.is_none() {
            eprintln!("{}: an answered case must state `partial`", fixture.name);
            failed.push(fixture.name.clone());
            continue;
        }
        let first = run(&fixture, &backend).await;
        // Check every case even when one fails (its panic message is printed), then name them all.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&fixture, &first))).is_err() {
            failed.push(fixture.name.clone());
            continue;
        }
        if fixture.expect.deterministic_prompt {
            let second = run(&fixture, &backend).await;
            let users = |run: &Run| run.prompts.iter().map(|p| p.user.clone()).collect::<Vec<_>>();
            if users(&first) != users(&second) {
                eprintln!("{}: selection is not deterministic", fixture.name);
                failed.push(fixture.name.clone());
            }
        }
    }
    assert!(failed.is_empty(), "fixtures that did not hold: {failed:?}");
}

/// What an answer came to: status, abstention reason, and whether it is partial.
fn outcome(response: &AnswerResponse) -> (AnswerStatus, Option<&'static str>, bool) {
    let reason = response.abstention.as_ref().map(|abstention| abstention.reason.as_str());
    (response.status, reason, response.answer.as_ref().is_some_and(|answer| answer.partial))
}

/// Every fixture's generator output under `drop_claim` (the server's default), with
/// `answer.abstain_on_material_withheld` on and off (whatever the fixture expects): turning it on
/// changes only answers that were partial, never a whole answer or an abstention, and a material
/// claim is never the reason with it off. Prints the outcomes of both (BENCHMARKS.md, "Material
/// claims"; `cargo test --test it material_withheld_changes_only -- --nocapture`).
#[actix_web::test]
async fn material_withheld_changes_only_partial_answers_of_the_fixtures() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension().is_some_and(|e| e == "json")
                && !path.file_name().unwrap().to_string_lossy().starts_with('_')
        })
        .collect();
    paths.sort();
    let mut tally: BTreeMap<(bool, String), usize> = BTreeMap::new();
    let mut changed = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut outcomes = Vec::new();
        for on in [false, true] {
            let mut fixture: Fixture = serde_json::from_str(&text).unwrap();
            fixture.settings.insert("claim_policy".into(), Value::from("drop_claim"));
            fixture.settings.insert("abstain_on_material_withheld".into(), Value::from(on));
            let run = run(&fixture, &Backend::Embedded).await;
            let (status, reason, partial) = outcome(&run.response);
            let label = match (status, reason) {
                (AnswerStatus::Answered, _) if partial => "answered partial".to_owned(),
                (AnswerStatus::Answered, _) => "answered whole".to_owned(),
                (AnswerStatus::Abstained, reason) => format!("abstained {}", reason.unwrap_or_default()),
            };
            *tally.entry((on, label)).or_default() += 1;
            outcomes.push((fixture.name, (status, reason, partial)));
        }
        let (name, off) = &outcomes[0];
        let on = &outcomes[1].1;
        assert_ne!(off.1, Some("material_claim_unsupported"), "{name}: a material abstention with the setting off");
        if off != on {
            assert_eq!((off.0, off.2), (AnswerStatus::Answered, true), "{name}: {off:?} became {on:?}");
            changed.push(format!("{name}: {off:?} -> {on:?}"));
        }
    }
    for ((on, label), count) in &tally {
        eprintln!("abstain_on_material_withheld = {on}: {label} {count}");
    }
    for line in &changed {
        eprintln!("changed: {line}");
    }
    assert!(!changed.is_empty(), "no fixture withholds a material claim under drop_claim");
}
