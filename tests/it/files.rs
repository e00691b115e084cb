//! Documents uploaded as files (issue 49): structure-aware chunks, citations that name the page
//! and section, the layout map kept by the data directory and snapshots, JSON and multipart
//! uploads alike, and every bad file refused whole with a 400 naming it.

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use base64::Engine as _;
use serde_json::{Value, json};
use warrant::config::Settings;
use warrant::domain::{ChunkingConfig, DocAcl, Document, Layout, Location, chunk_document};
use warrant::embed::{Embedder, HashedEmbedder};
use warrant::embedded::{Engine, EngineParams};
use warrant::extract::samples::{self, Block};
use warrant::extract::{DOCX_TYPE, ExtractLimits, extract};
use warrant::http::auth::{Claims, mint_hs256};
use warrant::http::server::app;
use warrant::retrieval::{DocumentInput, ReadSide};

use super::extract::policy_pdf;
use super::support::principal;

const SECRET: &str = "test-secret-for-file-uploads";

fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.auth.hs256_secret = SECRET.into();
    settings.embedder.dim = 64;
    settings.index.shards = 2;
    settings.server.max_body_bytes = 1024 * 1024;
    settings.server.max_file_bytes = 256 * 1024;
    settings.server.max_upload_bytes = 512 * 1024;
    settings
}

fn token(tenant: &str, sub: &str, groups: &[&str], admin: bool) -> String {
    let claims = Claims {
        sub: sub.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|group| group.to_string()).collect(),
        roles: if admin { vec!["admin".into()] } else { vec![] },
        exp: 4_000_000_000,
        iss: None,
        aud: None,
    };
    mint_hs256(SECRET, &claims).unwrap()
}

async fn state(settings: Settings) -> actix_web::web::Data<warrant::http::AppState> {
    let providers = super::support::hashed_providers(&settings, None);
    super::support::demo_state(Arc::new(settings), providers).await
}

async fn reply<B: MessageBody>(response: ServiceResponse<B>) -> (u16, Value) {
    let status = response.status().as_u16();
    let bytes = read_body(response).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn request(method: &str, uri: &str, token: &str, body: Option<Value>) -> TestRequest {
    let request = TestRequest::default()
        .method(method.parse().unwrap())
        .uri(uri)
        .insert_header(("authorization", format!("Bearer {token}")));
    match body {
        Some(body) => request.set_json(body),
        None => request,
    }
}

/// Sends a JSON request to an in-process service: (status, body).
macro_rules! send {
    ($service:expr, $method:expr, $uri:expr, $token:expr, $body:expr) => {
        reply(call_service($service, request($method, $uri, $token, $body).to_request()).await).await
    };
}

/// One part of a multipart body: (name, file name, content type, bytes).
type Part<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [u8]);

