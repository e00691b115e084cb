//! Answer quality and answer delivery end to end: `warrant eval answers`' library path on a tiny
//! two-tenant dataset written here (never the shared data), on the hashed embedder and the
//! extractive generator, through the same pipeline as `/v1/answer`.

use std::path::Path;

use warrant::answer::pipeline::response::AnswerStatus;
use warrant::config::Settings;
use warrant::eval::answers::{AnswersOptions, AnswersReport, evaluate, read_gold, run, sample_queries};
use warrant::eval::dataset::{Dataset, NoProgress};

/// Two tenants asking the same question; one question the corpus cannot answer.
fn write_dataset(dir: &Path) {
    let corpus = [
        r#"{"_id": "acme:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 250 euros per night in London. Taxis are reimbursed with a receipt.", "tenant": "acme"}"#,
        r#"{"_id": "acme:2", "title": "Laptop guide", "text": "Laptops are replaced every three years by the helpdesk.", "tenant": "acme"}"#,
        r#"{"_id": "globex:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 210 euros per night in London.", "tenant": "globex"}"#,
        r#"{"_id": "globex:2", "title": "Cafeteria", "text": "Lunch is served from noon in the cafeteria on the second floor.", "tenant": "globex"}"#,
    ];
    let queries = [
        r#"{"_id": "acme:q1", "text": "How much are hotel stays in London reimbursed per night?", "tenant": "acme"}"#,
        r#"{"_id": "acme:q2", "text": "How often are laptops replaced?", "tenant": "acme"}"#,
        r#"{"_id": "globex:q1", "text": "How much are hotel stays in London reimbursed per night?", "tenant": "globex"}"#,
        r#"{"_id": "globex:q2", "text": "What colour is the parking garage?", "tenant": "globex"}"#,
    ];
    let qrels = "query-id\tcorpus-id\tscore\nacme:q1\tacme:1\t1\nacme:q2\tacme:2\t1\nglobex:q1\tglobex:1\t1\nglobex:q2\tglobex:2\t1\n";
    let answers = [
        r#"{"_id": "acme:q1", "answers": ["250 euros"]}"#,
        r#"{"_id": "acme:q2", "answers": ["every three years"]}"#,
        r#"{"_id": "globex:q1", "answers": ["up to 210 euros"]}"#,
        r#"{"_id": "globex:q2", "answers": ["grey"]}"#,
    ];
    std::fs::write(dir.join("corpus.jsonl"), corpus.join("\n")).unwrap();
    std::fs::write(dir.join("queries.jsonl"), queries.join("\n")).unwrap();
    std::fs::write(dir.join("qrels.tsv"), qrels).unwrap();
    std::fs::write(dir.join("answers.jsonl"), answers.join("\n")).unwrap();
}

fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.embedder.kind = warrant::config::EmbedderKind::Hashed;
    settings.embedder.dim = 64;
    settings
}

fn eval(dir: &Path, questions: Option<usize>, seed: u64) -> AnswersReport {
    let dataset = Dataset::load(dir, None).expect("dataset loads");
    let gold = read_gold(&dir.join("answers.jsonl")).expect("gold answers");
    let options = AnswersOptions { gold, ..AnswersOptions::new(questions, seed) };
    actix_rt::System::new().block_on(async move {
        let (summary, report) = run(&settings(), &dataset, &options, &NoProgress).await.expect("evaluation runs");
        assert_eq!(summary.documents, 4);
        report
    })
}

