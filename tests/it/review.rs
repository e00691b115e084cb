//! Answers routed to human review (issue 47, items 2-4): the routing policy per outcome; what a
//! reviewer sees under their own access now (another group, another tenant, after a revoke or a
//! delete); a delete purging the text of stored items; pages that stay put while items are
//! written; every bad verdict refused with its code and nothing stored; the queue across a
//! restart and `kill -9` of the real binary. Items 6 and 7 over a real store: `eval reviews`
//! figures from stored verdicts, and verdicts exported as answer fixtures that hold where the
//! server agrees with the reviewer and fail where it does not. The access and paging flows run on both backends
//! (the PostgreSQL ones need `WARRANT_TEST_DATABASE_URL`, and skip loudly without it).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::http::Method;
use actix_web::web::Data;
use async_trait::async_trait;
use serde_json::{Value, json};
use warrant::answer::providers::generator::{GenerationRequest, Generator, GeneratorError};
use warrant::config::Settings;
use warrant::http::AppState;
use warrant::review::item::{NewItem, ReviewItem, Route, SourceRecord};

use crate::snapshots::token;

/// Test FAKE: plays `templates` in order (the last repeats), each `@{snippet}` replaced by the
/// label of the source whose text holds `snippet` (`S1` when none does).
struct Templated {
    templates: Vec<String>,
    calls: AtomicUsize,
}

impl Templated {
    fn new(templates: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            templates: templates.iter().map(|text| (*text).to_owned()).collect(),
            calls: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl Generator for Templated {
    fn name(&self) -> &str {
        "templated-fake"
    }

    async fn generate(&self, request: &GenerationRequest) -> Result<String, GeneratorError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let mut text = self.templates[call.min(self.templates.len() - 1)].clone();
        while let Some(start) = text.find("@{") {
            let end = start + text[start..].find('}').expect("closed placeholder");
            let snippet = &text[start + 2..end];
            let label = request
                .sources
                .iter()
                .find(|source| source.text.contains(snippet))
                .map_or_else(|| "S1".to_owned(), |source| source.label.clone());
            text.replace_range(start..=end, &label);
        }
        Ok(text)
    }
}

/// Where a test node keeps its state.
#[derive(Clone)]
enum Backend {
    Embedded,
    Postgres(String),
}

/// Settings with routing on and `change` applied (demo corpus, hashed embedder, one shard).
fn settings(change: impl FnOnce(&mut warrant::config::ReviewSettings)) -> Settings {
    let mut settings = crate::support::settings(1);
    settings.review.enabled = true;
    settings.review.sample_answered = 0.0;
    change(&mut settings.review);
    settings
}

/// A node with the demo corpus over `backend` (a new database's corpus is loaded by the first
/// node only: `load`), answering with `generator` (the extractive one when `None`).
async fn node(
    backend: &Backend,
    settings: Settings,
    generator: Option<Arc<dyn Generator>>,
    load: bool,
) -> Data<AppState> {
    let providers = crate::support::hashed_providers(&settings, generator);
    let settings = Arc::new(settings);
    match backend {
        Backend::Embedded => crate::support::demo_state(settings, providers).await,
        Backend::Postgres(url) => {
            let state = crate::postgres::service_state(url, settings, providers).await;
            if load {
                let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo/corpus.json");
                warrant::app::seed_corpus(&state.documents, &corpus).await.expect("demo corpus");
            }
            state.ready.store(true, Ordering::SeqCst);
            state
        }
    }
}

/// `call!(service, METHOD, path, token, body)` → (status, JSON body); `call!(…, request_id)` also
/// sets `x-request-id`.
macro_rules! call {
    ($service:expr, $method:expr, $path:expr, $token:expr, $body:expr) => {
        call!($service, $method, $path, $token, $body, None::<&str>)
    };
    ($service:expr, $method:expr, $path:expr, $token:expr, $body:expr, $request_id:expr) => {{
        let mut request = actix_web::test::TestRequest::default()
            .method($method)
            .uri($path)
            .insert_header(("authorization", format!("Bearer {}", $token)));
        if let Some(id) = $request_id {
            request = request.insert_header(("x-request-id", id));
        }
        let body: Option<Value> = $body;
        if let Some(body) = body {
            request = request.set_json(body);
        }
        let response = actix_web::test::call_service($service, request.to_request()).await;
        let status = response.status().as_u16();
        let bytes = actix_web::test::read_body(response).await;
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
    }};
}

/// Everything queued so far is written.
async fn written(state: &AppState) {
    assert!(state.review.as_ref().expect("routing is on").queue().flush().await, "the writer stopped");
}

fn reviewer(tenant: &str, sub: &str, groups: &[&str]) -> String {
    token(tenant, sub, groups, "reviewer")
}

/// A supported claim (travel policy, London) and one its source does not support.
const PARTIAL: &str = r#"{"answerable": true, "claims": [
    {"text": "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York.", "citations": ["@{250 euros}"]},
    {"text": "Employees receive a company car after two years of service.", "citations": ["@{250 euros}"]}]}"#;
const WHOLE: &str = r#"{"answerable": true, "claims": [
    {"text": "Hotel stays are reimbursed up to 250 euros per night in London, Paris and New York.", "citations": ["@{250 euros}"]}]}"#;
const HOTEL: &str = "How much are hotel stays reimbursed per night in London?";

/// Asks `question` as alice of acme through a fresh embedded node answering with `templates`;
/// returns the response and the node.
async fn routed(
    change: impl FnOnce(&mut warrant::config::ReviewSettings),
    templates: &[&str],
) -> (Value, Data<AppState>) {
    let state = node(&Backend::Embedded, settings(change), Some(Templated::new(templates)), true).await;
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let alice = token("acme", "alice", &["everyone"], "");
    let (status, answer) = call!(&service, Method::POST, "/v1/answer", &alice, Some(json!({"question": HOTEL})));
    assert_eq!(status, 200, "{answer}");
    if state.review.is_some() {
        written(&state).await;
    }
    (answer, state)
}

