//! Property: over random corpora, ACLs, revocations (before and during generation) and random
//! generator outputs, every citation of every answered response was in the final context sent
//! to the generator (hence retrieved) and is authorized at response time; no answered claim is
//! uncited.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proptest::prelude::*;
use serde_json::json;
use warrant::acl::AclMutation;
use warrant::answer::grounding::normalize::neutralize;
use warrant::answer::pipeline::response::AnswerStatus;
use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::answer::{AnswerPipeline, AnswerRequest, PipelineSettings};
use warrant::embedded::Engine;

use crate::support::{doc, engine, principal, settings};

const WORDS: &[&str] =
    &["river", "copper", "falcon", "ledger", "harbor", "violet", "summit", "orbit", "meadow", "cipher"];

/// Random-but-seeded FAKE generator: cites real and invented labels with copied or invented
/// claim texts, and may revoke a document while "thinking".
struct ChaosGenerator {
    seed: Mutex<u64>,
    engine: Arc<Engine>,
    revoke_during: Option<String>,
    seen: Mutex<Vec<GenerationRequest>>,
}

impl ChaosGenerator {
    fn next(&self) -> u64 {
        let mut seed = self.seed.lock().unwrap();
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }
}

#[async_trait]
impl Generator for ChaosGenerator {
    fn name(&self) -> &str {
        "chaos-fake"
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        self.seen.lock().unwrap().push(request.clone());
        if let Some(doc_id) = &self.revoke_during {
            let _ = self.engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: doc_id.clone() }).await;
        }
        let claims = (0..1 + self.next() % 3)
            .map(|_| {
                let source = &request.sources[(self.next() as usize) % request.sources.len()];
                let text = match self.next() % 3 {
                    0 => WORDS[(self.next() % 10) as usize].to_owned(),
                    _ => source.text.split(". ").next().unwrap_or(&source.text).to_owned(),
                };
                let citation = match self.next() % 5 {
                    0 => format!("S{}", request.sources.len() + 1 + (self.next() % 3) as usize),
                    1 => "https://example.com/doc".to_owned(),
                    _ => source.label.clone(),
                };
                let citations = if self.next().is_multiple_of(7) { vec![] } else { vec![citation] };
                json!({"text": text, "citations": citations})
            })
            .collect::<Vec<_>>();
        Ok(json!({"answerable": true, "claims": claims}).to_string())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_returned_citation_was_in_context_and_is_authorized(
        docs in proptest::collection::vec((proptest::collection::vec(0usize..10, 4..14), proptest::collection::btree_set(0usize..3, 0..3), any::<bool>()), 1..10),
        groups in proptest::collection::btree_set(0usize..3, 0..3),
        revoke_before in proptest::collection::vec(any::<bool>(), 10),
        revoke_during in proptest::option::of(0usize..10),
        query in proptest::collection::vec(0usize..10, 1..4),
        seed in any::<u64>(),
    ) {
        actix_rt::System::new().block_on(async move {
            let settings = settings(2);
            let engine = engine(&settings);
            for (index, (words, doc_groups, other_tenant)) in docs.iter().enumerate() {
                let sentence: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
                let names: Vec<String> = doc_groups.iter().map(|g| format!("g{g}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let tenant = if *other_tenant { "globex" } else { "acme" };
                let text = format!("{}. The {} note ends here.", sentence.join(" "), WORDS[index % 10]);
                engine.upsert(tenant, vec![doc(&format!("d{index}"), "", &text, &refs)]).await.unwrap();
            }
            for (index, (_, _, other_tenant)) in docs.iter().enumerate() {
                if revoke_before[index] {
                    let tenant = if *other_tenant { "globex" } else { "acme" };
                    engine.mutate(AclMutation::Revoke { tenant: tenant.into(), doc_id: format!("d{index}"), groups: None, users: None }).await.unwrap();
                }
            }
            let generator = Arc::new(ChaosGenerator {
                seed: Mutex::new(seed),
                engine: Arc::clone(&engine),
                revoke_during: revoke_during.filter(|i| *i < docs.len()).map(|i| format!("d{i}")),
                seen: Mutex::new(Vec::new()),
            });
            let verifier = Arc::new(LexicalSupportVerifier::new(settings.verifier.min_coverage, settings.verifier.min_similarity, None));
            let pipeline = AnswerPipeline::new(engine.clone(), generator.clone(), verifier, PipelineSettings::from_settings(&settings));
            let names: Vec<String> = groups.iter().map(|g| format!("g{g}")).collect();
            let who = principal("acme", "u", &names.iter().map(String::as_str).collect::<Vec<_>>());
            let question: Vec<&str> = query.iter().map(|w| WORDS[*w]).collect();
            let request = AnswerRequest { question: question.join(" "), top_k: None, deadline_ms: None };
            let response = pipeline.answer(&who, request, "prop".into()).await.unwrap();
            let acl = engine.acl().load();
            assert_eq!(response.acl_epoch, acl.epoch());
            if response.status == AnswerStatus::Abstained {
                assert!(response.answer.is_none());
                return;
            }
            let prompts = generator.seen.lock().unwrap().clone();
            let claims = response.answer.expect("answered").claims;
            assert!(!claims.is_empty());
            for claim in claims {
                assert!(!claim.citations.is_empty(), "uncited claim returned");
                for citation in claim.citations {
                    // In the final context: the label was shown with this chunk's text.
                    let index: usize = citation.chunk.doc_id[1..].parse().unwrap();
                    let (words, _, other_tenant) = &docs[index];
                    assert!(!other_tenant, "cross-tenant citation");
                    let sentence: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
                    let text = format!("{}. The {} note ends here.", sentence.join(" "), WORDS[index % 10]);
                    let chunk: String = text.chars().skip(citation.chunk.start).take(citation.chunk.end - citation.chunk.start).collect();
                    assert!(chunk.contains(&citation.quote));
                    let shown = prompts.iter().flat_map(|p| p.sources.iter()).find(|s| s.label == citation.label).expect("label shown");
                    assert!(neutralize(&chunk).starts_with(&shown.text) || shown.text.starts_with(&neutralize(&chunk)));
                    // Authorized now.
                    let entry = acl.entry("acme", &citation.chunk.doc_id).expect("live");
                    assert_eq!(entry.version, citation.chunk.doc_version);
                    assert!(acl.allows(&who, entry.ordinal), "unauthorized citation returned");
                }
            }
        });
    }
}