#[test]
fn eval_answers_scores_the_pipeline_answers() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let report = eval(dir.path(), None, 7);
    assert_eq!(report.questions, 4);
    assert_eq!((report.generator.as_str(), report.embedder.starts_with("hashed")), ("extractive", true));
    let by_id = |id: &str| report.per_query.iter().find(|scores| scores.query_id == id).expect(id);
    for id in ["acme:q1", "acme:q2", "globex:q1"] {
        let scores = by_id(id);
        assert_eq!(scores.status, AnswerStatus::Answered, "{id}");
        assert_eq!(scores.correct, Some(true), "{id}");
        assert_eq!(scores.relevant_citations, scores.citations, "{id}: only its own tenant's relevant document");
    }
    let unanswerable = by_id("globex:q2");
    assert_eq!(unanswerable.status, AnswerStatus::Abstained);
    assert_eq!(unanswerable.correct, None);
    assert_eq!(report.abstentions.values().sum::<usize>(), 1);
    assert_eq!(report.answer_rate.mean, 0.75);
    assert_eq!(report.citation_precision, 1.0);
    assert_eq!(report.correct_of_answered.expect("gold answers").mean, 1.0);
    assert_eq!(report.correct_of_questions.expect("gold answers").mean, 0.75);
    assert_eq!(report.unanchored_quotes, 0);
    // What the generator was shown: each answerable question's own gold answer; the garage's
    // colour is in no source.
    for id in ["acme:q1", "acme:q2", "globex:q1"] {
        assert_eq!(by_id(id).context_holds_gold, Some(true), "{id}");
    }
    assert_eq!(unanswerable.context_holds_gold, Some(false));
    assert_eq!(report.context_holds_gold.expect("gold answers").mean, 0.75);
    assert_eq!(report.answer_rate_given_gold_in_context.expect("gold in context").mean, 1.0);
    assert_eq!(report.correct_given_gold_in_context.expect("gold in context").mean, 1.0);
    assert!(report.latency_ms.contains_key("total") && report.latency_ms.contains_key("generation"));
    // A fixed seed samples the same questions; --n limits them.
    let sample =
        |seed| eval(dir.path(), Some(2), seed).per_query.into_iter().map(|scores| scores.query_id).collect::<Vec<_>>();
    assert_eq!(sample(3), sample(3));
    assert_eq!(sample(3).len(), 2);
}

/// Abstains (`answerable: false`) on its first `answers` calls, then never answers.
struct StallsAfter {
    answers: usize,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl warrant::answer::providers::generator::Generator for StallsAfter {
    fn name(&self) -> &str {
        "stalls-after"
    }

    async fn generate(
        &self,
        _request: &warrant::answer::providers::generator::GenerationRequest,
    ) -> Result<String, warrant::answer::providers::generator::GeneratorError> {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= self.answers {
            std::future::pending::<()>().await;
        }
        Ok(r#"{"answerable": false, "claims": []}"#.into())
    }
}

/// Regression: `--per-query` was written only at the end, so a long run with a real model that
/// was stopped (or crashed) midway kept nothing. The file is now a checkpoint of every question
/// asked so far.
#[test]
fn a_stopped_eval_answers_run_keeps_the_scores_of_the_questions_it_asked() {
    use std::sync::Arc;
    use warrant::answer::pipeline::{AnswerPipeline, PipelineSettings};
    use warrant::embedded::{Engine, EngineParams};

    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let checkpoint = dir.path().join("per-query.jsonl");
    let dataset = Dataset::load(dir.path(), None).expect("dataset loads");
    let mut settings = settings();
    settings.answer.deadline_ms = settings.answer.max_deadline_ms;
    let options = AnswersOptions { checkpoint: Some(checkpoint.clone()), ..AnswersOptions::new(None, 7) };
    let expected: Vec<String> =
        sample_queries(&dataset, None, 7, 0).into_iter().map(|query| query.id.clone()).collect();
    actix_rt::System::new().block_on(async move {
        let providers = warrant::providers::from_settings(&settings).await.expect("providers");
        let engine =
            Engine::start(EngineParams::from_settings(&settings, providers.embedder.dimension()), providers.embedder)
                .expect("engine");
        warrant::eval::dataset::ingest(&engine, &dataset, 16, &NoProgress).await.expect("ingest");
        let generator = Arc::new(StallsAfter { answers: 2, calls: Default::default() });
        let pipeline =
            AnswerPipeline::new(engine, generator, providers.verifier, PipelineSettings::from_settings(&settings));
        let lines = || std::fs::read_to_string(&checkpoint).map(|text| text.lines().count()).unwrap_or(0);
        // Stop the run (drop its future) once two questions are checkpointed: the third stalls.
        tokio::select! {
            _ = evaluate(&pipeline, &dataset, &options) => panic!("the third question never ends"),
            _ = async { while lines() < 2 { tokio::time::sleep(std::time::Duration::from_millis(20)).await } } => {}
        }
    });
    let text = std::fs::read_to_string(dir.path().join("per-query.jsonl")).expect("checkpoint written");
    let asked: Vec<String> = text
        .lines()
        .map(|line| {
            let scores: serde_json::Value = serde_json::from_str(line).expect("a whole JSON line");
            scores["query_id"].as_str().expect("query id").to_owned()
        })
        .collect();
    // The questions before the stalled one, in sample order, each scored once.
    assert!(asked.len() >= 2 && asked.len() < expected.len(), "{asked:?}");
    assert_eq!(asked, expected[..asked.len()]);
}

mod streaming {
    //! `POST /v1/answer` with `Accept: text/event-stream`, over a real socket.

    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use async_trait::async_trait;
    use serde_json::{Value, json};
    use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};

    use warrant::config::Settings;

    use warrant::http::auth::{Claims, mint_hs256};

    const SECRET: &str = "test-secret-for-streaming-tests";
    const HOTEL: &str = "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York.";
    const QUOTE: &str = "Hotel stays are reimbursed up to 180 euros per night in most cities and up to 250 euros per \
                         night in London, Paris and New York";
    const FORGED: &str = "Hotel stays are reimbursed up to 999 euros per night on the moon.";

    /// Waits, then answers one quote-anchored claim citing the source that holds [`HOTEL`] and
    /// one claim that no source supports (which validation must drop).
    struct SlowGenerator;

    #[async_trait]
    impl Generator for SlowGenerator {
        fn name(&self) -> &str {
            "slow-test"
        }

        async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let label = request
                .sources
                .iter()
                .find(|source| source.text.contains("250 euros per night"))
                .map(|source| source.label.clone())
                .ok_or_else(|| GeneratorError::Refused("no hotel source".into()))?;
            Ok(json!({"answerable": true, "claims": [
                {"text": HOTEL, "citations": [{"label": label, "quote": QUOTE}]},
                {"text": FORGED, "citations": [label]},
            ]})
            .to_string())
        }
    }