#[actix_web::test]
async fn review_routing_follows_the_policy_for_each_outcome() {
    // A partial answer: queued as partial, holding both claims, the withheld one with its code.
    let (answer, state) = routed(|_| {}, &[PARTIAL]).await;
    assert_eq!((answer["status"].as_str(), answer["answer"]["partial"].as_bool()), (Some("answered"), Some(true)));
    assert_eq!(answer["review"]["queued"], true, "{answer}");
    let review_id = answer["review"]["review_id"].as_str().unwrap();
    let stored = state.reviews.get("acme", review_id).await.unwrap().expect("written");
    assert_eq!(
        (stored.item.route, stored.item.asker.as_str(), stored.item.question.as_str()),
        (Route::Partial, "alice", HOTEL)
    );
    let claims: Vec<(bool, Vec<String>)> =
        stored.item.claims.iter().map(|claim| (claim.returned, claim.codes.clone())).collect();
    assert_eq!(claims, [(true, vec![]), (false, vec!["unsupported_claim".to_owned()])]);
    assert_eq!(
        stored.generated.as_ref().unwrap().claims[1].text.as_deref(),
        Some("Employees receive a company car after two years of service.")
    );
    assert_eq!(stored.generated.as_ref().unwrap().outputs.len(), 1, "the raw output of the attempt");
    assert!(stored.item.sources.iter().any(|source| source.doc_id == "travel-policy"));
    assert!(stored.item.stages_ms.contains_key("generation"));

    // Unparseable twice: an invalid_output abstention, queued with both attempts' codes.
    let (answer, state) = routed(|_| {}, &["this is not json"]).await;
    assert_eq!(answer["abstention"]["reason"], "invalid_output");
    let stored = state.reviews.get("acme", answer["review"]["review_id"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(stored.item.route, Route::Abstention);
    assert_eq!(stored.item.attempts.len(), 2);
    assert!(stored.item.attempts.iter().all(|attempt| attempt.codes == ["unparseable"]), "{:?}", stored.item.attempts);
    assert!(stored.item.claims.is_empty());

    // Abstentions the policy does not list, and whole answers outside the sample: not queued.
    let (answer, state) = routed(|_| {}, &[r#"{"answerable": false, "claims": []}"#]).await;
    assert_eq!((answer["abstention"]["reason"].as_str(), answer.get("review")), (Some("insufficient_evidence"), None));
    assert!(state.reviews.page("acme", None, None, 10).await.unwrap().is_empty());
    let (answer, _) = routed(|_| {}, &[WHOLE]).await;
    assert_eq!((answer["status"].as_str(), answer.get("review")), (Some("answered"), None), "{answer}");
    // Listed, or sampled: queued.
    let (answer, _) = routed(
        |review| review.abstentions = vec!["insufficient_evidence".into()],
        &[r#"{"answerable": false, "claims": []}"#],
    )
    .await;
    assert_eq!(answer["review"]["queued"], true);
    let (answer, state) = routed(|review| review.sample_answered = 1.0, &[WHOLE]).await;
    let stored = state.reviews.get("acme", answer["review"]["review_id"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(stored.item.route, Route::Sample);
    // Partial answers off: a partial answer is only sampled.
    let (answer, _) = routed(|review| review.partial = false, &[PARTIAL]).await;
    assert_eq!(answer.get("review"), None);
    // Routing off: nothing, whatever the outcome.
    let (answer, state) = routed(|review| review.enabled = false, &["this is not json"]).await;
    assert_eq!((answer["abstention"]["reason"].as_str(), answer.get("review")), (Some("invalid_output"), None));
    assert!(state.review.is_none());
}

/// The sample is decided by a keyed hash of the request id: the same ids are sampled on every
/// node with the same seed, and about the configured share of them.
#[actix_web::test]
async fn review_sampling_is_decided_by_the_request_id_and_the_seed() {
    let settings = settings(|review| {
        review.sample_answered = 0.5;
        review.seed = 11;
    });
    let policy = warrant::review::RoutingPolicy::from_settings(&settings.review);
    let state = node(&Backend::Embedded, settings, Some(Templated::new(&[WHOLE])), true).await;
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let alice = token("acme", "alice", &["everyone"], "");
    let mut sampled = 0;
    for index in 0..24 {
        let id = format!("sample-{index}");
        let (_, answer) =
            call!(&service, Method::POST, "/v1/answer", &alice, Some(json!({"question": HOTEL})), Some(id.as_str()));
        assert_eq!(answer["request_id"], id.as_str());
        assert_eq!(answer.get("review").is_some(), policy.sampled(&id), "{id}: {answer}");
        sampled += usize::from(policy.sampled(&id));
    }
    assert!((4..=20).contains(&sampled), "{sampled} of 24 at 0.5");
}

/// Texts of the confidential reorganization plan (readable by user alice only) that must never
/// reach a reviewer who may not read it.
const REORG_TEXT: [&str; 5] =
    ["first of March", "customer organization", "chief operating officer", "Confidential reorganization", "reorg-plan"];

const TWO_SOURCES: &str = r#"{"answerable": true, "claims": [
    {"text": "The support and success teams will merge into one customer organization on the first of March.", "citations": ["@{customer organization}"]},
    {"text": "Every Acme employee receives 28 days of paid vacation per calendar year.", "citations": ["@{28 days}"]}]}"#;
const TWO_QUESTION: &str =
    "What happens to the support and success teams, and how many paid vacation days do employees get?";

fn leaks(body: &Value) -> Vec<&'static str> {
    let text = body.to_string();
    REORG_TEXT.iter().copied().filter(|secret| text.contains(secret)).collect()
}

/// The item as `token` sees it (status 200 expected).
macro_rules! seen {
    ($service:expr, $id:expr, $token:expr) => {{
        let (status, body) = call!($service, Method::GET, &format!("/v1/reviews/{}", $id), $token, None);
        assert_eq!(status, 200, "{body}");
        body
    }};
}

/// The source of `doc` in a view, found by its label in the stored item.
fn source<'a>(view: &'a Value, stored: &warrant::review::StoredItem, doc: &str) -> &'a Value {
    let label = &stored.item.sources.iter().find(|source| source.doc_id == doc).expect("in the context").label;
    view["sources"].as_array().unwrap().iter().find(|source| source["label"] == label.as_str()).unwrap()
}

async fn reviewers_see_only_what_they_may_read_now(backend: Backend) {
    let settings = settings(|review| review.sample_answered = 1.0);
    let state = node(&backend, settings, Some(Templated::new(&[TWO_SOURCES])), true).await;
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let (asker, admin) = (token("acme", "alice", &["everyone"], ""), token("acme", "root", &[], "admin"));
    let (status, answer) = call!(&service, Method::POST, "/v1/answer", &asker, Some(json!({"question": TWO_QUESTION})));
    assert_eq!((status, answer["answer"]["claims"].as_array().map(Vec::len)), (200, Some(2)), "{answer}");
    let id = answer["review"]["review_id"].as_str().unwrap().to_owned();
    written(&state).await;
    let stored = state.reviews.get("acme", &id).await.unwrap().unwrap();
    let docs: BTreeSet<&str> = stored.item.sources.iter().map(|source| source.doc_id.as_str()).collect();
    assert!(docs.contains("reorg-plan") && docs.contains("vacation-policy"), "{docs:?}");

    // A reviewer who may read every source sees all of it.
    let alice = reviewer("acme", "alice", &["everyone"]);
    let full = seen!(&service, &id, &alice);
    assert_eq!(full["generated_text"], "shown");
    assert_eq!(source(&full, &stored, "reorg-plan")["doc_id"], "reorg-plan");
    assert!(full["claims"][0]["text"].as_str().unwrap().contains("first of March"));

    // Another group's reviewer: the plan is withheld with nothing but its label, and so is what
    // the generator wrote from it; the vacation policy is shown.
    let rita = reviewer("acme", "rita", &["everyone"]);
    let partial = seen!(&service, &id, &rita);
    let withheld = source(&partial, &stored, "reorg-plan");
    let keys: BTreeSet<&str> = withheld.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["label", "readable", "withheld"]), "{withheld}");
    assert_eq!(
        (withheld["readable"].as_bool(), withheld["withheld"].as_str()),
        (Some(false), Some("not readable by you"))
    );
    assert_eq!(source(&partial, &stored, "vacation-policy")["readable"], true);
    assert_eq!(partial["generated_text"], "withheld");
    assert!(partial["claims"].as_array().unwrap().iter().all(|claim| claim.get("text").is_none()));
    assert_eq!(leaks(&partial), Vec::<&str>::new(), "{partial}");
    // Claims written from a source the reviewer may not read cannot be judged by them.
    let verdict = json!({"claims": [{"index": 1, "verdict": "supported"}]});
    let path = format!("/v1/reviews/{id}/verdicts");
    let (status, body) = call!(&service, Method::POST, &path, &rita, Some(verdict.clone()));
    assert_eq!((status, body["code"].as_str()), (403, Some("claims_not_readable")));

    // Another tenant's reviewer: the same 404 as a missing id, and an empty queue.
    let globex = reviewer("globex", "gina", &["staff"]);
    let (status, body) = call!(&service, Method::GET, &format!("/v1/reviews/{id}"), &globex, None);
    assert_eq!((status, body["code"].as_str()), (404, Some("review_not_found")));
    let (_, missing) = call!(&service, Method::GET, "/v1/reviews/7d444840-9dc0-11d1-b245-5ffdce74fad2", &globex, None);
    assert_eq!(body, missing);
    let (_, page) = call!(&service, Method::GET, "/v1/reviews", &globex, None);
    assert_eq!(page["items"], json!([]));
    let (status, _) = call!(&service, Method::POST, &path, &globex, Some(verdict));
    assert_eq!(status, 404);

    // Revoked since: withheld from alice too; granted again: shown again (a revoke purges nothing).
    let revoke = json!({"doc_id": "reorg-plan", "users": ["alice"]});
    assert_eq!(call!(&service, Method::POST, "/v1/admin/acl/revoke", &admin, Some(revoke)).0, 200);
    let revoked = seen!(&service, &id, &alice);
    assert_eq!(
        (source(&revoked, &stored, "reorg-plan")["readable"].as_bool(), revoked["generated_text"].as_str()),
        (Some(false), Some("withheld"))
    );
    assert_eq!(leaks(&revoked), Vec::<&str>::new(), "{revoked}");
    let grant = json!({"doc_id": "reorg-plan", "users": ["alice"]});
    assert_eq!(call!(&service, Method::POST, "/v1/admin/acl/grant", &admin, Some(grant)).0, 200);
    assert_eq!(seen!(&service, &id, &alice)["generated_text"], "shown");

    // Deleted since: its text is purged from the item (ids stay) and no reviewer sees it.
    let (status, _) = call!(&service, Method::DELETE, "/v1/admin/documents/reorg-plan", &admin, None);
    assert_eq!(status, 200);
    let purged = state.reviews.get("acme", &id).await.unwrap().unwrap();
    assert!(!purged.sources.contains_key("reorg-plan"), "the deleted document's text is still stored");
    assert!(purged.sources.contains_key("vacation-policy"));
    assert_eq!(purged.generated, None, "what the generator wrote from it is still stored");
    assert_eq!(purged.item, stored.item, "ids stay");
    let deleted = seen!(&service, &id, &alice);
    assert_eq!(source(&deleted, &stored, "reorg-plan")["readable"], false);
    assert_eq!(leaks(&deleted), Vec::<&str>::new(), "{deleted}");
    // An answer routed before the delete but written after it stores none of its text either.
    state.reviews.insert(vec![copy_of(&stored)], 100).await.unwrap();
    let late = state.reviews.get("acme", LATE_ID).await.unwrap().unwrap();
    let kept: Vec<&String> = late.sources.keys().collect();
    assert!(!late.sources.contains_key("reorg-plan") && late.generated.is_none(), "kept {kept:?}");
    assert!(late.sources.contains_key("vacation-policy"));
}

