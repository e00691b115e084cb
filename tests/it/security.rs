//! Security hardening regressions that need the real binary or the whole pipeline: the published
//! demo key and the committed test keys never serve beyond loopback, a server accepting one
//! answers loopback host names only, and a source of one enormous word cannot blow up a chunk or
//! a prompt.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::scripted::{ScriptStep, ScriptedGenerator};
use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
use warrant::answer::{AnswerPipeline, AnswerRequest, PipelineSettings};

use crate::support::{doc, engine, principal, settings};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Regression: `serve` accepted the published demo HS256 secret on any address, so anyone who
/// read config/default.toml could mint admin tokens for a reachable deployment.
#[test]
fn the_demo_key_refuses_to_serve_beyond_loopback() {
    let snapshots = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .current_dir(MANIFEST_DIR)
        .arg("serve")
        .arg("--config")
        .arg(Path::new(MANIFEST_DIR).join("config/default.toml"))
        .env("WARRANT__SERVER__BIND", "0.0.0.0:0")
        .env("WARRANT__EMBEDDER__KIND", "hashed")
        .env("WARRANT__EMBEDDER__DIM", "64")
        .env("WARRANT__INDEX__SHARDS", "1")
        .env("WARRANT__DEMO__CORPUS", Path::new(MANIFEST_DIR).join("fixtures/demo/corpus.json"))
        .env("WARRANT__SNAPSHOTS__DIR", snapshots.path())
        .env_remove("WARRANT__AUTH__HS256_SECRET")
        .env_remove("WARRANT__AUTH__RS256_PUBLIC_KEY_FILE")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn warrant");
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        if line.starts_with("warrant listening on") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started on 0.0.0.0 with the demo key:\n{stderr}{line}");
        }
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "exit status {status}: {stderr}");
    for named in ["auth.hs256_secret", "server.bind", "0.0.0.0:0", "WARRANT__AUTH__HS256_SECRET"] {
        assert!(stderr.contains(named), "the refusal does not name {named}: {stderr}");
    }
}

/// Regression: a token was any run of letters, so a document of one 2,000,000-character word was
/// one token and the chunk, the context and the prompt carrying it were megabytes.
#[actix_web::test]
async fn a_two_million_letter_word_yields_bounded_chunks_and_a_bounded_prompt() {
    let settings = settings(1);
    let engine = engine(&settings);
    let (before, after) = ("Overtime is paid at time and a half. ", ". Overtime needs approval.");
    // As long as the admin API allows a document to be (2,000,000 characters).
    let word: String = "overtime".chars().cycle().take(2_000_000 - before.len() - after.len()).collect();
    let text = format!("{before}{word}{after}");
    engine.upsert("acme", vec![doc("long", "Long", &text, &["everyone"])]).await.unwrap();
    let max_chars = settings.chunking.max_tokens * 32;
    let who = principal("acme", "u", &["everyone"]);
    let scope = engine.scope(&who);
    let retrieved = engine.retrieve(&scope, "overtime").await.unwrap();
    assert!(!retrieved.candidates.is_empty());
    for candidate in &retrieved.candidates {
        let chunk = &candidate.chunk;
        assert!(chunk.text.chars().count() <= max_chars, "chunk of {} chars", chunk.text.chars().count());
        assert!(chunk.text.len() <= 4 * max_chars);
    }
    let generator = Arc::new(ScriptedGenerator::new(vec![ScriptStep::output(
        r#"{"answerable": true, "claims": [{"text": "Overtime is paid at time and a half.", "citations": ["S1"]}]}"#,
    )]));
    let verifier =
        Arc::new(LexicalSupportVerifier::new(settings.verifier.min_coverage, settings.verifier.min_similarity, None));
    let pipeline =
        AnswerPipeline::new(engine.clone(), generator.clone(), verifier, PipelineSettings::from_settings(&settings));
    let request = AnswerRequest { question: "How is overtime paid?".into(), top_k: None, deadline_ms: None };
    pipeline.answer(&who, request, "long-word".into()).await.unwrap();
    let calls = generator.calls();
    assert!(!calls.is_empty());
    // Every token covers at most 32 characters of at most 4 bytes each.
    let bound = settings.answer.prompt_token_budget * 32 * 4;
    for call in calls {
        assert!(call.user.len() + call.system.len() <= bound, "prompt of {} bytes", call.user.len());
    }
}