    /// Cites the hotel source with a quote that is not in it (then, on repair, the same).
    struct MisquotingGenerator;

    #[async_trait]
    impl Generator for MisquotingGenerator {
        fn name(&self) -> &str {
            "misquoting-test"
        }

        async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
            let label = request.sources.first().map(|source| source.label.clone()).unwrap_or_default();
            Ok(json!({"answerable": true, "claims": [
                {"text": HOTEL, "citations": [{"label": label, "quote": "reimbursed up to 250 euros per night on Mars"}]},
            ]})
            .to_string())
        }
    }

    struct Server {
        base: String,
        handle: actix_web::dev::ServerHandle,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let handle = self.handle.clone();
            actix_rt::spawn(async move { handle.stop(false).await });
        }
    }

    async fn start(generator: Option<Arc<dyn Generator>>) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut settings = Settings::defaults();
        settings.auth.hs256_secret = SECRET.into();
        settings.embedder.dim = 64;
        let settings = Arc::new(settings);
        let providers = crate::support::hashed_providers(&settings, generator);
        let state = crate::support::demo_state(Arc::clone(&settings), providers).await;
        let (base, handle) = crate::support::listen(state.clone(), 1);
        Server { base, handle }
    }

    fn token() -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let claims = Claims {
            sub: "bob".into(),
            tenant: "acme".into(),
            groups: vec!["everyone".into()],
            roles: vec![],
            exp: now + 600,
            iss: None,
            aud: None,
        };
        mint_hs256(SECRET, &claims).unwrap()
    }

    /// Parsed server-sent events: (event name, data as JSON).
    fn parse(text: &str) -> Vec<(String, Value)> {
        text.split("\n\n")
            // Comment frames (`: keep-alive`) carry no event.
            .filter(|frame| !frame.trim().is_empty() && !frame.starts_with(':'))
            .map(|frame| {
                let field = |name: &str| {
                    frame.lines().find_map(|line| line.strip_prefix(name)).map(str::trim).expect("field").to_owned()
                };
                (field("event:"), serde_json::from_str(&field("data:")).expect("one line of JSON"))
            })
            .collect()
    }

    /// Posts the question accepting an event stream; returns the chunks as they arrived.
    async fn stream(server: &Server, question: &str) -> (reqwest::header::HeaderMap, Vec<String>) {
        let mut response = reqwest::Client::new()
            .post(format!("{}/v1/answer", server.base))
            .bearer_auth(token())
            .header("accept", "text/event-stream")
            .json(&json!({"question": question}))
            .send()
            .await
            .expect("response");
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        let mut chunks = Vec::new();
        while let Some(chunk) = response.chunk().await.expect("chunk") {
            chunks.push(String::from_utf8(chunk.to_vec()).expect("utf-8"));
        }
        (headers, chunks)
    }

    fn without_timings(mut envelope: Value) -> Value {
        envelope["request_id"] = Value::Null;
        envelope["metrics"]["stages_ms"] = Value::Null;
        envelope
    }

    #[actix_web::test]
    async fn a_streamed_answer_sends_stages_then_each_validated_claim_then_the_envelope() {
        let server = start(None).await;
        let question = "How much are hotel stays reimbursed per night in London?";
        let (headers, chunks) = stream(&server, question).await;
        assert_eq!(headers["content-type"], "text/event-stream");
        let events = parse(&chunks.concat());
        let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
        let first_claim = names.iter().position(|name| *name == "claim").expect("a claim event");
        assert!(names[..first_claim].iter().all(|name| *name == "stage"), "{names:?}");
        assert_eq!(names.last(), Some(&"answer"), "{names:?}");
        let stages: Vec<&str> = events
            .iter()
            .filter(|(name, _)| name == "stage")
            .map(|(_, data)| data["stage"].as_str().unwrap())
            .collect();
        assert_eq!(stages, ["scope", "retrieval", "selection", "prompt", "generation", "validation"]);
        let envelope = &events.last().unwrap().1;
        assert_eq!(envelope["status"], "answered");
        let streamed: Vec<&Value> = events.iter().filter(|(name, _)| name == "claim").map(|(_, data)| data).collect();
        let enveloped: Vec<&Value> = envelope["answer"]["claims"].as_array().unwrap().iter().collect();
        assert_eq!(streamed, enveloped, "each claim of the envelope streamed once, in order");
        for citation in enveloped.iter().flat_map(|claim| claim["citations"].as_array().unwrap()) {
            let (start, end) = (citation["start"].as_u64().unwrap(), citation["end"].as_u64().unwrap());
            let (quote_start, quote_end) =
                (citation["quote_start"].as_u64().unwrap(), citation["quote_end"].as_u64().unwrap());
            assert!(start <= quote_start && quote_start < quote_end && quote_end <= end, "{citation}");
        }
        // The envelope is the JSON response.
        let plain: Value = reqwest::Client::new()
            .post(format!("{}/v1/answer", server.base))
            .bearer_auth(token())
            .json(&json!({"question": question}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(without_timings(plain), without_timings(envelope.clone()));
    }

    #[actix_web::test]
    async fn stages_stream_while_the_generator_runs_and_a_dropped_claim_is_never_streamed() {
        let server = start(Some(Arc::new(SlowGenerator))).await;
        let (_, chunks) = stream(&server, "How much are hotel stays reimbursed per night in London?").await;
        // The generator waits 1.5 s: what came before generation ended arrived in earlier chunks.
        assert!(chunks.len() > 1, "one chunk: the stream was buffered");
        assert!(chunks[0].starts_with("event: stage") && !chunks[0].contains("event: claim"), "{:?}", chunks[0]);
        let body = chunks.concat();
        let events = parse(&body);
        let envelope = &events.last().unwrap().1;
        assert_eq!(envelope["status"], "answered", "{envelope}");
        assert_eq!(envelope["metrics"]["citations_rejected"]["unsupported_claim"], 1, "{envelope}");
        // Regression (issue 47): a claim dropped under drop_claim left the answer looking whole.
        assert_eq!(envelope["answer"]["partial"], true, "{envelope}");
        assert_eq!(envelope["answer"]["withheld"], json!([{"reason": "unsupported_claim"}]), "{envelope}");
        let streamed: Vec<&str> =
            events.iter().filter(|(name, _)| name == "claim").map(|(_, data)| data["text"].as_str().unwrap()).collect();
        assert_eq!(streamed, [HOTEL]);
        assert!(!body.contains("999 euros"), "the unsupported claim reached the stream");
        let quote = &envelope["answer"]["claims"][0]["citations"][0]["quote"];
        assert_eq!(quote, QUOTE);
    }

    /// Never answers; sets `cancelled` when its work is dropped (the pipeline was cancelled).
    struct HangingGenerator {
        cancelled: Arc<std::sync::atomic::AtomicBool>,
    }

    struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl Generator for HangingGenerator {
        fn name(&self) -> &str {
            "hanging-test"
        }

        async fn generate(&self, _: &GenerationRequest) -> Result<String, GeneratorError> {
            let _cancelled = SetOnDrop(Arc::clone(&self.cancelled));
            std::future::pending::<()>().await;
            Err(GeneratorError::Refused("unreachable".into()))
        }
    }

    /// Regression: a streamed answer whose client closed the connection normally (FIN, not RST)
    /// ran on to its deadline, holding its in-flight slot: nothing was written to notice the
    /// close while the generator ran.
    #[actix_web::test]
    async fn a_stream_whose_client_closes_normally_is_cancelled() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server = start(Some(Arc::new(HangingGenerator { cancelled: Arc::clone(&cancelled) }))).await;
        let address = server.base.trim_start_matches("http://").to_owned();
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        let body =
            json!({"question": "How much are hotel stays reimbursed per night in London?", "deadline_ms": 60_000})
                .to_string();
        let request = format!(
            "POST /v1/answer HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {}\r\naccept: text/event-stream\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            token(),
            body.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        // Read until the prompt stage arrived: the generator runs, and nothing more is sent.
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains(r#""stage":"prompt""#) {
            let read = tokio::time::timeout(Duration::from_secs(30), socket.read(&mut buffer)).await.unwrap().unwrap();
            assert!(read > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buffer[..read]);
        }
        // Everything sent was read, so closing sends a FIN (not an RST).
        drop(socket);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !cancelled.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "the work went on after the client closed its stream");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[actix_web::test]
    async fn a_json_request_still_gets_json_and_openapi_names_both_media_types() {
        let server = start(None).await;
        let response = reqwest::Client::new()
            .post(format!("{}/v1/answer", server.base))
            .bearer_auth(token())
            .header("accept", "application/json")
            .json(&json!({"question": "How much are hotel stays reimbursed per night in London?"}))
            .send()
            .await
            .unwrap();
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        // The OpenAPI document names both media types of the 200 response.
        let document: Value = reqwest::Client::new()
            .get(format!("{}/openapi.json", server.base))
            .bearer_auth(token())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let content = &document["paths"]["/v1/answer"]["post"]["responses"]["200"]["content"];
        assert!(content["application/json"].is_object() && content["text/event-stream"].is_object(), "{content}");
        let text = document.to_string();
        assert!(text.contains("\"quote_start\"") && text.contains("\"quote_end\""), "quote offsets undocumented");
    }

    #[actix_web::test]
    async fn a_quote_not_in_its_source_is_rejected_and_counted() {
        let server = start(Some(Arc::new(MisquotingGenerator))).await;
        let (_, chunks) = stream(&server, "How much are hotel stays reimbursed per night in London?").await;
        let body = chunks.concat();
        let events = parse(&body);
        assert!(events.iter().all(|(name, _)| name != "claim"), "a misquoted claim was streamed");
        let envelope = &events.last().unwrap().1;
        assert_eq!(envelope["status"], "abstained", "{envelope}");
        assert_eq!(envelope["abstention"]["reason"], "unsupported_citation", "{envelope}");
        assert_eq!(envelope["abstention"]["diagnostics"], json!(["quote_not_found"]), "{envelope}");
        assert_eq!(envelope["metrics"]["citations_rejected"]["quote_not_found"], 2, "one per attempt: {envelope}");
        let metrics = reqwest::get(format!("{}/metrics", server.base)).await.unwrap().text().await.unwrap();
        assert!(
            metrics
                .lines()
                .any(|line| line.starts_with("warrant_citations_rejected_total{reason=\"quote_not_found\"}")),
            "no quote_not_found counter"
        );
    }
}

/// Test FAKE judge: an OpenAI-compatible chat completions endpoint on a local socket that says
/// "yes" exactly when the passage it is shown contains "euros" (a fixed rule, no model); one
/// request per connection. Returns its base URL.
async fn fake_judge() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 8192];
                let body = loop {
                    let read = stream.read(&mut buffer).await.unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..read]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some(head_end) = text.find("\r\n\r\n") else { continue };
                    let length = text[..head_end]
                        .lines()
                        .find_map(|line| {
                            line.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if request.len() >= head_end + 4 + length {
                        break request[head_end + 4..head_end + 4 + length].to_vec();
                    }
                };
                let asked: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let user = asked["messages"][1]["content"].as_str().unwrap_or_default();
                let passage = user.split("<<<").nth(1).and_then(|rest| rest.split(">>>").next()).unwrap_or_default();
                let verdict = if passage.contains("euros") { "yes" } else { "no" };
                let reply = serde_json::json!({"choices": [{"message": {"role": "assistant", "content": format!("{{\"verdict\": \"{verdict}\"}}")}}]}).to_string();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    reply.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/v1")
}