const LATE_ID: &str = "00000000-0000-4000-8000-000000000001";

/// `stored` (read before the delete) written again under [`LATE_ID`], as if it had waited in the
/// queue while the delete went through.
fn copy_of(stored: &warrant::review::StoredItem) -> NewItem {
    let mut item = stored.item.clone();
    item.review_id = LATE_ID.into();
    let generated = stored.generated.clone().expect("read before the delete");
    NewItem { tenant: "acme".into(), item, sources: stored.sources.clone(), generated }
}

#[actix_web::test]
async fn review_reviewers_see_only_what_they_may_read_now_and_a_delete_purges_the_text() {
    reviewers_see_only_what_they_may_read_now(Backend::Embedded).await;
}

#[actix_web::test]
async fn postgres_review_reviewers_see_only_what_they_may_read_now_and_a_delete_purges_the_text() {
    let Some(url) = crate::postgres::fresh_database().await else { return };
    reviewers_see_only_what_they_may_read_now(Backend::Postgres(url)).await;
}

/// An upsert supersedes a version: its text goes from the items that cited it.
#[actix_web::test]
async fn review_an_upsert_purges_the_superseded_versions_text() {
    let (answer, state) = routed(|review| review.sample_answered = 1.0, &[WHOLE]).await;
    let id = answer["review"]["review_id"].as_str().unwrap();
    assert!(state.reviews.get("acme", id).await.unwrap().unwrap().sources.contains_key("travel-policy"));
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let admin = token("acme", "root", &[], "admin");
    let upsert = json!({"documents": [{"doc_id": "travel-policy", "title": "Acme travel policy",
        "text": "Hotel stays are reimbursed up to 200 euros per night.", "acl": {"groups": ["everyone"]}}]});
    assert_eq!(call!(&service, Method::PUT, "/v1/admin/documents", &admin, Some(upsert)).0, 200);
    let stored = state.reviews.get("acme", id).await.unwrap().unwrap();
    assert!(!stored.sources.contains_key("travel-policy") && stored.generated.is_none());
}

/// An item of `tenant` citing nothing (pages do not look inside items).
fn bare(tenant: &str, index: usize) -> NewItem {
    let item = ReviewItem {
        review_id: warrant::review::new_review_id(),
        request_id: format!("request-{index}"),
        created_ms: warrant::review::now_ms(),
        asker: "alice".into(),
        question: format!("question {index}"),
        route: Route::Sample,
        answered: true,
        partial: false,
        abstention: None,
        acl_epoch: 1,
        sources: Vec::<SourceRecord>::new(),
        attempts: Vec::new(),
        claims: Vec::new(),
        stages_ms: Default::default(),
    };
    NewItem { tenant: tenant.into(), item, sources: Default::default(), generated: Default::default() }
}

