//! `warrant ingest PATH` against a server on a loopback port: new and changed files uploaded,
//! unchanged ones skipped, removed ones deleted with `--sync`, a refused file reported while the
//! rest goes on, and the state file resuming a run.

use std::sync::Arc;

use warrant::domain::DocAcl;
use warrant::http::auth::{Claims, mint_hs256};
use warrant::http::server::app;
use warrant::ingest::{ACL_SIDECAR, IngestOptions, STATE_FILE, run};

use super::extract::policy_pdf;

const SECRET: &str = "test-secret-for-folder-ingestion";

fn token(tenant: &str, sub: &str, groups: &[&str], roles: &[&str]) -> String {
    let claims = Claims {
        sub: sub.into(),
        tenant: tenant.into(),
        groups: groups.iter().map(|group| group.to_string()).collect(),
        roles: roles.iter().map(|role| role.to_string()).collect(),
        exp: 4_000_000_000,
        iss: None,
        aud: None,
    };
    mint_hs256(SECRET, &claims).unwrap()
}

/// A server on an ephemeral loopback port: (base URL, handle).
async fn server() -> (String, actix_web::dev::ServerHandle) {
    let mut settings = warrant::config::Settings::defaults();
    settings.auth.hs256_secret = SECRET.into();
    settings.embedder.dim = 32;
    settings.index.shards = 2;
    let settings = Arc::new(settings);
    let providers = super::support::hashed_providers(&settings, None);
    let state = super::support::demo_state(settings, providers).await;
    let server = actix_web::HttpServer::new(move || app(state.clone())).workers(1).bind("127.0.0.1:0").unwrap();
    let address = server.addrs()[0];
    let running = server.run();
    let handle = running.handle();
    actix_rt::spawn(running);
    (format!("http://{address}"), handle)
}

async fn readable(base: &str, doc_id: &str, groups: &[&str]) -> u16 {
    let reader = token("folders", "ann", groups, &[]);
    let client = reqwest::Client::new();
    let encoded = percent_encoding::utf8_percent_encode(doc_id, percent_encoding::NON_ALPHANUMERIC);
    client.get(format!("{base}/v1/documents/{encoded}")).bearer_auth(reader).send().await.unwrap().status().as_u16()
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
    let options = IngestOptions {
        root: root.to_path_buf(),
        server: base.clone(),
        token: token("folders", "ops", &[], &["admin"]),
        acl: DocAcl { groups: vec!["staff".into()], users: vec![] },
        sync: true,
        progress: false,
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
    let refused = IngestOptions { token: token("folders", "ann", &["staff"], &[]), ..options.clone() };
    assert!(run(&refused).await.is_err());
    handle.stop(false).await;
}
