//! `warrant ingest PATH` against a server on a loopback port: new and changed files uploaded,
//! unchanged ones skipped, removed ones deleted with `--sync`, a refused file reported while the
//! rest goes on, and the state file resuming a run; globs selecting files (and bounding what
//! `--sync` deletes); a state file of another destination not trusted; and straight into a
//! stopped server's data directory (refused while a server holds it, or for a replica), in
//! process through the same write path, with the same refusals as through a server.

use std::sync::Arc;

use warrant::domain::DocAcl;
use warrant::ingest::{ACL_SIDECAR, Destination, IngestError, IngestOptions, STATE_FILE, run, run_into_data_dir};

use super::extract::policy_pdf;

const SECRET: &str = "test-secret-for-folder-ingestion";

fn token(tenant: &str, sub: &str, groups: &[&str], roles: &[&str]) -> String {
    crate::console::token(SECRET, tenant, sub, groups, roles)
}

/// The settings of these tests' servers: the hashed embedder, two shards, the test secret.
fn settings() -> warrant::config::Settings {
    let mut settings = warrant::config::Settings::defaults();
    settings.auth.hs256_secret = SECRET.into();
    settings.embedder.kind = warrant::config::EmbedderKind::Hashed;
    settings.embedder.dim = 32;
    settings.index.shards = 2;
    settings
}

/// A server with the demo corpus on an ephemeral loopback port: (base URL, handle).
async fn server() -> (String, actix_web::dev::ServerHandle) {
    server_with(settings()).await
}

/// [`server`] with `settings`.
async fn server_with(settings: warrant::config::Settings) -> (String, actix_web::dev::ServerHandle) {
    let settings = Arc::new(settings);
    let providers = super::support::hashed_providers(&settings, None);
    let state = super::support::demo_state(settings, providers).await;
    serve(state)
}

/// A server on the data directory `data` (nothing loaded): (base URL, handle, state).
async fn server_on(data: &std::path::Path) -> (String, actix_web::dev::ServerHandle, AppData) {
    let mut settings = settings();
    settings.storage.dir = data.to_string_lossy().into_owned();
    let settings = Arc::new(settings);
    let providers = super::support::hashed_providers(&settings, None);
    let state = warrant::app::build_state(settings, providers).await.expect("the data directory opens");
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let (base, handle) = serve(state.clone());
    (base, handle, state)
}

type AppData = actix_web::web::Data<warrant::http::AppState>;

fn serve(state: AppData) -> (String, actix_web::dev::ServerHandle) {
    super::support::listen(state, 1)
}

/// `GET /v1/documents/{doc_id}` as ann of tenant folders in `groups`.
async fn read(base: &str, doc_id: &str, groups: &[&str]) -> reqwest::Response {
    let reader = token("folders", "ann", groups, &[]);
    let client = reqwest::Client::new();
    let encoded = percent_encoding::utf8_percent_encode(doc_id, percent_encoding::NON_ALPHANUMERIC);
    client.get(format!("{base}/v1/documents/{encoded}")).bearer_auth(reader).send().await.unwrap()
}

async fn readable(base: &str, doc_id: &str, groups: &[&str]) -> u16 {
    read(base, doc_id, groups).await.status().as_u16()
}

/// The whole folder for group staff, with `--sync`.
fn staff_sync(root: &std::path::Path) -> IngestOptions {
    IngestOptions {
        root: root.to_path_buf(),
        acl: DocAcl { groups: vec!["staff".into()], users: vec![] },
        sync: true,
        ..IngestOptions::default()
    }
}