async fn pages_stay_put_while_items_are_written(backend: Backend) {
    let state = node(&backend, settings(|_| {}), None, false).await;
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let rita = reviewer("acme", "rita", &["everyone"]);
    let before: Vec<NewItem> = (0..23).map(|index| bare("acme", index)).collect();
    state.reviews.insert(before.clone(), 1000).await.unwrap();
    let expected: Vec<String> = before.iter().rev().map(|new| new.item.review_id.clone()).collect();
    // A writer keeps adding items while the pages are read.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (reviews, stop) = (Arc::clone(&state.reviews), Arc::clone(&stop));
        actix_rt::spawn(async move {
            let mut index = 100;
            while !stop.load(Ordering::SeqCst) {
                reviews.insert(vec![bare("acme", index)], 1000).await.unwrap();
                index += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            index - 100
        })
    };
    let (status, first) = call!(&service, Method::GET, "/v1/reviews?limit=5", &rita, None);
    assert_eq!(status, 200, "{first}");
    // The first page starts wherever the writer was: skip what it wrote before it.
    let ids = |page: &Value| -> Vec<String> {
        page["items"].as_array().unwrap().iter().map(|item| item["review_id"].as_str().unwrap().to_owned()).collect()
    };
    let mut seen: Vec<String> = ids(&first).into_iter().skip_while(|id| !expected.contains(id)).collect();
    let mut cursor = first["next_cursor"].as_str().map(str::to_owned);
    while let Some(next) = cursor {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let (status, page) = call!(&service, Method::GET, &format!("/v1/reviews?limit=5&cursor={next}"), &rita, None);
        assert_eq!(status, 200, "{page}");
        seen.extend(ids(&page));
        cursor = page["next_cursor"].as_str().map(str::to_owned);
    }
    stop.store(true, Ordering::SeqCst);
    let added = writer.await.unwrap();
    assert!(added > 0, "nothing was written while paging");
    assert_eq!(seen, expected, "every item written before the first page, newest first, once");
    // Bad cursors and queries.
    for (query, code) in [
        ("cursor=0", "invalid_cursor"),
        ("cursor=x", "invalid_cursor"),
        ("status=done", "invalid_query"),
        ("since=1", "invalid_query"),
    ] {
        let (status, body) = call!(&service, Method::GET, &format!("/v1/reviews?{query}"), &rita, None);
        assert_eq!((status, body["code"].as_str()), (400, Some(code)), "{query}");
    }
}

#[actix_web::test]
async fn review_pages_are_stable_under_concurrent_inserts() {
    pages_stay_put_while_items_are_written(Backend::Embedded).await;
}

#[actix_web::test]
async fn postgres_review_pages_are_stable_under_concurrent_inserts() {
    let Some(url) = crate::postgres::fresh_database().await else { return };
    pages_stay_put_while_items_are_written(Backend::Postgres(url)).await;
}

async fn bad_verdicts_store_nothing(backend: Backend) {
    let settings = settings(|review| {
        review.max_note_chars = 50;
        review.max_verdicts_per_item = 2;
    });
    let state = node(&backend, settings, Some(Templated::new(&[PARTIAL])), true).await;
    let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
    let alice = token("acme", "alice", &["everyone"], "");
    let (_, answer) = call!(&service, Method::POST, "/v1/answer", &alice, Some(json!({"question": HOTEL})));
    let id = answer["review"]["review_id"].as_str().expect("queued").to_owned();
    written(&state).await;
    let path = format!("/v1/reviews/{id}/verdicts");
    let rita = reviewer("acme", "rita", &["everyone"]);
    let claim = |index: u64, verdict: &str| json!({"claims": [{"index": index, "verdict": verdict}]});
    let cases: Vec<(&str, String, String, Value, u16, &str)> = vec![
        ("unknown verdict", path.clone(), rita.clone(), claim(0, "true"), 400, "unknown_verdict"),
        (
            "unknown abstention verdict",
            path.clone(),
            rita.clone(),
            json!({"abstention": {"verdict": "fine"}}),
            400,
            "unknown_verdict",
        ),
        ("claim index out of range", path.clone(), rita.clone(), claim(2, "supported"), 400, "claim_out_of_range"),
        (
            "a claim twice",
            path.clone(),
            rita.clone(),
            json!({"claims": [{"index": 0, "verdict": "supported"}, {"index": 0, "verdict": "unsupported"}]}),
            400,
            "duplicate_claim_verdict",
        ),
        ("nothing judged", path.clone(), rita.clone(), json!({"note": "hm"}), 400, "empty_verdict"),
        (
            "no abstention to judge",
            path.clone(),
            rita.clone(),
            json!({"abstention": {"verdict": "correct_abstention"}}),
            400,
            "no_abstention",
        ),
        (
            "oversized note",
            path.clone(),
            rita.clone(),
            json!({"claims": [{"index": 0, "verdict": "supported"}], "note": "x".repeat(51)}),
            400,
            "note_too_long",
        ),
        ("unknown field", path.clone(), rita.clone(), json!({"claims": [], "tenant": "globex"}), 400, "invalid_body"),
        (
            "another tenant's item",
            path.clone(),
            reviewer("globex", "gina", &["staff"]),
            claim(0, "supported"),
            404,
            "review_not_found",
        ),
        (
            "a malformed id",
            "/v1/reviews/not-an-id/verdicts".into(),
            rita.clone(),
            claim(0, "supported"),
            404,
            "review_not_found",
        ),
        (
            "no reviewer role",
            path.clone(),
            token("acme", "bob", &["everyone"], ""),
            claim(0, "supported"),
            403,
            "forbidden",
        ),
        (
            "an admin is no reviewer",
            path.clone(),
            token("acme", "root", &[], "admin"),
            claim(0, "supported"),
            403,
            "forbidden",
        ),
        ("no token", path.clone(), String::new(), claim(0, "supported"), 401, "missing_token"),
    ];
    for (what, path, token, body, status, code) in cases {
        let mut request = actix_web::test::TestRequest::post().uri(&path).set_json(body);
        if !token.is_empty() {
            request = request.insert_header(("authorization", format!("Bearer {token}")));
        }
        let response = actix_web::test::call_service(&service, request.to_request()).await;
        let got = response.status().as_u16();
        let reply: Value = serde_json::from_slice(&actix_web::test::read_body(response).await).unwrap();
        assert_eq!((got, reply["code"].as_str()), (status, Some(code)), "{what}: {reply}");
    }
    for token in [&rita, &reviewer("globex", "gina", &["staff"]), &token("acme", "bob", &[], "")] {
        let (status, _) = call!(&service, Method::GET, "/v1/reviews", token, None);
        assert!(status == 200 || status == 403);
    }
    let stored = state.reviews.get("acme", &id).await.unwrap().unwrap();
    assert!(stored.verdicts.is_empty(), "a refused verdict was stored: {:?}", stored.verdicts);
    let (_, pending) = call!(&service, Method::GET, "/v1/reviews?status=pending", &rita, None);
    assert_eq!(pending["items"][0]["review_id"], id.as_str());

    // Two reviewers judge the item; both verdicts are kept, each with its reviewer and time.
    let first = json!({"claims": [{"index": 0, "verdict": "supported"}, {"index": 1, "verdict": "unsupported"}], "note": "the car is not in the policy"});
    let (status, stored_verdict) = call!(&service, Method::POST, &path, &rita, Some(first));
    assert_eq!(
        (status, stored_verdict["reviewer"].as_str(), stored_verdict["status"].as_str()),
        (200, Some("rita"), Some("reviewed")),
        "{stored_verdict}"
    );
    let ron = reviewer("acme", "ron", &["everyone"]);
    let (status, _) = call!(
        &service,
        Method::POST,
        &path,
        &ron,
        Some(json!({"claims": [{"index": 1.0, "verdict": "wrong_citation"}]}))
    );
    assert_eq!(status, 200);
    // Regression (issue 57): verdicts had no cap (3,000 made a 6.35 MB item, each slower).
    let third = json!({"claims": [{"index": 0, "verdict": "supported"}]});
    let (status, full) = call!(&service, Method::POST, &path, &ron, Some(third));
    assert_eq!((status, full["code"].as_str()), (409, Some("too_many_verdicts")), "{full}");
    assert_eq!(state.reviews.get("acme", &id).await.unwrap().unwrap().verdicts.len(), 2);
    let view = seen!(&service, &id, &rita);
    assert_eq!(view["status"], "reviewed");
    let verdicts = view["verdicts"].as_array().unwrap();
    assert_eq!(
        verdicts.iter().map(|verdict| verdict["reviewer"].as_str().unwrap()).collect::<Vec<_>>(),
        ["rita", "ron"]
    );
    assert_eq!(verdicts[0]["claims"][1], json!({"index": 1, "verdict": "unsupported"}));
    assert_eq!(verdicts[0]["note"], "the car is not in the policy");
    assert!(verdicts.iter().all(|verdict| verdict["at_ms"].as_u64().unwrap() > 0));
    let (_, reviewed) = call!(&service, Method::GET, "/v1/reviews?status=reviewed", &rita, None);
    assert_eq!(
        (reviewed["items"][0]["review_id"].as_str(), reviewed["items"][0]["verdicts"].as_u64()),
        (Some(id.as_str()), Some(2))
    );
    let (_, pending) = call!(&service, Method::GET, "/v1/reviews?status=pending", &rita, None);
    assert_eq!(pending["items"], json!([]));
}