/// Issue 47 item 8: `eval answers --judge` asks a separate judge about every returned claim's
/// quotes and reports judge-labelled groundedness, with the judge's agreement on labeled claims.
#[test]
fn eval_answers_with_a_judge_reports_judge_labelled_groundedness_and_its_agreement() {
    use std::sync::Arc;
    use std::time::Duration;
    use warrant::answer::providers::judge_verifier::JudgeSupportVerifier;
    use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;

    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let claims = dir.path().join("claims.jsonl");
    let rows = [
        r#"{"claim": "Hotels cost 250 euros.", "label": "SUPPORT", "sentences": ["Intro.", "Hotels cost 250 euros a night."], "evidence_sentences": [1]}"#,
        r#"{"claim": "Laptops last three years.", "label": "SUPPORT", "sentences": ["Laptops are replaced every three years."], "evidence_sentences": [0]}"#,
        r#"{"claim": "Hotels are free.", "label": "CONTRADICT", "sentences": ["Hotels cost 250 euros."], "evidence_sentences": [0]}"#,
        r#"{"claim": "Cars are blue.", "label": "NOT_ENOUGH_INFO", "sentences": ["Lunch is at noon."]}"#,
    ];
    std::fs::write(&claims, rows.join("\n")).unwrap();
    let dataset = Dataset::load(dir.path(), None).expect("dataset loads");
    let gold = read_gold(&dir.path().join("answers.jsonl")).unwrap();
    actix_rt::System::new().block_on(async move {
        let url = fake_judge().await;
        let judge = Arc::new(
            JudgeSupportVerifier::new(
                LexicalSupportVerifier::new(1.0, 1.0, None),
                &url,
                "fake",
                None,
                Duration::from_secs(10),
                0.25,
            )
            .unwrap()
            .model_only(),
        );
        let options = AnswersOptions { gold, judge: Some(judge.clone()), ..AnswersOptions::new(None, 7) };
        let (_, report) = run(&settings(), &dataset, &options, &NoProgress).await.expect("evaluation runs");
        assert_eq!(report.judge.as_deref(), Some("judge:fake"));
        let by_id = |id: &str| report.per_query.iter().find(|scores| scores.query_id == id).expect(id);
        // The hotel answers quote a sentence with "euros", the laptop answer does not.
        for (id, supported) in [("acme:q1", true), ("globex:q1", true), ("acme:q2", false)] {
            let scores = by_id(id);
            assert!(scores.claims > 0, "{id}");
            assert_eq!(scores.judge_supported, vec![supported; scores.claims], "{id}");
        }
        assert!(by_id("globex:q2").judge_supported.is_empty(), "an abstention has no claim to judge");
        let judged: Vec<bool> = report.per_query.iter().flat_map(|scores| scores.judge_supported.clone()).collect();
        let expected = judged.iter().filter(|supported| **supported).count() as f64 / judged.len() as f64;
        assert_eq!(report.judged_claims, Some(judged.len()));
        let grounded = report.judge_labelled_groundedness.expect("judged");
        assert!((grounded.mean - expected).abs() < 1e-12 && expected > 0.0 && expected < 1.0, "{grounded:?}");
        // Agreement on the labeled claims, each against its rationale: yes on the two with
        // "euros" (one SUPPORT, one CONTRADICT), no on the rest: precision 1/2, recall 1/2.
        let agreement = warrant::eval::judge::judge_agreement(&claims, 10, 13, judge.as_ref()).await.unwrap();
        assert_eq!(agreement.rows, 4);
        assert_eq!((agreement.precision.mean, agreement.recall.mean), (0.5, 0.5));
        assert_eq!(agreement.passed_by_label["SUPPORT"], (1, 2));
        assert_eq!(agreement.passed_by_label["CONTRADICT"], (1, 1));
        // A judge that cannot be reached says no: nothing is judge-labelled grounded.
        let gone = Arc::new(
            JudgeSupportVerifier::new(
                LexicalSupportVerifier::new(1.0, 1.0, None),
                "http://127.0.0.1:9/v1",
                "gone",
                None,
                Duration::from_secs(2),
                0.25,
            )
            .unwrap()
            .model_only(),
        );
        let options = AnswersOptions { judge: Some(gone), ..AnswersOptions::new(None, 7) };
        let (_, report) = run(&settings(), &dataset, &options, &NoProgress).await.expect("evaluation runs");
        assert_eq!(report.judged_claims, Some(judged.len()));
        assert_eq!(report.judge_labelled_groundedness.map(|interval| interval.mean), Some(0.0));
    });
}