#[actix_web::test]
async fn ingest_uploads_changes_only_deletes_with_sync_and_reports_refused_files() {
    let (base, handle) = server().await;
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::create_dir_all(root.join("policies/hr")).unwrap();
    std::fs::write(root.join("handbook.pdf"), policy_pdf()).unwrap();
    std::fs::write(root.join("policies/travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    std::fs::write(root.join("policies/hr/leave.html"), "<h1>Leave</h1><p>Twenty-eight days a year.</p>").unwrap();
    std::fs::write(root.join("policies/hr").join(ACL_SIDECAR), r#"{"groups": ["hr"]}"#).unwrap();
    std::fs::write(root.join("notes.xyz"), "no known format").unwrap();
    std::fs::write(root.join("broken.txt"), b"caf\xe9").unwrap();
    let options = staff_sync(root);
    let destination = Destination {
        server: base.clone(),
        token: token("folders", "ops", &[], &["admin"]),
        key: format!("server {base} tenant folders"),
    };
    let run = |options: &IngestOptions| {
        let (options, destination) = (options.clone(), destination.clone());
        async move { run(&options, &destination).await }
    };
    let first = run(&options).await.expect("first run");
    assert_eq!((first.ingested, first.unchanged, first.skipped, first.deleted), (3, 0, 1, 0), "{first:?}");
    assert_eq!(first.failed.len(), 1);
    assert_eq!(first.failed[0].0, "broken.txt");
    assert!(first.failed[0].1.contains("invalid_utf8"), "{:?}", first.failed);
    assert!(root.join(STATE_FILE).exists());
    assert_eq!(readable(&base, "handbook.pdf", &["staff"]).await, 200);
    assert_eq!(readable(&base, "policies/hr/leave.html", &["staff"]).await, 404, "the sidecar's ACL applies");
    assert_eq!(readable(&base, "policies/hr/leave.html", &["hr"]).await, 200);

    // Unchanged: nothing is uploaded the second time.
    std::fs::remove_file(root.join("broken.txt")).unwrap();
    let second = run(&options).await.expect("second run");
    assert_eq!((second.ingested, second.unchanged, second.deleted, second.failed.len()), (0, 3, 0, 0), "{second:?}");

    // A changed file is uploaded again; a removed one is deleted from the server with --sync.
    std::fs::write(root.join("policies/travel.md"), "# Travel\n\nBook trains and flights early.\n").unwrap();
    std::fs::remove_file(root.join("handbook.pdf")).unwrap();
    let third = run(&options).await.expect("third run");
    assert_eq!((third.ingested, third.unchanged, third.deleted), (1, 1, 1), "{third:?}");
    assert_eq!(readable(&base, "handbook.pdf", &["staff"]).await, 404);
    let fourth = run(&options).await.expect("fourth run");
    assert_eq!((fourth.ingested, fourth.deleted), (0, 0), "{fourth:?}");

    // Resumable: a lost state file means the files are uploaded again (new versions), never lost.
    std::fs::remove_file(root.join(STATE_FILE)).unwrap();
    let resumed = run(&options).await.expect("run without state");
    assert_eq!(resumed.ingested, 2);

    // A refused token ends the run with an error, not a per-file failure.
    std::fs::remove_file(root.join(STATE_FILE)).unwrap();
    let refused = Destination { token: token("folders", "ann", &["staff"], &[]), ..destination.clone() };
    assert!(matches!(warrant::ingest::run(&options, &refused).await, Err(IngestError::Server(_))));
    handle.stop(false).await;
}

#[actix_web::test]
async fn globs_select_files_and_sync_deletes_only_inside_the_selection() {
    let (base, handle) = server().await;
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::create_dir_all(root.join("drafts")).unwrap();
    std::fs::write(root.join("travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    std::fs::write(root.join("leave.html"), "<h1>Leave</h1><p>Twenty-eight days a year.</p>").unwrap();
    std::fs::write(root.join("drafts/expenses.md"), "# Expenses\n\nReceipts within thirty days.\n").unwrap();
    let destination =
        Destination { server: base.clone(), token: token("folders", "ops", &[], &["admin"]), key: "server".into() };
    let everything = staff_sync(root);
    // Markdown outside drafts/ only (`*` also matches `/`).
    let markdown =
        IngestOptions { include: vec!["*.md".into()], exclude: vec!["drafts/**".into()], ..everything.clone() };
    let first = run(&markdown, &destination).await.expect("markdown run");
    assert_eq!((first.ingested, first.excluded), (1, 2), "{first:?}");
    assert_eq!(readable(&base, "travel.md", &["staff"]).await, 200);
    assert_eq!(readable(&base, "drafts/expenses.md", &["staff"]).await, 404);
    assert_eq!(readable(&base, "leave.html", &["staff"]).await, 404);

    let second = run(&everything, &destination).await.expect("whole run");
    assert_eq!((second.ingested, second.unchanged), (2, 1), "{second:?}");
    // With every file gone, a --sync run over HTML alone deletes the HTML document only.
    for file in ["travel.md", "leave.html", "drafts/expenses.md"] {
        std::fs::remove_file(root.join(file)).unwrap();
    }
    let html = IngestOptions { include: vec!["*.html".into()], ..everything.clone() };
    let third = run(&html, &destination).await.expect("html sync");
    assert_eq!(third.deleted, 1, "{third:?}");
    assert_eq!(readable(&base, "leave.html", &["staff"]).await, 404);
    assert_eq!(readable(&base, "travel.md", &["staff"]).await, 200, "outside the selection: kept");
    assert_eq!(readable(&base, "drafts/expenses.md", &["staff"]).await, 200, "outside the selection: kept");

    // A pattern that is not a glob ends the run before anything is sent.
    let bad = IngestOptions { include: vec!["[".into()], ..everything.clone() };
    let error = run(&bad, &destination).await.expect_err("not a glob");
    assert!(matches!(error, IngestError::Pattern { .. }), "{error}");
    handle.stop(false).await;
}

#[actix_web::test]
async fn a_state_file_of_another_destination_uploads_everything_again() {
    let (base, handle) = server().await;
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::write(root.join("travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    let options = IngestOptions { root: root.to_path_buf(), ..IngestOptions::default() };
    let admin = |tenant: &str| Destination {
        server: base.clone(),
        token: token(tenant, "ops", &[], &["admin"]),
        key: format!("server {base} tenant {tenant}"),
    };
    let first = run(&options, &admin("folders")).await.expect("first tenant");
    assert_eq!(first.ingested, 1);
    // The same folder into another tenant: the first tenant's acknowledgements say nothing of it.
    let other = run(&options, &admin("others")).await.expect("second tenant");
    assert_eq!((other.ingested, other.unchanged), (1, 0), "{other:?}");
    assert_eq!(other.other_destination.as_deref(), Some(format!("server {base} tenant folders").as_str()));
    let again = run(&options, &admin("others")).await.expect("second tenant again");
    assert_eq!((again.ingested, again.unchanged, again.other_destination.is_none()), (0, 1, true), "{again:?}");
    handle.stop(false).await;
}

#[actix_web::test]
async fn ingest_into_a_stopped_servers_data_directory_is_served_when_it_starts() {
    let data = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::write(root.join("handbook.pdf"), policy_pdf()).unwrap();
    std::fs::write(
        root.join("travel.md"),
        "# Travel\n\n## Hotels\n\nHotel stays are reimbursed up to 180 euros a night.\n",
    )
    .unwrap();
    std::fs::write(root.join("broken.txt"), b"caf\xe9").unwrap();
    let options = staff_sync(root);
    let first =
        run_into_data_dir(&options, settings(), data.path(), "folders").await.expect("into a new data directory");
    assert_eq!((first.ingested, first.failed.len()), (2, 1), "{first:?}");
    assert!(first.failed[0].1.contains("invalid_utf8"), "the same refusal as an upload: {:?}", first.failed);
    let second = run_into_data_dir(&options, settings(), data.path(), "folders").await.expect("unchanged");
    assert_eq!((second.ingested, second.unchanged), (0, 2), "{second:?}");

    // A server started on the directory serves what was ingested, layout included.
    let (base, handle, state) = server_on(data.path()).await;
    assert_eq!(readable(&base, "travel.md", &["staff"]).await, 200);
    assert_eq!(readable(&base, "handbook.pdf", &["staff"]).await, 200);
    assert_eq!(readable(&base, "handbook.pdf", &["others"]).await, 404, "the access list was written");
    let document: serde_json::Value = read(&base, "handbook.pdf", &["staff"]).await.json().await.unwrap();
    let pages: Vec<i64> = document["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .flat_map(|chunk| chunk["location"]["pages"].as_array().cloned().unwrap_or_default())
        .filter_map(|page| page.as_i64())
        .collect();
    assert!(pages.contains(&3), "the PDF's pages were kept: {document}");

    // While a server holds the directory, ingesting into it is refused and writes nothing.
    std::fs::write(root.join("new.md"), "# New\n\nA new policy.\n").unwrap();
    let busy = run_into_data_dir(&options, settings(), data.path(), "folders").await.expect_err("in use");
    assert!(matches!(&busy, IngestError::DataDir { reason, .. } if reason.contains("in use")), "{busy}");
    assert_eq!(readable(&base, "new.md", &["staff"]).await, 404);
    handle.stop(true).await;
    if let Some(engine) = &state.engine {
        engine.close().await;
    }
    drop(state);

    // Stopped again: --sync removes a deleted file's document, and the new file goes in.
    std::fs::remove_file(root.join("travel.md")).unwrap();
    let third =
        run_into_data_dir(&options, settings(), data.path(), "folders").await.expect("after the server stopped");
    assert_eq!((third.ingested, third.deleted), (1, 1), "{third:?}");
    let (base, handle, _state) = server_on(data.path()).await;
    assert_eq!(readable(&base, "travel.md", &["staff"]).await, 404);
    assert_eq!(readable(&base, "new.md", &["staff"]).await, 200);
    handle.stop(true).await;

    // A replica's configuration is refused: a replica takes its documents from its primary.
    let mut replica = settings();
    replica.replica.follow = "http://127.0.0.1:9".into();
    let refused = run_into_data_dir(&options, replica, data.path(), "folders").await.expect_err("a replica");
    assert!(matches!(&refused, IngestError::DataDir { reason, .. } if reason.contains("replica")), "{refused}");
}

/// Issue 62: `--data-dir` ran a loopback server of its own and drove it over HTTP; it now writes
/// through the write path in process. Each file a server refuses is refused the same way in a
/// data directory (the same code and message), the rest go in on both, and a second run finds
/// them unchanged.
#[actix_web::test]
async fn a_data_directory_refuses_the_files_a_server_refuses_with_the_same_reasons() {
    let mut limited = settings();
    limited.server.max_file_bytes = 4 * 1024;
    limited.server.max_acl_names_per_document = 3;
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    for sub in ["crowded", "misnamed"] {
        std::fs::create_dir(root.join(sub)).unwrap();
        std::fs::write(root.join(sub).join("note.md"), "# Note\n\nA note.\n").unwrap();
    }
    std::fs::write(root.join("crowded").join(ACL_SIDECAR), r#"{"groups": ["a", "b", "c", "d"]}"#).unwrap();
    let long = "n".repeat(257);
    std::fs::write(root.join("misnamed").join(ACL_SIDECAR), format!(r#"{{"users": ["{long}"]}}"#)).unwrap();
    std::fs::write(root.join("broken.txt"), b"caf\xe9").unwrap();
    std::fs::write(root.join("huge.txt"), "a".repeat(5 * 1024)).unwrap();
    std::fs::write(root.join("lying.pdf"), "plain words, not a pdf").unwrap();
    std::fs::write(root.join("truncated.pdf"), &policy_pdf()[..200]).unwrap();
    std::fs::write(root.join("travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    let options = staff_sync(root);
    let codes = |failed: &[(String, String)]| {
        failed
            .iter()
            .map(|(doc_id, reason)| (doc_id.clone(), reason.split(':').next().unwrap().to_owned()))
            .collect::<Vec<_>>()
    };

    let (base, handle) = server_with(limited.clone()).await;
    let destination = Destination {
        server: base.clone(),
        token: token("folders", "ops", &[], &["admin"]),
        key: format!("server {base} tenant folders"),
    };
    let served = run(&options, &destination).await.expect("through a server");
    handle.stop(false).await;
    std::fs::remove_file(root.join(STATE_FILE)).unwrap();
    let data = tempfile::tempdir().unwrap();
    let direct = run_into_data_dir(&options, limited.clone(), data.path(), "folders").await.expect("in process");

    assert_eq!((served.ingested, direct.ingested), (1, 1), "{served:?} {direct:?}");
    let expected = [
        ("broken.txt", "invalid_utf8"),
        ("crowded/note.md", "acl_too_large"),
        ("huge.txt", "file_too_large"),
        ("lying.pdf", "content_type_mismatch"),
        ("misnamed/note.md", "invalid_acl_name"),
        ("truncated.pdf", "malformed_document"),
    ];
    let expected: Vec<(String, String)> =
        expected.iter().map(|(doc_id, code)| (doc_id.to_string(), code.to_string())).collect();
    assert_eq!(codes(&direct.failed), expected, "{direct:?}");
    // Through a server each reason carries the HTTP status first: the rest is the same.
    let unstatused: Vec<(String, String)> = served
        .failed
        .iter()
        .map(|(doc_id, reason)| (doc_id.clone(), reason.strip_prefix("400 ").expect("a 400").to_owned()))
        .collect();
    assert_eq!(unstatused, direct.failed);
    let again = run_into_data_dir(&options, limited, data.path(), "folders").await.expect("again");
    assert_eq!((again.ingested, again.unchanged, again.failed.len()), (0, 1, 6), "{again:?}");
}

/// A test fake of the admin API's file upload: 503 `overloaded` with `Retry-After: 0` for the
/// first `busy` uploads, then 200; counts the uploads it saw.
fn overloaded_admin(busy: usize) -> (String, actix_web::dev::ServerHandle, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let server = actix_web::HttpServer::new(move || {
        let counter = Arc::clone(&counter);
        actix_web::App::new().route(
            "/v1/admin/files",
            actix_web::web::post().to(move |_body: actix_web::web::Bytes| {
                let upload = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if upload < busy {
                        actix_web::HttpResponse::ServiceUnavailable()
                            .insert_header(("retry-after", "0"))
                            .json(serde_json::json!({"code": "overloaded", "message": "retry later"}))
                    } else {
                        actix_web::HttpResponse::Ok().json(serde_json::json!({"documents": 1}))
                    }
                }
            }),
        )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let address = server.addrs()[0];
    let running = server.run();
    let handle = running.handle();
    actix_rt::spawn(running);
    (format!("http://{address}"), handle, seen)
}

#[actix_web::test]
async fn an_overloaded_server_is_asked_again_after_retry_after_and_a_lasting_503_ends_the_run() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    let options = IngestOptions { root: folder.path().to_path_buf(), ..IngestOptions::default() };
    let (base, handle, seen) = overloaded_admin(2);
    let destination = Destination { server: base.clone(), token: "t".into(), key: "fake".into() };
    let summary = run(&options, &destination).await.expect("acknowledged on the third try");
    assert_eq!((summary.ingested, seen.load(std::sync::atomic::Ordering::SeqCst)), (1, 3), "{summary:?}");
    handle.stop(false).await;

    std::fs::remove_file(folder.path().join(STATE_FILE)).unwrap();
    let (base, handle, seen) = overloaded_admin(usize::MAX);
    let destination = Destination { server: base, token: "t".into(), key: "fake".into() };
    let error = run(&options, &destination).await.expect_err("overloaded throughout");
    assert!(matches!(&error, IngestError::Server(reason) if reason.contains("overloaded")), "{error}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 5, "five tries, then the run ends");
    handle.stop(false).await;
}

/// A test fake of the admin API's file upload that answers 200, keeps every body it got, and
/// first calls `on_upload` with the upload's number (from 0): a hook that changes the folder
/// while a run is between listing it and reading its files.
fn recording_admin(
    on_upload: impl Fn(usize) + Clone + Send + 'static,
) -> (String, actix_web::dev::ServerHandle, Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = Arc::clone(&bodies);
    let server = actix_web::HttpServer::new(move || {
        let (kept, on_upload) = (Arc::clone(&kept), on_upload.clone());
        actix_web::App::new().route(
            "/v1/admin/files",
            actix_web::web::post().to(move |body: actix_web::web::Bytes| {
                let upload = {
                    let mut bodies = kept.lock().unwrap();
                    bodies.push(body.to_vec());
                    bodies.len() - 1
                };
                on_upload(upload);
                async move { actix_web::HttpResponse::Ok().json(serde_json::json!({"documents": 1})) }
            }),
        )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let address = server.addrs()[0];
    let running = server.run();
    let handle = running.handle();
    actix_rt::spawn(running);
    (format!("http://{address}"), handle, bodies)
}

/// Issue 57.5: `.warrant-ingest.json.tmp` was created through a link planted in the folder
/// (aimed at a running server's `warrant.redb`, it destroyed the store). Neither a link at the
/// temporary file's name nor one at the state file's is ever written through.
#[actix_web::test]
async fn a_link_planted_where_the_state_file_is_written_is_never_written_through() {
    let (base, handle, _bodies) = recording_admin(|_| {});
    let folder = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = folder.path();
    let store = outside.path().join("warrant.redb");
    std::fs::write(&store, "a running server's store").unwrap();
    std::fs::write(root.join("travel.md"), "# Travel\n\nBook trains early.\n").unwrap();
    std::os::unix::fs::symlink(&store, root.join(format!("{STATE_FILE}.tmp"))).unwrap();
    let options = IngestOptions { root: root.to_path_buf(), ..IngestOptions::default() };
    let destination = Destination { server: base, token: "t".into(), key: "fake".into() };
    let summary = run(&options, &destination).await.expect("a planted link is not in the way");
    assert_eq!(summary.ingested, 1, "{summary:?}");
    assert_eq!(std::fs::read_to_string(&store).unwrap(), "a running server's store", "written through the link");
    let state = std::fs::symlink_metadata(root.join(STATE_FILE)).unwrap();
    assert!(state.file_type().is_file(), "the state file is a file of its own");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&state.permissions()) & 0o777, 0o600);

    // The state file itself a link: the run is refused, saying why, and the target is untouched.
    std::fs::remove_file(root.join(STATE_FILE)).unwrap();
    std::os::unix::fs::symlink(&store, root.join(STATE_FILE)).unwrap();
    let error = run(&options, &destination).await.expect_err("a state file that is a link");
    assert!(matches!(&error, IngestError::Io { reason, .. } if reason.contains("symbolic link")), "{error}");
    assert_eq!(std::fs::read_to_string(&store).unwrap(), "a running server's store");
    handle.stop(false).await;
}

/// Whether any uploaded body holds `text`.
fn uploaded(bodies: &std::sync::Mutex<Vec<Vec<u8>>>, text: &str) -> bool {
    bodies.lock().unwrap().iter().any(|body| body.windows(text.len()).any(|window| window == text.as_bytes()))
}

/// Issue 57.6: the folder was listed without links, but its files were read through links
/// swapped in later, and a 0600 operator configuration was uploaded as a document. A file whose
/// opened handle is not the file that was listed (a link now, or another file) is reported and
/// never read.
#[actix_web::test]
async fn a_file_swapped_after_the_folder_was_listed_is_reported_and_never_read() {
    let folder = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = folder.path().to_path_buf();
    let config = outside.path().join("warrant.toml");
    std::fs::write(&config, "hs256_secret = \"operator-only-secret\"\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    for name in ["a.md", "b.md", "c.md", "sub/d.md"] {
        std::fs::write(root.join(name), format!("# {name}\n\nListed text.\n")).unwrap();
    }
    std::fs::write(outside.path().join("d.md"), "# d\n\nOutside-folder text.\n").unwrap();
    // While a.md is being uploaded: b.md becomes a link to the configuration, c.md another
    // file, and the folder sub/ a link to a folder outside holding a d.md of its own.
    let (swapped, elsewhere) = (root.clone(), outside.path().to_path_buf());
    let (base, handle, bodies) = recording_admin(move |upload| {
        if upload == 0 {
            std::fs::remove_file(swapped.join("b.md")).unwrap();
            std::os::unix::fs::symlink(&config, swapped.join("b.md")).unwrap();
            std::fs::write(swapped.join("c.new"), "# c\n\nSwapped-in text.\n").unwrap();
            std::fs::rename(swapped.join("c.new"), swapped.join("c.md")).unwrap();
            std::fs::rename(swapped.join("sub"), swapped.join("old-sub")).unwrap();
            std::os::unix::fs::symlink(&elsewhere, swapped.join("sub")).unwrap();
        }
    });
    let options = IngestOptions { root: root.clone(), sync: true, ..IngestOptions::default() };
    let destination = Destination { server: base, token: "t".into(), key: "fake".into() };
    let summary = run(&options, &destination).await.expect("the run goes on");
    assert!(!uploaded(&bodies, "operator-only-secret"), "read through the swapped-in link");
    assert!(!uploaded(&bodies, "Swapped-in text"), "read another file than the one listed");
    assert!(!uploaded(&bodies, "Outside-folder text"), "read through a folder swapped for a link");
    assert_eq!((summary.ingested, summary.deleted), (1, 0), "{summary:?}");
    let unread: Vec<&str> = summary.unread.iter().map(|(doc_id, _)| doc_id.as_str()).collect();
    assert_eq!(unread, ["b.md", "c.md", "sub/d.md"], "{summary:?}");
    assert!(summary.unread[0].1.contains("symbolic link"), "{:?}", summary.unread);
    assert!(summary.unread[1].1.contains("replaced"), "{:?}", summary.unread);
    assert!(summary.unread[2].1.contains("replaced"), "{:?}", summary.unread);
    handle.stop(false).await;
}

/// Issue 60.9: symbolic links were skipped without a word. They are never followed (one leading
/// out of the folder would upload what the folder does not hold; one inside it names a file
/// ingested under its own id) and each is reported as not read; a sidecar that is a link ends
/// the run, since the access list of its folders cannot be known.
#[actix_web::test]
async fn links_in_the_folder_are_reported_and_never_followed() {
    let folder = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::write(outside.path().join("secret.md"), "# Secret\n\nOutside-only text.\n").unwrap();
    std::fs::write(root.join("a.md"), "# A\n\nInside text.\n").unwrap();
    std::os::unix::fs::symlink(root.join("a.md"), root.join("inside.md")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("outside.md")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("docs")).unwrap();
    let (base, handle, bodies) = recording_admin(|_| {});
    let options = IngestOptions { root: root.to_path_buf(), ..IngestOptions::default() };
    let destination = Destination { server: base, token: "t".into(), key: "fake".into() };
    let summary = run(&options, &destination).await.expect("links do not end the run");
    assert_eq!((summary.ingested, bodies.lock().unwrap().len()), (1, 1), "{summary:?}");
    assert!(!uploaded(&bodies, "Outside-only text"));
    let unread: Vec<&str> = summary.unread.iter().map(|(doc_id, _)| doc_id.as_str()).collect();
    assert_eq!(unread, ["docs", "inside.md", "outside.md"], "{summary:?}");
    assert!(summary.unread.iter().all(|(_, reason)| reason.contains("symbolic link")), "{:?}", summary.unread);

    std::fs::create_dir(root.join("hr")).unwrap();
    std::fs::write(root.join("hr/leave.md"), "# Leave\n\nTwenty-eight days.\n").unwrap();
    std::fs::write(outside.path().join("acl.json"), r#"{"groups": ["everyone"]}"#).unwrap();
    std::os::unix::fs::symlink(outside.path().join("acl.json"), root.join("hr").join(ACL_SIDECAR)).unwrap();
    let error = run(&options, &destination).await.expect_err("a linked sidecar");
    assert!(matches!(&error, IngestError::Io { reason, .. } if reason.contains("symbolic link")), "{error}");
    handle.stop(false).await;
}

/// Issues 57.11 and 60.8: a folder's sidecar did not cover its subfolders, so `legal/archive/`
/// fell back to the command line's `--group staff` and staff read it. A sidecar applies to its
/// folder and every folder below it; the nearest sidecar wins.
#[actix_web::test]
async fn a_sidecar_covers_every_folder_below_it_until_another_overrides_it() {
    let (base, handle) = server().await;
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    std::fs::create_dir_all(root.join("legal/archive/2019")).unwrap();
    std::fs::create_dir_all(root.join("legal/public")).unwrap();
    std::fs::write(root.join("legal").join(ACL_SIDECAR), r#"{"groups": ["legal"]}"#).unwrap();
    std::fs::write(root.join("legal/public").join(ACL_SIDECAR), r#"{"groups": ["staff"]}"#).unwrap();
    std::fs::write(root.join("legal/archive/x.md"), "# X\n\nSettled out of court.\n").unwrap();
    std::fs::write(root.join("legal/archive/2019/y.md"), "# Y\n\nA sealed matter.\n").unwrap();
    std::fs::write(root.join("legal/public/z.md"), "# Z\n\nThe published terms.\n").unwrap();
    std::fs::write(root.join("handbook.md"), "# Handbook\n\nWelcome.\n").unwrap();
    let destination =
        Destination { server: base.clone(), token: token("folders", "ops", &[], &["admin"]), key: "server".into() };
    let summary = run(&staff_sync(root), &destination).await.expect("run");
    assert_eq!(summary.ingested, 4, "{summary:?}");
    assert_eq!(readable(&base, "legal/archive/x.md", &["staff"]).await, 404, "legal's sidecar covers archive/");
    assert_eq!(readable(&base, "legal/archive/2019/y.md", &["staff"]).await, 404, "and every folder below");
    assert_eq!(readable(&base, "legal/archive/x.md", &["legal"]).await, 200);
    assert_eq!(readable(&base, "legal/archive/2019/y.md", &["legal"]).await, 200);
    assert_eq!(readable(&base, "legal/public/z.md", &["staff"]).await, 200, "the nearest sidecar wins");
    assert_eq!(readable(&base, "legal/public/z.md", &["legal"]).await, 404);
    assert_eq!(readable(&base, "handbook.md", &["staff"]).await, 200, "the flags above every sidecar");
    handle.stop(false).await;
}