#[actix_web::test]
async fn review_bad_verdicts_are_refused_with_a_code_and_store_nothing() {
    bad_verdicts_store_nothing(Backend::Embedded).await;
}

#[actix_web::test]
async fn postgres_review_bad_verdicts_are_refused_with_a_code_and_store_nothing() {
    let Some(url) = crate::postgres::fresh_database().await else { return };
    bad_verdicts_store_nothing(Backend::Postgres(url)).await;
}

/// Two nodes on one database share one queue: an item queued by one is read and judged on the
/// other, with sequences in commit order.
#[actix_web::test]
async fn postgres_review_two_nodes_share_one_queue() {
    let Some(url) = crate::postgres::fresh_database().await else { return };
    let backend = Backend::Postgres(url);
    let settings = || settings(|review| review.sample_answered = 1.0);
    let first = node(&backend, settings(), Some(Templated::new(&[WHOLE])), true).await;
    let second = node(&backend, settings(), Some(Templated::new(&[WHOLE])), false).await;
    let one = actix_web::test::init_service(warrant::http::server::app(first.clone())).await;
    let two = actix_web::test::init_service(warrant::http::server::app(second.clone())).await;
    let alice = token("acme", "alice", &["everyone"], "");
    let mut ids = Vec::new();
    for _ in 0..3 {
        for (service, state) in [(&one, &first), (&two, &second)] {
            let (_, answer) = call!(service, Method::POST, "/v1/answer", &alice, Some(json!({"question": HOTEL})));
            ids.push(answer["review"]["review_id"].as_str().unwrap().to_owned());
            written(state).await;
        }
    }
    let rita = reviewer("acme", "rita", &["everyone"]);
    let (_, page) = call!(&two, Method::GET, "/v1/reviews?limit=10", &rita, None);
    let listed: Vec<&str> =
        page["items"].as_array().unwrap().iter().map(|item| item["review_id"].as_str().unwrap()).collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
    let view = seen!(&one, &ids[1], &rita);
    assert_eq!(view["generated_text"], "shown");
}

// ---- the real binary: restart and kill -9 ----

fn durable(root: &std::path::Path) -> crate::snapshots::Process {
    let mut command = crate::snapshots::command(&root.join("snapshots"), &[]);
    command
        .env("WARRANT__STORAGE__DIR", root.join("data"))
        .env("WARRANT__REVIEW__ENABLED", "true")
        .env("WARRANT__REVIEW__SAMPLE_ANSWERED", "1.0");
    crate::snapshots::spawn_command(command)
}

/// The review ids listed for `token`, newest first (all pages).
async fn listed(http: &reqwest::Client, base: &str, token: &str) -> Vec<String> {
    let (status, page) =
        crate::snapshots::call(http, base, reqwest::Method::GET, "/v1/reviews?limit=100", token, None).await;
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().unwrap().iter().map(|item| item["review_id"].as_str().unwrap().to_owned()).collect()
}