mod material_claims {
    //! `answer.abstain_on_material_withheld`: under `drop_claim`, an answer whose withheld claim
    //! holds as many of the question's content terms as every claim that stands, and one none of
    //! them holds, abstains (`material_claim_unsupported`, after its one repair); one whose
    //! withheld claim is beside the question is answered as partial.

    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use serde_json::json;
    use warrant::answer::pipeline::response::{AnswerResponse, AnswerStatus};
    use warrant::answer::pipeline::{AnswerPipeline, AnswerRequest, PipelineSettings};
    use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
    use warrant::answer::providers::lexical_verifier::LexicalSupportVerifier;
    use warrant::config::{ClaimPolicy, Settings};
    use warrant::embed::HashedEmbedder;

    use crate::support::{doc, engine, principal};

    const QUESTION: &str = "How much are hotel stays reimbursed per night in London?";
    const RATE: &str = "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York.";
    const BOOKING: &str = "Hotel stays must be booked through the travel desk.";

    /// `(claim text, snippet)`: a claim citing the source whose text holds the snippet.
    type Claims = Vec<(&'static str, &'static str)>;

    /// Test FAKE generator: its first call answers `claims`, each `(text, snippet)` citing the
    /// label of the source whose text holds `snippet` (so a claim can cite a source that does not
    /// support it), and later calls (repairs) `repaired` the same way, or `claims` again when it
    /// is empty; counts its calls.
    struct CitingBySnippet {
        claims: Claims,
        repaired: Claims,
        calls: Mutex<usize>,
    }