/// Runs `warrant serve` on 0.0.0.0 with `environment` set: its exit status and stderr, or a panic
/// naming the key it should not have served with, if it started listening.
fn serve_exposed(environment: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let snapshots = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_warrant"));
    command
        .current_dir(MANIFEST_DIR)
        .arg("serve")
        .arg("--config")
        .arg(Path::new(MANIFEST_DIR).join("config/default.toml"))
        .env("WARRANT__SERVER__BIND", "0.0.0.0:0")
        .env("WARRANT__EMBEDDER__KIND", "hashed")
        .env("WARRANT__EMBEDDER__DIM", "64")
        .env("WARRANT__INDEX__SHARDS", "1")
        .env("WARRANT__DEMO__CORPUS", Path::new(MANIFEST_DIR).join("fixtures/demo/corpus.json"))
        .env("WARRANT__SNAPSHOTS__DIR", snapshots.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in environment {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("spawn warrant");
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        if line.starts_with("warrant listening on") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started on 0.0.0.0 with {environment:?}:\n{stderr}{line}");
        }
        stderr.push_str(&line);
        stderr.push('\n');
    }
    (child.wait().unwrap(), stderr)
}

/// Regression (issue 57.17): `serve` accepted the committed test-only RS256 key
/// (`fixtures/auth/test_rs256_public.pem`, its private half in the repository) on any address,
/// here copied out of the fixtures so that only its content can give it away.
#[test]
fn a_committed_test_key_refuses_to_serve_beyond_loopback() {
    let directory = tempfile::tempdir().unwrap();
    let copied = directory.path().join("idp-public.pem");
    std::fs::copy(Path::new(MANIFEST_DIR).join("fixtures/auth/test_rs256_public.pem"), &copied).unwrap();
    let (status, stderr) = serve_exposed(&[
        ("WARRANT__AUTH__HS256_SECRET", "a-secret-of-this-deployment-of-32-bytes-or-more"),
        ("WARRANT__AUTH__RS256_PUBLIC_KEY_FILE", copied.to_str().unwrap()),
    ]);
    assert!(!status.success(), "exit status {status}: {stderr}");
    for named in ["auth.rs256_public_key_file", "fixtures/auth", "server.bind", "0.0.0.0:0"] {
        assert!(stderr.contains(named), "the refusal does not name {named}: {stderr}");
    }
}

/// Regression (issue 57.7): with the published demo key on loopback but `demo.load = false` (or
/// `demo.users = ""`), the server was not "in demo mode" and answered any `Host`, so a page whose
/// name was rebound to 127.0.0.1 could call the admin API with a token it signed itself with the
/// published key. A published key now means loopback names only, whatever the demo settings.
#[actix_web::test]
async fn a_published_key_answers_loopback_host_names_only_without_the_demo_corpus() {
    use actix_web::test::{TestRequest, call_service, init_service};
    let mut settings = warrant::config::Settings::defaults();
    settings.embedder.dim = 32;
    settings.index.shards = 1;
    let admin = crate::console::token(warrant::config::DEMO_HS256_SECRET, "acme", "mallory", &[], &["admin"]);
    let changes: [fn(&mut warrant::config::Settings); 2] =
        [|settings| settings.demo.load = false, |settings| settings.demo.users.clear()];
    for change in changes {
        let mut settings = settings.clone();
        change(&mut settings);
        let providers = crate::support::hashed_providers(&settings, None);
        let state = crate::support::demo_state(Arc::new(settings), providers).await;
        let service = init_service(warrant::http::server::app(state)).await;
        let request = |host: &str| {
            TestRequest::get()
                .uri("/v1/admin/acl/changes")
                .insert_header(("host", host))
                .insert_header(("authorization", format!("Bearer {admin}")))
                .to_request()
        };
        for host in ["rebind.attacker.example", "rebind.attacker.example:8080", "localhost.attacker.example"] {
            assert_eq!(call_service(&service, request(host)).await.status(), 421, "{host}");
        }
        assert_eq!(call_service(&service, request("localhost:8080")).await.status(), 200, "the key works on loopback");
    }
}