#[actix_web::test]
async fn review_queue_survives_a_restart_and_kill_9() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let (alice, rita) = (token("acme", "alice", &["everyone"], ""), reviewer("acme", "rita", &["everyone"]));
    let mut server = durable(root.path());
    let mut ids = Vec::new();
    for question in [HOTEL, "How many vacation days do employees get?", "When must receipts be submitted?"] {
        let (status, answer) = crate::snapshots::call(
            &http,
            &server.base,
            reqwest::Method::POST,
            "/v1/answer",
            &alice,
            Some(json!({"question": question})),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        ids.push(answer["review"]["review_id"].as_str().expect("sampled").to_owned());
    }
    // Written once listed (the writer commits each batch with an fsync).
    let deadline = Instant::now() + Duration::from_secs(20);
    while listed(&http, &server.base, &rita).await.len() < ids.len() {
        assert!(Instant::now() < deadline, "the queued items were never written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = format!("/v1/reviews/{}/verdicts", ids[0]);
    let verdict = json!({"claims": [{"index": 0, "verdict": "supported"}]});
    let (status, body) =
        crate::snapshots::call(&http, &server.base, reqwest::Method::POST, &path, &rita, Some(verdict)).await;
    assert_eq!(status, 200, "{body}");
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    server.child.kill().unwrap(); // SIGKILL: no shutdown path runs
    server.child.wait().unwrap();
    drop(server);
    let server = durable(root.path());
    assert_eq!(listed(&http, &server.base, &rita).await, newest_first, "after kill -9");
    let (_, view) = crate::snapshots::call(
        &http,
        &server.base,
        reqwest::Method::GET,
        &format!("/v1/reviews/{}", ids[0]),
        &rita,
        None,
    )
    .await;
    assert_eq!(
        (view["status"].as_str(), view["verdicts"][0]["reviewer"].as_str()),
        (Some("reviewed"), Some("rita")),
        "{view}"
    );
    assert_eq!(view["generated_text"], "shown", "{view}");

    // A graceful stop writes out the queue and closes the file; the next start finds it all.
    let (_, answer) = crate::snapshots::call(
        &http,
        &server.base,
        reqwest::Method::POST,
        "/v1/answer",
        &alice,
        Some(json!({"question": HOTEL})),
    )
    .await;
    let last = answer["review"]["review_id"].as_str().expect("sampled").to_owned();
    let stopped = std::process::Command::new("kill").arg("-TERM").arg(server.child.id().to_string()).status().unwrap();
    assert!(stopped.success());
    let mut server = server;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(server);
    let server = durable(root.path());
    let after = listed(&http, &server.base, &rita).await;
    assert_eq!(after.first(), Some(&last), "an item queued before a graceful stop");
    assert_eq!(&after[1..], newest_first.as_slice());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(root.path().join("data").join(warrant::review::embedded::REVIEWS_FILE)).unwrap();
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}

// ---- measurement (BENCHMARKS.md, "Review queue") ----

/// Bytes per stored item: the encoded parts of items routed from the demo corpus (extractive
/// generator, every answer sampled), and what they take on disk — `reviews.redb` on the
/// embedded backend, the review tables on PostgreSQL (when `WARRANT_TEST_DATABASE_URL` is set).
#[actix_web::test]
#[ignore = "a measurement: prints the figures of BENCHMARKS.md, \"Review queue\""]
async fn measure_bytes_per_stored_item() {
    use warrant::review::item::encode;
    const ITEMS: usize = 2000;
    let questions = [
        HOTEL,
        "How many days of paid vacation do employees get?",
        "When must travel receipts be submitted?",
        "Which class is required for short flights?",
        "How often are laptops replaced?",
        "What is the daily meal allowance during travel?",
    ];
    let directory = tempfile::tempdir().unwrap();
    let mut backends = vec![("embedded", Backend::Embedded)];
    if let Some(url) = crate::postgres::fresh_database().await {
        backends.push(("postgres", Backend::Postgres(url)));
    }
    for (name, backend) in backends {
        let mut settings = settings(|review| {
            review.sample_answered = 1.0;
            review.max_items_per_tenant = ITEMS as u64;
        });
        settings.storage.dir = directory.path().join("data").display().to_string();
        let state = node(&backend, settings, None, true).await;
        let service = actix_web::test::init_service(warrant::http::server::app(state.clone())).await;
        let alice = token("acme", "alice", &["everyone"], "");
        let mut ids = Vec::new();
        for index in 0..ITEMS {
            let question = json!({"question": questions[index % questions.len()]});
            let (_, answer) = call!(&service, Method::POST, "/v1/answer", &alice, Some(question));
            ids.push(answer["review"]["review_id"].as_str().expect("sampled").to_owned());
            if index % 256 == 255 {
                written(&state).await;
            }
        }
        written(&state).await;
        let (mut item, mut sources, mut generated, mut claims, mut context) = (0, 0, 0, 0, 0);
        for id in ids.iter().step_by(10) {
            let stored = state.reviews.get("acme", id).await.unwrap().expect("stored");
            item += encode(&stored.item).len();
            sources += stored.sources.values().map(|texts| encode(texts).len()).sum::<usize>();
            generated += stored.generated.as_ref().map_or(0, |text| encode(text).len());
            claims += stored.item.claims.len();
            context += stored.item.sources.len();
        }
        let sampled = ids.len().div_ceil(10);
        let on_disk = match &backend {
            Backend::Embedded => {
                std::fs::metadata(directory.path().join("data").join(warrant::review::embedded::REVIEWS_FILE))
                    .unwrap()
                    .len()
            }
            Backend::Postgres(url) => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                let row = client
                    .query_one(
                        "SELECT (pg_total_relation_size('review_items') + pg_total_relation_size('review_sources')
                            + pg_total_relation_size('review_verdicts') + pg_total_relation_size('review_tenants'))::bigint",
                        &[],
                    )
                    .await
                    .unwrap();
                row.get::<_, i64>(0) as u64
            }
        };
        println!(
            "{name}: {ITEMS} items; encoded per item: item {} B, source texts {} B, generated text {} B \
             (total {} B; {:.1} sources and {:.1} claims an item); on disk {} B per item",
            item / sampled,
            sources / sampled,
            generated / sampled,
            (item + sources + generated) / sampled,
            context as f64 / sampled as f64,
            claims as f64 / sampled as f64,
            on_disk / ITEMS as u64
        );
    }
}

/// A verdict of `reviewer` on claims (index, label) and, when given, the abstention.
fn verdict_of(
    reviewer: &str,
    claims: &[(u32, warrant::review::ClaimLabel)],
    abstention: Option<warrant::review::AbstentionLabel>,
) -> warrant::review::Verdict {
    warrant::review::Verdict {
        reviewer: reviewer.into(),
        at_ms: warrant::review::now_ms(),
        claims: claims.iter().map(|&(index, label)| warrant::review::item::ClaimVerdict { index, label }).collect(),
        abstention: abstention.map(|label| warrant::review::item::AbstentionVerdict { label, doc_id: None }),
        note: None,
    }
}

/// `stored` written again as a new item of acme (a fresh review id), judged by `verdicts`;
/// returns its id.
async fn judged_copy(
    state: &AppState,
    stored: &warrant::review::StoredItem,
    verdicts: &[warrant::review::Verdict],
) -> String {
    let mut new = copy_of(stored);
    new.item.review_id = warrant::review::new_review_id();
    let review_id = new.item.review_id.clone();
    state.reviews.insert(vec![new], 100).await.unwrap();
    for verdict in verdicts {
        assert!(state.reviews.add_verdict("acme", &review_id, verdict, 100).await.unwrap());
    }
    review_id
}