    #[async_trait]
    impl Generator for CitingBySnippet {
        fn name(&self) -> &str {
            "citing-by-snippet"
        }

        async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
            let call = {
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            let claims = if call > 1 && !self.repaired.is_empty() { &self.repaired } else { &self.claims };
            let claims: Vec<_> = claims
                .iter()
                .map(|(text, snippet)| {
                    let label = request
                        .sources
                        .iter()
                        .find(|source| source.text.contains(snippet))
                        .map(|source| source.label.clone())
                        .ok_or_else(|| GeneratorError::Refused(format!("no source holds {snippet:?}")))?;
                    Ok(json!({"text": text, "citations": [label]}))
                })
                .collect::<Result<_, GeneratorError>>()?;
            Ok(json!({"answerable": true, "claims": claims}).to_string())
        }
    }

    /// The answer to [`QUESTION`] over the rate and booking documents, with `claims` generated
    /// and `settings` changed by `change`: (response, generator calls).
    fn ask(claims: Claims, repaired: Claims, change: impl FnOnce(&mut Settings)) -> (AnswerResponse, usize) {
        let mut settings = crate::support::settings(1);
        settings.answer.claim_policy = ClaimPolicy::DropClaim;
        change(&mut settings);
        actix_rt::System::new().block_on(async move {
            let engine = engine(&settings);
            let documents = vec![
                doc("rates", "Hotel rates", RATE, &["everyone"]),
                doc("booking", "Booking", BOOKING, &["everyone"]),
            ];
            engine.upsert("acme", documents).await.expect("documents stored");
            let generator = Arc::new(CitingBySnippet { claims, repaired, calls: Mutex::new(0) });
            let verifier = Arc::new(LexicalSupportVerifier::new(
                settings.verifier.min_coverage,
                settings.verifier.min_similarity,
                Some(Arc::new(HashedEmbedder::new(settings.embedder.dim))),
            ));
            let pipeline =
                AnswerPipeline::new(engine, generator.clone(), verifier, PipelineSettings::from_settings(&settings));
            let request = AnswerRequest { question: QUESTION.into(), top_k: None, deadline_ms: Some(30_000) };
            let who = principal("acme", "bob", &["everyone"]);
            let response = pipeline.answer(&who, request, "material".into()).await.expect("no server fault");
            let calls = *generator.calls.lock().unwrap();
            (response, calls)
        })
    }