/// A multipart/form-data body of `parts`.
fn multipart(parts: &[Part]) -> (String, Vec<u8>) {
    let boundary = "warrant-test-boundary-7f3a";
    let mut body = Vec::new();
    for (name, file_name, content_type, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let file = file_name.map(|file| format!("; filename=\"{file}\"")).unwrap_or_default();
        body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"{file}\r\n").as_bytes());
        if let Some(content_type) = content_type {
            body.extend_from_slice(format!("Content-Type: {content_type}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn upload_request(token: &str, parts: &[Part]) -> TestRequest {
    let (content_type, body) = multipart(parts);
    TestRequest::post()
        .uri("/v1/admin/files")
        .insert_header(("authorization", format!("Bearer {token}")))
        .insert_header(("content-type", content_type))
        .set_payload(body)
}

/// Sends a multipart upload to an in-process service: (status, body).
macro_rules! upload {
    ($service:expr, $token:expr, $parts:expr) => {
        reply(call_service($service, upload_request($token, $parts).to_request()).await).await
    };
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn citations(answer: &Value) -> Vec<Value> {
    answer["answer"]["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|claim| claim["citations"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn location(value: &Value) -> Location {
    serde_json::from_value(value["location"].clone()).unwrap_or_default()
}

/// A node over PostgreSQL (a fresh database, `WARRANT_TEST_DATABASE_URL`), or `None` when none is
/// configured: the layout map is kept in `chunks.layout` there (migration 0009).
async fn postgres_state(settings: Settings) -> Option<actix_web::web::Data<warrant::http::AppState>> {
    let url = crate::postgres::fresh_database().await?;
    let providers = super::support::hashed_providers(&settings, None);
    let state = crate::postgres::service_state(&url, Arc::new(settings), providers).await;
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    Some(state)
}

#[actix_web::test]
async fn a_pdf_answer_cites_page_three_and_quotes_from_that_page() {
    pdf_answer_cites_page_three(state(settings()).await).await;
}

/// The same on the PostgreSQL backend, whose chunks lacked their layout before migration 0009
/// (citations from it carried no `location`).
#[actix_web::test]
async fn postgres_a_pdf_answer_cites_page_three_and_quotes_from_that_page() {
    let Some(state) = postgres_state(settings()).await else { return };
    pdf_answer_cites_page_three(state).await;
}

async fn pdf_answer_cites_page_three(state: actix_web::web::Data<warrant::http::AppState>) {
    let service = init_service(app(state)).await;
    let admin = token("files", "root", &[], true);
    let reader = token("files", "ann", &["staff"], false);
    let document = json!({"doc_id": "handbook", "title": "Employee handbook", "content": base64(&policy_pdf()),
        "content_type": "application/pdf", "acl": {"groups": ["staff"]}});
    let (status, body) = send!(&service, "PUT", "/v1/admin/documents", &admin, Some(json!({"documents": [document]})));
    assert_eq!(status, 200, "{body}");
    let question = json!({"question": "How much does a parking permit cost each month?"});
    let (status, answer) = send!(&service, "POST", "/v1/answer", &reader, Some(question));
    assert_eq!((status, answer["status"].as_str()), (200, Some("answered")), "{answer}");
    let cited = citations(&answer);
    let permit = cited
        .iter()
        .find(|citation| citation["quote"].as_str().unwrap().contains("twelve euros"))
        .expect("cites the fee");
    assert_eq!(permit["doc_id"], "handbook");
    let where_ = location(permit);
    assert_eq!((where_.page, where_.pages.clone()), (Some(3), vec![3]), "{permit}");
    // The quoted span lies inside page 3 of the extracted text.
    let extracted = extract(&policy_pdf(), "application/pdf", &ExtractLimits::default()).unwrap();
    let page = extracted.layout.pages.iter().find(|span| span.page == 3).unwrap();
    let (start, end) =
        (permit["quote_start"].as_u64().unwrap() as usize, permit["quote_end"].as_u64().unwrap() as usize);
    assert!(page.start <= start && end <= page.end, "quote {start}..{end} outside page 3 {}..{}", page.start, page.end);
    let quoted: String = extracted.text.chars().skip(start).take(end - start).collect();
    assert_eq!(quoted, permit["quote"].as_str().unwrap());
    // The streamed answer's claim events carry the same location.
    let streamed = request(
        "POST",
        "/v1/answer",
        &reader,
        Some(json!({"question": "How much does a parking permit cost each month?"})),
    )
    .insert_header(("accept", "text/event-stream"))
    .to_request();
    let events = String::from_utf8(read_body(call_service(&service, streamed).await).await.to_vec()).unwrap();
    let claim_line =
        events.lines().find(|line| line.starts_with("data: ") && line.contains("twelve euros")).expect("a claim event");
    assert!(claim_line.contains(r#""location":{"page":3,"pages":[3]}"#), "{claim_line}");
    // The source view's chunks carry their pages too.
    let (status, view) = send!(&service, "GET", "/v1/documents/handbook", &reader, None);
    assert_eq!(status, 200);
    assert_eq!(location(&view["chunks"][0]).pages, vec![1, 2, 3], "{view}");
}

const HTML: &str = "<html><head><script>var x = 1;</script></head><body><nav>Home | Travel | Expenses</nav>\
    <h1>Travel</h1><p>Book flights through the travel portal.</p><h2>Hotels</h2>\
    <p>Hotel stays are reimbursed up to 150 euros per night in every city.</p>\
    <h1>Expenses</h1><p>Submit receipts within thirty days.</p><footer>Intranet</footer></body></html>";

#[actix_web::test]
async fn an_html_citation_names_its_section_path() {
    let service = init_service(app(state(settings()).await)).await;
    let admin = token("files", "root", &[], true);
    let reader = token("files", "ann", &["staff"], false);
    let parts: &[Part] = &[
        ("groups", None, None, b"staff"),
        ("doc_id", None, None, b"travel-wiki"),
        ("file", Some("travel.html"), Some("text/html"), HTML.as_bytes()),
    ];
    let (status, body) = upload!(&service, &admin, parts);
    assert_eq!(status, 200, "{body}");
    let question = json!({"question": "Up to how many euros per night are hotel stays reimbursed?"});
    let (status, answer) = send!(&service, "POST", "/v1/answer", &reader, Some(question));
    assert_eq!((status, answer["status"].as_str()), (200, Some("answered")), "{answer}");
    let cited = citations(&answer);
    let hotel =
        cited.iter().find(|citation| citation["quote"].as_str().unwrap().contains("150 euros")).expect("cites hotels");
    assert_eq!(location(hotel).section, vec!["Travel", "Hotels"], "{hotel}");
    assert_eq!(location(hotel).page, None);
    // Navigation never became text.
    let (_, view) = send!(&service, "GET", "/v1/documents/travel-wiki", &reader, None);
    let text: String = view["chunks"].as_array().unwrap().iter().map(|chunk| chunk["text"].as_str().unwrap()).collect();
    assert!(!text.contains("Home |") && !text.contains("Intranet") && !text.contains("var x"), "{text}");
}

fn handbook_docx() -> Vec<u8> {
    samples::docx(&[
        Block::Heading(1, "Travel".into()),
        Block::Paragraph("Book flights through the travel portal.".into()),
        Block::Heading(2, "Hotels".into()),
        Block::Table(vec![vec!["City".into(), "Nightly limit".into()], vec!["Paris".into(), "180 euros".into()]]),
        Block::Heading(1, "Expenses".into()),
        Block::Paragraph("Submit receipts within thirty days.".into()),
    ])
}

/// The chunks of a `GET /v1/documents` reply, less the ids (which name the tenant).
fn chunks_of((status, view): (u16, Value)) -> Vec<Value> {
    assert_eq!(status, 200, "{view}");
    let mut chunks = view["chunks"].as_array().unwrap().clone();
    chunks.iter_mut().for_each(|chunk| {
        chunk.as_object_mut().unwrap().remove("chunk_id");
    });
    chunks
}

#[actix_web::test]
async fn json_and_multipart_uploads_give_identical_documents() {
    let service = init_service(app(state(settings()).await)).await;
    let bytes = handbook_docx();
    let json_admin = token("json-co", "root", &[], true);
    let document = json!({"doc_id": "handbook", "title": "handbook.docx", "content": base64(&bytes),
        "content_type": DOCX_TYPE, "acl": {"groups": ["staff"]}});
    let (status, body) =
        send!(&service, "PUT", "/v1/admin/documents", &json_admin, Some(json!({"documents": [document]})));
    assert_eq!(status, 200, "{body}");
    let form_admin = token("form-co", "root", &[], true);
    // No doc_id field: the file name is the id and the title; no content type: the extension.
    let parts: &[Part] = &[("file", Some("handbook.docx"), None, &bytes), ("groups", None, None, b"staff")];
    let (status, form_body) = upload!(&service, &form_admin, parts);
    assert_eq!(status, 200, "{form_body}");
    assert_eq!((form_body["documents"].as_u64(), form_body["chunks"].clone()), (Some(1), body["chunks"].clone()));
    let json_reader = token("json-co", "ann", &["staff"], false);
    let from_json = chunks_of(send!(&service, "GET", "/v1/documents/handbook", &json_reader, None));
    let form_reader = token("form-co", "ann", &["staff"], false);
    let from_form = chunks_of(send!(&service, "GET", "/v1/documents/handbook.docx", &form_reader, None));
    assert_eq!(from_json, from_form);
    // Structure-aware: the Expenses section is a chunk of its own.
    assert!(from_json.len() >= 2, "{from_json:?}");
    assert!(from_json.iter().all(|chunk| !(chunk["text"].as_str().unwrap().contains("Paris")
        && chunk["text"].as_str().unwrap().contains("receipts"))));
    assert!(from_json.iter().any(|chunk| location(chunk).section == vec!["Expenses".to_owned()]), "{from_json:?}");
}

#[actix_web::test]
async fn each_bad_file_is_a_400_naming_it_and_changes_nothing() {
    let state = state(settings()).await;
    let service = init_service(app(state.clone())).await;
    let admin = token("files", "root", &[], true);
    let reader = token("files", "ann", &["staff"], false);
    let epoch = state.engine.as_ref().unwrap().acl().epoch();
    let good = json!({"doc_id": "good", "text": "A good document about parking.", "acl": {"groups": ["staff"]}});
    let file = |doc_id: &str, bytes: &[u8], content_type: &str| json!({"doc_id": doc_id, "content": base64(bytes), "content_type": content_type, "acl": {"groups": ["staff"]}});
    let pdf = policy_pdf();
    let encrypted = samples::encrypted_pdf(&[vec!["Secret page.".to_owned()]]);
    // 80 MB of one letter deflates to about 80 KB: under the file limit, over the 64 MiB cap.
    let bomb_xml = format!(
        "<w:document xmlns:w=\"w\"><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:body></w:document>",
        "a".repeat(80_000_000)
    );
    let bomb = samples::zip(&[("word/document.xml", bomb_xml.as_bytes())]);
    drop(bomb_xml);
    assert!(bomb.len() < 256 * 1024, "the bomb fits the file limit: {} bytes", bomb.len());
    let cases = [
        (file("lying", b"plain words, not a pdf", "application/pdf"), "content_type_mismatch", "lying"),
        (file("encrypted", &encrypted, "application/pdf"), "encrypted_document", "encrypted"),
        (file("truncated", &pdf[..pdf.len() / 3], "application/pdf"), "malformed_document", "truncated"),
        (file("garbage", b"%PDF-1.7 nothing else", "application/pdf"), "malformed_document", "garbage"),
        (file("bomb", &bomb, DOCX_TYPE), "document_too_large", "bomb"),
        (file("latin1", b"caf\xe9 au lait", "text/plain"), "invalid_utf8", "latin1"),
        (file("image", b"\x89PNG", "image/png"), "unsupported_content_type", "image"),
        (file("huge", &vec![b'a'; 300 * 1024], "text/plain"), "file_too_large", "huge"),
        (json!({"doc_id": "b64", "content": "not base64!", "content_type": "text/plain"}), "invalid_base64", "b64"),
        (
            json!({"doc_id": "both", "text": "x", "content": "eA==", "content_type": "text/plain"}),
            "invalid_document",
            "both",
        ),
        (json!({"doc_id": "untyped", "content": "eA=="}), "invalid_document", "untyped"),
    ];
    for (bad, code, name) in cases {
        let body = json!({"documents": [good.clone(), bad]});
        let (status, response) = send!(&service, "PUT", "/v1/admin/documents", &admin, Some(body));
        assert_eq!((status, response["code"].as_str()), (400, Some(code)), "{name}: {response}");
        assert!(response["message"].as_str().unwrap().contains(name), "{name}: {response}");
    }
    let nested = format!("{}deep{}", "<div>".repeat(20_000), "</div>".repeat(20_000));
    let block = vec![b'b'; 200 * 1024];
    let form_cases: [(Vec<Part>, u16, &str); 5] = [
        (vec![("file", None, Some("text/plain"), b"no file name")], 400, "invalid_multipart"),
        (vec![("colour", None, None, b"blue")], 400, "invalid_multipart"),
        (vec![("file", Some("notes.xyz"), None, b"unknown extension")], 400, "unsupported_content_type"),
        (
            vec![("file", Some("a.txt"), None, b"fine"), ("file", Some("big.txt"), None, &[b'a'; 300 * 1024])],
            400,
            "file_too_large",
        ),
        (
            vec![
                ("file", Some("b1.txt"), None, &block),
                ("file", Some("b2.txt"), None, &block),
                ("file", Some("b3.txt"), None, &block),
            ],
            413,
            "payload_too_large",
        ),
    ];
    for (parts, status_expected, code) in form_cases {
        let (status, response) = upload!(&service, &admin, &parts);
        assert_eq!((status, response["code"].as_str()), (status_expected, Some(code)), "{response}");
    }
    assert_eq!(state.engine.as_ref().unwrap().acl().epoch(), epoch, "a refused upload changed the ACL epoch");
    let (status, _) = send!(&service, "GET", "/v1/documents/good", &reader, None);
    assert_eq!(status, 404, "the good document of a refused batch was written");
    // A page nested 20,000 deep is fine.
    let (status, body) = upload!(&service, &admin, &[("file", Some("n1.html"), None, nested.as_bytes())]);
    assert_eq!(status, 200, "{body}");
}

fn markdown_document(text: &str, layout: Layout) -> Document {
    Document {
        tenant: "t".into(),
        doc_id: "d".into(),
        version: 1,
        title: String::new(),
        text: text.into(),
        acl: DocAcl::default(),
        layout: Some(Arc::new(layout)),
    }
}

#[test]
fn chunks_do_not_straddle_top_level_sections_when_they_need_not() {
    let markdown = "# Travel\n\nBook early. Use the portal.\n\n## Hotels\n\nUp to 150 euros.\n\n# Expenses\n\nKeep receipts. Submit monthly.\n";
    let extracted = extract(markdown.as_bytes(), "text/markdown", &ExtractLimits::default()).unwrap();
    let document = markdown_document(&extracted.text, extracted.layout.clone());
    let config = ChunkingConfig { max_tokens: 160, overlap_tokens: 32 };
    let chunks = chunk_document(&document, 0, &config);
    assert_eq!(chunks.len(), 2, "{chunks:#?}");
    assert!(chunks[0].text.starts_with("Travel") && chunks[0].text.ends_with("150 euros."));
    assert!(chunks[1].text.starts_with("Expenses") && chunks[1].text.ends_with("Submit monthly."));
    let sections = |index: usize| {
        chunks[index].layout.as_ref().unwrap().sections.iter().map(|span| span.path.to_vec()).collect::<Vec<_>>()
    };
    assert_eq!(sections(0), vec![vec!["Travel".to_owned()], vec!["Travel".to_owned(), "Hotels".to_owned()]]);
    assert_eq!(sections(1), vec![vec!["Expenses".to_owned()]]);
    // Without the map the same text is cut as plain text: one chunk.
    let plain = Document { layout: None, ..document.clone() };
    let plain_chunks = chunk_document(&plain, 0, &config);
    assert_eq!(plain_chunks.len(), 1);
    assert!(plain_chunks[0].layout.is_none());
    // A section longer than a chunk is still cut, and its chunks stay inside it.
    let small = ChunkingConfig { max_tokens: 6, overlap_tokens: 3 };
    let boundary = extracted.layout.top_level_boundaries()[0];
    for chunk in chunk_document(&document, 0, &small) {
        assert!(chunk.end <= boundary || chunk.start >= boundary, "{chunk:?} straddles {boundary}");
    }
}

async fn located_chunks(engine: &Engine, doc_id: &str) -> Vec<(usize, usize, Option<Layout>)> {
    let view = engine.document(&principal("files", "ann", &["staff"]), doc_id).await.unwrap().expect("readable");
    view.chunks.iter().map(|chunk| (chunk.start, chunk.end, chunk.layout.as_deref().cloned())).collect()
}

fn pdf_input() -> DocumentInput {
    let extracted = extract(&policy_pdf(), "application/pdf", &ExtractLimits::default()).unwrap();
    DocumentInput {
        doc_id: "handbook".into(),
        title: "Handbook".into(),
        text: extracted.text,
        acl: DocAcl { groups: vec!["staff".into()], users: vec![] },
        version: None,
        layout: Some(Arc::new(extracted.layout)),
    }
}

#[actix_web::test]
async fn the_layout_map_survives_a_restart_and_a_snapshot() {
    let settings = settings();
    let directory = tempfile::tempdir().unwrap();
    let open = |path: std::path::PathBuf| {
        let settings = settings.clone();
        async move {
            let embedder = Arc::new(HashedEmbedder::new(settings.embedder.dim));
            let params = EngineParams::from_settings(&settings, settings.embedder.dim);
            Engine::open(params, embedder, &path).await.expect("opens").0
        }
    };
    let engine = open(directory.path().to_path_buf()).await;
    engine.upsert("files", vec![pdf_input()]).await.unwrap();
    let before = located_chunks(&engine, "handbook").await;
    assert!(
        before.iter().all(|(_, _, layout)| layout.as_ref().is_some_and(|layout| layout.pages.len() == 3)),
        "{before:?}"
    );
    let snapshots = tempfile::tempdir().unwrap();
    let created = warrant::snapshot::create(&engine, snapshots.path(), 2).await.expect("snapshot");
    assert!(
        created.path.join("shard-0000.layouts.bin").exists() || created.path.join("shard-0001.layouts.bin").exists()
    );
    engine.close().await;
    drop(engine);
    let reopened = open(directory.path().to_path_buf()).await;
    assert_eq!(located_chunks(&reopened, "handbook").await, before, "the data directory lost the layout map");
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let (restored, _) =
        warrant::snapshot::start_engine(&settings, embedder, &created.path, false).await.expect("restore");
    assert_eq!(located_chunks(&restored, "handbook").await, before, "the snapshot lost the layout map");
}

/// Regression (issue 57): repeated `groups` fields were collected whole and cloned into every
/// file before the access-list cap was checked (8.4 MB peaked at 1.46 GB; 64 MiB with 200 tiny
/// files aborted the server). The names are now counted as they stream in, and the copies the
/// files get are bounded by `server.max_upload_bytes`.
#[actix_web::test]
async fn multipart_access_lists_are_bounded_as_they_stream_in() {
    let mut settings = settings();
    settings.server.max_acl_names_per_document = 100;
    let state = state(settings).await;
    let service = init_service(app(state.clone())).await;
    let admin = token("files", "root", &[], true);
    let epoch = state.engine.as_ref().unwrap().acl().epoch();
    // 101 names over two repeated fields: refused on the second field, before the unknown field
    // after it is read (that field alone is `invalid_multipart`).
    let first = (0..60).map(|index| format!("g{index}")).collect::<Vec<_>>().join(",");
    let second = (60..101).map(|index| format!("g{index}")).collect::<Vec<_>>().join(",");
    let parts: Vec<Part> = vec![
        ("groups", None, None, first.as_bytes()),
        ("groups", None, None, second.as_bytes()),
        ("colour", None, None, b"blue"),
        ("file", Some("a.txt"), None, b"A note about parking."),
    ];
    let (status, body) = upload!(&service, &admin, &parts);
    assert_eq!((status, body["code"].as_str()), (400, Some("acl_too_large")), "{body}");
    let long_name = "n".repeat(257);
    let parts: Vec<Part> = vec![("users", None, None, long_name.as_bytes()), ("colour", None, None, b"blue")];
    let (status, body) = upload!(&service, &admin, &parts);
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_acl_name")), "{body}");
    // 100 names of 250 letters (~27 KB in memory) copied into 20 files passes the 512 KiB upload
    // limit though the request itself is small.
    let names = (0..100).map(|index| format!("{index:0>250}")).collect::<Vec<_>>().join(",");
    let mut parts: Vec<Part> = vec![("groups", None, None, names.as_bytes())];
    let file_names: Vec<String> = (0..20).map(|index| format!("tiny-{index}.txt")).collect();
    parts.extend(file_names.iter().map(|name| ("file", Some(name.as_str()), None, b"Tiny.".as_slice())));
    let (status, body) = upload!(&service, &admin, &parts);
    assert_eq!((status, body["code"].as_str()), (400, Some("acl_too_large")), "{body}");
    assert_eq!(state.engine.as_ref().unwrap().acl().epoch(), epoch, "a refused upload changed the ACL epoch");
    // The same list on two files is fine.
    let (status, body) = upload!(&service, &admin, &parts[..3]);
    assert_eq!(status, 200, "{body}");
}