#[actix_web::test]
async fn review_verdicts_give_the_eval_figures_and_become_fixtures_that_fail_where_the_server_disagrees() {
    use warrant::review::AbstentionLabel::{CorrectAbstention, ShouldHaveAnswered};
    use warrant::review::ClaimLabel::{Supported, Unsupported, WrongCitation};
    // (`miscited` judges claim 0 only: the server's own outcome stands, minus that claim.)
    // A partial answer (claim 0 returned, claim 1 withheld as unsupported_claim) and an
    // invalid_output abstention, each stored again under several verdicts.
    let (answer, state) = routed(|_| {}, &[PARTIAL]).await;
    let partial = state.reviews.get("acme", answer["review"]["review_id"].as_str().unwrap()).await.unwrap().unwrap();
    let (answer, other) = routed(|_| {}, &["this is not json"]).await;
    let abstained = other.reviews.get("acme", answer["review"]["review_id"].as_str().unwrap()).await.unwrap().unwrap();
    let agrees = judged_copy(
        &state,
        &partial,
        &[
            verdict_of("rita", &[(0, Supported), (1, Unsupported)], None),
            verdict_of("sam", &[(0, Supported), (1, Unsupported)], None),
        ],
    )
    .await;
    let missed = judged_copy(&state, &partial, &[verdict_of("rita", &[(0, Supported), (1, Supported)], None)]).await;
    let miscited = judged_copy(&state, &partial, &[verdict_of("rita", &[(0, WrongCitation)], None)]).await;
    let right_to_abstain = judged_copy(&state, &abstained, &[verdict_of("rita", &[], Some(CorrectAbstention))]).await;
    let wrong_to_abstain = judged_copy(&state, &abstained, &[verdict_of("rita", &[], Some(ShouldHaveAnswered))]).await;
    let unreviewed = judged_copy(&state, &partial, &[]).await;

    // eval reviews: the original items are pending, so only the five judged copies count.
    let items: Vec<warrant::review::StoredItem> = warrant::review::reviewed_items(state.reviews.as_ref(), None, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(tenant, stored)| {
            assert_eq!(tenant, "acme");
            stored
        })
        .collect();
    assert_eq!(items.len(), 5);
    assert!(items.iter().all(|stored| stored.item.review_id != unreviewed));
    let report = warrant::eval::reviews::report(&items, 0);
    // Returned claims judged: supported (agrees), supported (missed), wrong_citation (miscited).
    let groundedness = report.groundedness.unwrap();
    assert_eq!(groundedness.judged, 3);
    assert!((groundedness.rate.mean - 2.0 / 3.0).abs() < 1e-12);
    assert!((report.citation_precision.unwrap().rate.mean - 2.0 / 3.0).abs() < 1e-12);
    // Server: returned & supported 2, returned & not 1, withheld & supported 1, withheld & not 1.
    let server = report.server_checks.unwrap();
    assert_eq!(
        (server.true_positives, server.false_positives, server.false_negatives, server.true_negatives),
        (2, 1, 1, 1)
    );
    assert!((server.precision.mean - 2.0 / 3.0).abs() < 1e-12 && (server.recall.mean - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(report.abstention_correctness["invalid_output"].rate.mean, 0.5);
    let kappa = report.claim_agreement.unwrap();
    assert_eq!((kappa.pairs, kappa.kappa.mean), (2, 1.0));
    let later = warrant::eval::reviews::report(&items, warrant::review::now_ms() + 60_000);
    assert_eq!(later.items, 0, "--since after every answer");

    // Export: one fixture per judged item; the unreviewed one skipped.
    let directory = tempfile::tempdir().unwrap();
    let exported = warrant::review::export::write_fixtures(&items, &settings(|_| {}), directory.path()).unwrap();
    assert_eq!(exported.written.len(), 5);
    let all = warrant::review::reviewed_items(state.reviews.as_ref(), Some("acme"), 0).await.unwrap();
    assert_eq!(all.len(), 5);
    let with_unreviewed: Vec<_> =
        items.iter().cloned().chain([state.reviews.get("acme", &unreviewed).await.unwrap().unwrap()]).collect();
    let counted =
        warrant::review::export::write_fixtures(&with_unreviewed, &settings(|_| {}), directory.path()).unwrap();
    assert_eq!(counted.skipped.get("unreviewed"), Some(&1));
    let path = |review_id: &str| directory.path().join(format!("review-{review_id}.json"));
    let backend = crate::answer_fixtures::Backend::Embedded;
    // Where the server does what the reviewer says, the fixture holds...
    for holds in [&agrees, &right_to_abstain] {
        crate::answer_fixtures::fixture_file_holds(&path(holds), &backend)
            .await
            .unwrap_or_else(|error| panic!("{holds}: {error}"));
    }
    // ...and where it does not, the fixture fails, saying why.
    let failure = |review_id: String| {
        let backend = backend.clone();
        async move { crate::answer_fixtures::fixture_file_holds(&path(&review_id), &backend).await.expect_err(&review_id) }
    };
    let error = failure(missed).await;
    assert!(error.contains("Employees receive a company car") && error.contains("not returned"), "{error}");
    let error = failure(miscited).await;
    assert!(error.contains("Hotel stays are reimbursed") && error.contains("returned"), "{error}");
    let error = failure(wrong_to_abstain).await;
    assert!(error.contains("status"), "{error}");
}

/// Test FAKE liveness: every document is live at version 1 (the SciFact abstracts are no
/// engine's documents).
struct EveryDocumentLive;

impl warrant::review::embedded::Liveness for EveryDocumentLive {
    fn live_version(&self, _: &str, _: &str) -> Option<u64> {
        Some(1)
    }
}

/// `eval reviews` on a set whose truth is known: every SciFact claim (../shared/data, not part of
/// the repository) stored as a review item in a real redb review store, the lexical verifier's
/// verdict on its rationale as the server's (returned, or withheld and abstained), the SciFact
/// label as the first reviewer's verdict (SUPPORT: supported; CONTRADICT: unsupported;
/// NOT_ENOUGH_INFO, a cited document without evidence: wrong_citation; an abstention on a
/// SUPPORT claim: should_have_answered) and the verifier's own verdict as a second reviewer's.
/// The figures must equal what `warrant eval verifier --quoted` and a direct count give; prints
/// them for BENCHMARKS.md.
#[actix_web::test]
#[ignore = "reads ../shared/data/scifact-claims/train.jsonl; prints the figures of BENCHMARKS.md, \"Review verdicts\""]
async fn scifact_claims_as_verdicts_give_the_known_figures() {
    use warrant::answer::providers::verifier::{CitedText, SupportVerifier};
    use warrant::eval::verifier::Evidence;
    use warrant::review::item::{AttemptRecord, ClaimRecord, ClaimText, GeneratedText, SourceText, WrittenCitation};
    use warrant::review::{AbstentionLabel, ClaimLabel};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/scifact-claims/train.jsonl");
    let rows = warrant::eval::verifier::read_rows(&path).expect("SciFact claims");
    let settings = Settings::defaults();
    let verifier = warrant::answer::providers::lexical_verifier::LexicalSupportVerifier::new(
        settings.verifier.min_coverage,
        settings.verifier.min_similarity,
        None,
    );
    // WARRANT_SCIFACT_REVIEWS_DIR keeps the store (a fresh directory) for `warrant eval reviews`
    // to read: WARRANT__STORAGE__DIR=that warrant eval reviews.
    let temporary = tempfile::tempdir().unwrap();
    let kept = std::env::var_os("WARRANT_SCIFACT_REVIEWS_DIR").map(std::path::PathBuf::from);
    let directory = kept.as_deref().unwrap_or(temporary.path());
    let store = warrant::review::embedded::EmbeddedReviews::open(Some(directory), Arc::new(EveryDocumentLive))
        .expect("store opens");
    let mut labels = Vec::new();
    let mut batch = Vec::new();
    let mut verdicts = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        let evidence = row.evidence_text(Evidence::Quoted);
        let chunk = warrant::domain::ChunkId::derive("", "scifact", 0, 0, 0, &evidence);
        let passed = verifier
            .verify(&row.claim, &[CitedText { chunk, text: &evidence, sentence_vectors: None }])
            .await
            .supported;
        labels.push((row.label.clone(), passed));
        let doc_id = format!("row-{index}");
        let mut new = bare("scifact", index);
        new.item.question = row.claim.clone();
        new.item.answered = passed;
        new.item.abstention = (!passed).then(|| warrant::review::item::AbstentionRecord {
            reason: "unsupported_citation".into(),
            diagnostics: vec![],
        });
        new.item.sources = vec![SourceRecord {
            label: "S1".into(),
            chunk_id: [0; 16],
            doc_id: doc_id.clone(),
            doc_version: 1,
            doc_ordinal: 0,
            chunk_ordinal: 0,
            start: 0,
            end: evidence.chars().count() as u64,
        }];
        new.item.attempts = vec![AttemptRecord { number: 1, shown: vec!["S1".into()], outcome: None, codes: vec![] }];
        new.item.claims = vec![ClaimRecord {
            attempt: 1,
            position: 1,
            returned: passed,
            codes: if passed { vec![] } else { vec!["unsupported_claim".into()] },
            citations: vec![],
            anchored: false,
        }];
        new.sources = std::collections::BTreeMap::from([(
            doc_id,
            vec![SourceText { label: "S1".into(), title: String::new(), text: evidence }],
        )]);
        new.generated = GeneratedText {
            claims: vec![ClaimText {
                text: Some(row.claim.clone()),
                answer: None,
                citations: vec![WrittenCitation { label: "S1".into(), quote: None }],
            }],
            outputs: vec![],
        };
        let truth = match row.label.as_str() {
            "SUPPORT" => ClaimLabel::Supported,
            "CONTRADICT" => ClaimLabel::Unsupported,
            _ => ClaimLabel::WrongCitation,
        };
        let abstention = (!passed).then_some(if truth == ClaimLabel::Supported {
            AbstentionLabel::ShouldHaveAnswered
        } else {
            AbstentionLabel::CorrectAbstention
        });
        let second = if passed { ClaimLabel::Supported } else { ClaimLabel::Unsupported };
        verdicts.push((
            new.item.review_id.clone(),
            [
                verdict_of("scifact-label", &[(0, truth)], abstention),
                verdict_of("lexical-verifier", &[(0, second)], None),
            ],
        ));
        batch.push(new);
        if batch.len() == 100 || index + 1 == rows.len() {
            use warrant::review::ReviewStore;
            store.insert(std::mem::take(&mut batch), 100_000).await.unwrap();
        }
    }
    {
        use warrant::review::ReviewStore;
        for (review_id, pair) in &verdicts {
            for verdict in pair {
                assert!(store.add_verdict("scifact", review_id, verdict, 100).await.unwrap());
            }
        }
    }
    drop(store);
    // Read back as `warrant eval reviews` does: the store reopened offline.
    let reopened = warrant::review::embedded::EmbeddedReviews::open_to_read(directory).unwrap();
    let items: Vec<_> =
        warrant::review::reviewed_items(&reopened, None, 0).await.unwrap().into_iter().map(|(_, item)| item).collect();
    assert_eq!(items.len(), rows.len());
    let report = warrant::eval::reviews::report(&items, 0);

    // The same rows through `warrant eval verifier --quoted`'s path.
    let calibration = warrant::eval::verifier::evaluate_rows(&rows, &verifier, Evidence::Quoted).await;
    let count = |label: &str, passed: bool| labels.iter().filter(|(l, p)| l == label && *p == passed).count() as f64;
    let (support_passed, support_failed) = (count("SUPPORT", true), count("SUPPORT", false));
    let passed = labels.iter().filter(|(_, passed)| *passed).count() as f64;
    let failed = labels.len() as f64 - passed;
    let close = |left: f64, right: f64| assert!((left - right).abs() < 1e-12, "{left} against {right}");
    let server = report.server_checks.clone().unwrap();
    close(server.precision.mean, calibration.precision());
    close(server.recall.mean, calibration.recall());
    close(report.groundedness.unwrap().rate.mean, support_passed / passed);
    close(report.citation_precision.unwrap().rate.mean, 1.0 - count("NOT_ENOUGH_INFO", true) / passed);
    close(report.abstention_correctness["unsupported_citation"].rate.mean, 1.0 - support_failed / failed);
    // Kappa of labels (supported | unsupported | wrong_citation) against the verifier (supported |
    // unsupported), written out: observed = SUPPORT passed + CONTRADICT failed; chance from the
    // marginals.
    let n = labels.len() as f64;
    let observed = (support_passed + count("CONTRADICT", false)) / n;
    let support = count("SUPPORT", true) + count("SUPPORT", false);
    let contradict = count("CONTRADICT", true) + count("CONTRADICT", false);
    let chance = (support * passed + contradict * failed) / (n * n);
    let kappa = report.claim_agreement.unwrap();
    close(kappa.observed, observed);
    close(kappa.kappa.mean, (observed - chance) / (1.0 - chance));
    for interval in [server.precision, server.recall, kappa.kappa, report.groundedness.unwrap().rate] {
        assert!(interval.low <= interval.mean && interval.mean <= interval.high, "{interval:?}");
    }
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}

/// What the offline tools read: every tenant's reviewed items, oldest first, across more than one
/// page of the store, on either backend.
async fn reviewed_items_are_read_across_tenants_and_pages(backend: Backend) {
    let state = node(&backend, settings(|_| {}), None, false).await;
    let acme: Vec<NewItem> = (0..205).map(|index| bare("acme", index)).collect();
    let globex: Vec<NewItem> = (0..3).map(|index| bare("globex", index)).collect();
    state.reviews.insert(acme.iter().chain(&globex).cloned().collect(), 1000).await.unwrap();
    // Every acme item but the first is judged, and the last globex one.
    let judged: Vec<(&str, &NewItem)> =
        acme.iter().skip(1).map(|new| ("acme", new)).chain([("globex", &globex[2])]).collect();
    for (tenant, new) in &judged {
        let verdict = verdict_of("rita", &[], Some(warrant::review::AbstentionLabel::CorrectAbstention));
        assert!(state.reviews.add_verdict(tenant, &new.item.review_id, &verdict, 100).await.unwrap());
    }
    let read = warrant::review::reviewed_items(state.reviews.as_ref(), None, 0).await.unwrap();
    let ids: Vec<(String, String)> =
        read.iter().map(|(tenant, stored)| (tenant.clone(), stored.item.review_id.clone())).collect();
    let expected: Vec<(String, String)> =
        judged.iter().map(|(tenant, new)| ((*tenant).to_owned(), new.item.review_id.clone())).collect();
    assert_eq!(ids, expected, "every reviewed item once, oldest first per tenant");
    assert!(read.iter().all(|(_, stored)| stored.verdicts.len() == 1));
    let globex_only = warrant::review::reviewed_items(state.reviews.as_ref(), Some("globex"), 0).await.unwrap();
    assert_eq!(globex_only.len(), 1);
    let none_yet = warrant::review::reviewed_items(state.reviews.as_ref(), None, warrant::review::now_ms() + 60_000);
    assert!(none_yet.await.unwrap().is_empty(), "--since after every item");
}

#[actix_web::test]
async fn review_reviewed_items_are_read_across_tenants_and_pages() {
    reviewed_items_are_read_across_tenants_and_pages(Backend::Embedded).await;
}

#[actix_web::test]
async fn postgres_review_reviewed_items_are_read_across_tenants_and_pages() {
    let Some(url) = crate::postgres::fresh_database().await else { return };
    reviewed_items_are_read_across_tenants_and_pages(Backend::Postgres(url)).await;
}