    /// The withheld claim states the nightly rate asked for (cited to the booking source, which
    /// does not support it); the claim that stands is about booking. Answering with the booking
    /// claim alone would hide that the question's answer was dropped.
    #[test]
    fn a_withheld_claim_on_the_question_s_focus_abstains() {
        let (response, calls) = ask(vec![(RATE, "booked"), (BOOKING, "booked")], vec![], |_| {});
        assert_eq!(response.status, AnswerStatus::Abstained, "{response:?}");
        let abstention = response.abstention.as_ref().expect("an abstention");
        assert_eq!(abstention.reason.as_str(), "material_claim_unsupported");
        assert_eq!(abstention.diagnostics, ["unsupported_claim"]);
        // Like any failed attempt: repaired once, then abstained.
        assert_eq!((calls, response.metrics.generator_attempts), (2, 2));
    }

    /// The withheld claim (booking, cited to the rate source) is beside the question: the rate
    /// claim stands, and the answer says it is partial.
    #[test]
    fn a_withheld_claim_beside_the_question_leaves_a_partial_answer() {
        let (response, calls) = ask(vec![(RATE, "250 euros"), (BOOKING, "250 euros")], vec![], |_| {});
        assert_eq!(response.status, AnswerStatus::Answered, "{response:?}");
        let answer = response.answer.as_ref().expect("an answer");
        assert_eq!(answer.claims.iter().map(|claim| claim.text.as_str()).collect::<Vec<_>>(), [RATE]);
        assert!(answer.partial);
        assert_eq!(
            answer.withheld.iter().map(|withheld| withheld.reason.as_str()).collect::<Vec<_>>(),
            ["unsupported_claim"]
        );
        assert_eq!(calls, 1);
    }

