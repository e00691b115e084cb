//! What the server logs: the real binary at `RUST_LOG=trace` (every level of every crate, the
//! text format it ships with), its stderr captured whole while one tenant asks the questions whose
//! nearest documents are another tenant's near-duplicates. Logs may be shipped elsewhere
//! (SECURITY.md): no document text, no other tenant's id and no query text may reach them.

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::snapshots::{Process, call, command, demo_corpus, retrieved_docs, token};

/// The caller's tenant; the demo corpus's other tenant holds the near-duplicates.
const TENANT: &str = "acme";
const OTHER_TENANT: &str = "globex";

/// Questions of `acme`'s `alice`: the travel policy both tenants hold in near-identical words,
/// and password rules only `globex` has (its handbook is the only similar document). Neither is
/// the example question the server prints at start.
const QUESTIONS: &[&str] = &["Nightly hotel limit for London trips?", "Minimum characters for a password?"];

/// Words in a row that count as document text when they show up in a log line.
const DOCUMENT_SHINGLE: usize = 5;
/// Words in a row that count as query text.
const QUERY_SHINGLE: usize = 3;

/// Lines a server wrote to stderr, and the thread that collects them (it ends with the process).
pub(crate) type Captured = (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>);

/// A server at `RUST_LOG=trace` on the demo corpus, and every line it writes to stderr.
fn spawn_logging(snapshot_dir: &std::path::Path) -> (Process, Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let mut server = command(snapshot_dir, &[]);
    server.env("RUST_LOG", "trace").env("NO_COLOR", "1");
    let (process, (lines, reader)) = spawn_capturing(server);
    (process, lines, reader)
}

/// Starts a prepared server command, waits (at most 60 s) for the address it prints, and keeps
/// every line it writes to stderr.
pub(crate) fn spawn_capturing(mut server: std::process::Command) -> (Process, Captured) {
    let mut child = server.spawn().expect("spawn warrant");
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (sender, receiver) = std::sync::mpsc::channel();
    let captured = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line.strip_prefix("warrant listening on ") {
                let _ = sender.send(address.trim().to_owned());
            }
            captured.lock().unwrap().push(line);
        }
    });
    let base = receiver.recv_timeout(Duration::from_secs(60)).expect("server printed its address");
    (Process { child, base }, (lines, reader))
}

/// Lowercased runs of `length` words of `text` (all of it when shorter).
fn shingles(text: &str, length: usize) -> Vec<String> {
    let words: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    words.windows(length.min(words.len())).map(|window| window.join(" ")).collect()
}

/// Drops ANSI escape sequences (in case a terminal setting colours the output anyway).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut characters = line.chars();
    while let Some(character) = characters.next() {
        if character == '\u{1b}' {
            for inner in characters.by_ref() {
                if inner.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(character);
    }
    out
}

/// For each kind of needle found in `logs`: how many of its needles, and the first with its line.
fn leaks(logs: &[String], needles: &[(&'static str, String)]) -> Vec<String> {
    let mut found: Vec<(&str, usize, String)> = Vec::new();
    for (kind, needle) in needles {
        let Some(line) = logs.iter().find(|line| line.contains(needle.as_str())) else { continue };
        match found.iter_mut().find(|(known, _, _)| known == kind) {
            Some((_, count, _)) => *count += 1,
            None => found.push((kind, 1, format!("{needle:?} in: {}", line.chars().take(300).collect::<String>()))),
        }
    }
    found.into_iter().map(|(kind, count, first)| format!("{kind}: {count} found, first {first}")).collect()
}

#[actix_web::test]
async fn cross_tenant_near_duplicates_leave_no_text_tenant_or_query_in_the_logs() {
    let snapshots = tempfile::tempdir().unwrap();
    let (server, lines, reader) = spawn_logging(snapshots.path());
    let alice = token(TENANT, "alice", &["everyone", "engineering"], "");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let (mut answers, mut streams, mut retrievals) = (Vec::new(), Vec::new(), Vec::new());
    for question in QUESTIONS {
        let body = json!({ "question": question });
        answers
            .push(call(&client, &server.base, reqwest::Method::POST, "/v1/answer", &alice, Some(body.clone())).await);
        let streamed = client
            .post(format!("{}/v1/answer", server.base))
            .bearer_auth(&alice)
            .header("accept", "text/event-stream")
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("event stream");
        streams.push((streamed.status().as_u16(), Value::String(streamed.text().await.unwrap())));
        let query = json!({ "query": question, "k": 20 });
        retrievals.push(call(&client, &server.base, reqwest::Method::POST, "/v1/retrieve", &alice, Some(query)).await);
    }
    // Every log line of a request is written before its response: stop the server, read the rest.
    drop(server);
    reader.join().unwrap();
    let logs: Vec<String> = lines.lock().unwrap().iter().map(|line| plain(line).to_lowercase()).collect();

    let corpus: Value = serde_json::from_str(&std::fs::read_to_string(demo_corpus()).unwrap()).unwrap();
    let mut needles: Vec<(&'static str, String)> = vec![("other tenant's id", OTHER_TENANT.to_owned())];
    for document in corpus["documents"].as_array().expect("documents") {
        let kind = if document["tenant"] == OTHER_TENANT { "other tenant's document text" } else { "document text" };
        let text = document["text"].as_str().unwrap();
        needles.extend(shingles(text, DOCUMENT_SHINGLE).into_iter().map(|shingle| (kind, shingle)));
    }
    for question in QUESTIONS {
        needles.extend(shingles(question, QUERY_SHINGLE).into_iter().map(|shingle| ("query text", shingle)));
    }
    let leaks = leaks(&logs, &needles);
    assert!(leaks.is_empty(), "{} log lines captured; leaks:\n{}", logs.len(), leaks.join("\n"));

    // The logs were captured while the path ran: every request logged and served.
    assert!(logs.iter().any(|line| line.contains("/v1/answer")), "the requests were not logged: {logs:#?}");
    for (status, body) in answers.iter().chain(&streams).chain(&retrievals) {
        assert_eq!(*status, 200, "{body}");
    }
    for (_, events) in &streams {
        assert!(events.as_str().unwrap().contains("event: answer"), "{events}");
    }
    for (_, retrieved) in &retrievals {
        assert!(!retrieved_docs(retrieved).is_empty(), "{retrieved}");
    }
    // The travel question was answered from acme's own policy, never from globex's near-duplicate.
    assert_eq!(answers[0].1["status"], "answered", "{}", answers[0].1);
    for (_, answer) in &answers {
        let citations = answer["answer"]["claims"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|claim| claim["citations"].as_array().into_iter().flatten());
        for citation in citations {
            assert!(!citation["title"].as_str().unwrap().contains("Globex"), "{answer}");
        }
    }
}
