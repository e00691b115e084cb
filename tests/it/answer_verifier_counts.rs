//! Measurement driver (ignored by default): texts the support verifier embeds per `/v1/answer`
//! request on the demo corpus, with `verifier.sentence_cache` off and on. Counts, not time: they
//! do not depend on machine load. Run with
//! `cargo test --test it answer_verifier_counts -- --ignored --nocapture`.
//!
//! Two generators: the embedded extractive one (claims are verbatim sentences, mostly one per
//! answer on this corpus), and `FakeParaphrasingGenerator`, a FAKE shaped like an LLM answer:
//! three reworded claims each citing the first two sources, with a first attempt that cites an
//! unknown label so that `fail_answer` forces one repair. The verifier's embedder is a FAKE too:
//! the hashed embedder counting the texts of each call (the server gives the verifier MiniLM; the
//! number of texts it is asked to embed is the same).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use warrant::answer::pipeline::response::AnswerStatus;
use warrant::answer::providers::extractive::ExtractiveGenerator;
use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::answer::{AnswerPipeline, AnswerRequest, PipelineSettings};
use warrant::config::{ClaimPolicy, Settings};
use warrant::domain::Principal;
use warrant::embed::Embedder;

use crate::support::{FakeCountingEmbedder, engine, principal, settings};

/// FAKE generator: three reworded sentences of the first source ("Also, …"), each citing the
/// first two sources; the first attempt also cites an unknown label (a repair follows under `fail_answer`).
struct FakeParaphrasingGenerator;

#[async_trait]
impl Generator for FakeParaphrasingGenerator {
    fn name(&self) -> &str {
        "fake-paraphrasing"
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        let labels: Vec<&str> = request.sources.iter().take(2).map(|source| source.label.as_str()).collect();
        let first = request.sources.first().map_or("", |source| source.text.as_str());
        let mut claims: Vec<serde_json::Value> = first
            .split_terminator(". ")
            .take(3)
            .map(|sentence| {
                // Reworded with stopwords only, so the claim stays supported but is no verbatim sentence.
                let text = format!("Also, {}.", sentence.trim_end_matches('.'));
                json!({"text": text, "citations": labels})
            })
            .collect();
        if request.repair.is_none()
            && let Some(claim) = claims.first_mut()
        {
            claim["citations"] = json!(["S99"]);
        }
        Ok(json!({"answerable": !claims.is_empty(), "claims": claims}).to_string())
    }
}

/// Demo questions, each asked by a principal who may read its answer.
fn workload() -> Vec<(Principal, &'static str)> {
    let acme = || principal("acme", "bob", &["everyone", "engineering", "finance"]);
    let globex = || principal("globex", "carol", &["staff"]);
    vec![
        (acme(), "How much are hotel stays per night in London?"),
        (acme(), "Which class can I book for long flights, and what is the meal allowance?"),
        (acme(), "How many vacation days do employees get and can they be carried over?"),
        (acme(), "What must the on-call engineer do during a severity one incident?"),
        (acme(), "What Q3 revenue does finance forecast and where does growth come from?"),
        (acme(), "When are laptops replaced and how fast must a lost laptop be reported?"),
        (acme(), "How long do I have to submit travel receipts?"),
        (acme(), "Who approves long vacation requests and how early?"),
        (globex(), "How much are hotel stays per night in London?"),
        (globex(), "How many vacation days do Globex employees get?"),
        (globex(), "What is required for production access and how long must passwords be?"),
        (globex(), "How long is parental leave?"),
    ]
}

/// One request's outcome.
struct Request {
    answered: bool,
    claims: usize,
    attempts: u32,
    embedded: usize,
}

/// The workload `rounds` times through one pipeline (one verifier, so its cache persists).
fn run(generator: Arc<dyn Generator>, policy: ClaimPolicy, capacity: usize, rounds: usize) -> Vec<Vec<Request>> {
    actix_rt::System::new().block_on(async move {
        let mut settings = settings(2);
        settings.answer.claim_policy = policy;
        let engine = engine(&settings);
        warrant::app::load_corpus(
            engine.as_ref(),
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo/corpus.json"),
        )
        .await
        .expect("demo corpus");
        let counting = FakeCountingEmbedder::new(384);
        let verifier = LexicalSupportVerifier::new(
            settings.verifier.min_coverage,
            settings.verifier.min_similarity,
            Some(Arc::clone(&counting) as Arc<dyn Embedder>),
        )
        .with_sentence_cache(capacity);
        let pipeline =
            AnswerPipeline::new(engine, generator, Arc::new(verifier), PipelineSettings::from_settings(&settings));
        let mut passes = Vec::new();
        for round in 0..rounds {
            let mut requests = Vec::new();
            for (index, (who, question)) in workload().into_iter().enumerate() {
                let request = AnswerRequest { question: question.to_owned(), top_k: None, deadline_ms: None };
                let response =
                    pipeline.answer(&who, request, format!("count-{round}-{index}")).await.expect("no server fault");
                requests.push(Request {
                    answered: response.status == AnswerStatus::Answered,
                    claims: response.answer.as_ref().map_or(0, |answer| answer.claims.len()),
                    attempts: response.metrics.generator_attempts,
                    embedded: counting.take(),
                });
            }
            passes.push(requests);
        }
        passes
    })
}

fn report(name: &str, generator: Arc<dyn Generator>, policy: ClaimPolicy) {
    let off = run(Arc::clone(&generator), policy, 0, 2);
    let on = run(generator, policy, Settings::defaults().verifier.sentence_cache, 2);
    println!("\n{name}\nrequest  status     claims  attempts  cache off  cache on, 1st pass  cache on, 2nd pass");
    for (index, (without, (first, second))) in off[0].iter().zip(on[0].iter().zip(&on[1])).enumerate() {
        let status = if without.answered { "answered" } else { "abstained" };
        println!(
            "{:>7}  {status:<9}  {:>6}  {:>8}  {:>9}  {:>18}  {:>18}",
            index + 1,
            without.claims,
            without.attempts,
            without.embedded,
            first.embedded,
            second.embedded
        );
    }
    let total = |pass: &[Request]| pass.iter().map(|request| request.embedded).sum::<usize>();
    println!(
        "{name}: texts embedded over {} requests: cache off {}, cache on {} (1st pass), {} (2nd pass)",
        off[0].len(),
        total(&off[0]),
        total(&on[0]),
        total(&on[1])
    );
    assert_eq!(total(&off[0]), total(&off[1]), "without the cache every pass costs the same");
    assert!(total(&on[0]) <= total(&off[0]));
}

#[test]
#[ignore = "measurement driver: prints counts"]
fn answer_verifier_counts_embedded_texts_per_request() {
    let settings = Settings::defaults();
    report("extractive", Arc::new(ExtractiveGenerator::new(settings.generator.max_claims)), ClaimPolicy::DropClaim);
    report(
        "paraphrasing (3 claims x 2 sources, 1 repair)",
        Arc::new(FakeParaphrasingGenerator),
        ClaimPolicy::FailAnswer,
    );
}