    /// The repair gets the withheld claim's problem like any failed attempt's; an output that
    /// then cites the rate to its own source is answered whole.
    #[test]
    fn a_repair_that_supports_the_material_claim_is_answered_whole() {
        let (response, calls) =
            ask(vec![(RATE, "booked"), (BOOKING, "booked")], vec![(RATE, "250 euros"), (BOOKING, "booked")], |_| {});
        assert_eq!(response.status, AnswerStatus::Answered, "{response:?}");
        let answer = response.answer.as_ref().expect("an answer");
        assert_eq!(answer.claims.len(), 2);
        assert!(!answer.partial && answer.withheld.is_empty());
        assert_eq!(calls, 2);
    }

    /// `answer.abstain_on_material_withheld = false`: what stands is the answer, marked partial
    /// (the behaviour before the setting).
    #[test]
    fn with_the_setting_off_a_material_claim_withheld_leaves_a_partial_answer() {
        let (response, calls) = ask(vec![(RATE, "booked"), (BOOKING, "booked")], vec![], |settings| {
            settings.answer.abstain_on_material_withheld = false;
        });
        assert_eq!(response.status, AnswerStatus::Answered, "{response:?}");
        let answer = response.answer.as_ref().expect("an answer");
        assert_eq!(answer.claims.iter().map(|claim| claim.text.as_str()).collect::<Vec<_>>(), [BOOKING]);
        assert!(answer.partial);
        assert_eq!(calls, 1);
    }
}
