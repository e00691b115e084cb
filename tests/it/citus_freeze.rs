//! A frozen Citus worker (issue 59): one worker of a test database is stopped with SIGSTOP (its
//! postmaster and every child, `tests/citus.sh freeze`), as a hung or partitioned machine is.
//! The node must keep serving the tenant of the healthy worker, fail the frozen worker's tenant
//! fast with a code, answer `/readyz` within a second throughout (ready, naming the frozen worker),
//! and serve the frozen tenant again soon after the thaw. It runs twice, in turn (one freezable
//! node): with the tenant cache off (every read SQL, the fallback) and on (`warrant serve`'s
//! default: both tenants cached before the freeze, every read still starting with the tenant's
//! epoch statement on its worker).
//!
//! The frozen node is `WARRANT_TEST_CITUS_FREEZABLE` (`tests/citus.sh start` prints it): a node
//! only this test registers, as a worker of its own database, so no other test running beside it
//! sees it stop. A guard thaws it whatever happens to the test ([`Frozen`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::Method;
use serde_json::{Value, json};

use super::{cluster, connect, distributed_database, ensure_app_role, user_of, with_user};

/// The statement deadline of the test's node (`storage.postgres.statement_timeout_ms`), short so
/// the test is.
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(1_000);

/// The request deadline of the test's node (`server.request_timeout_ms`). On Citus a read routed
/// to a frozen worker is not always stopped at the statement deadline (the coordinator can stay
/// in its wait for the worker past it): this deadline bounds it.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(2_000);

/// How long past its deadline a failing request may answer: the pool wait and the scheduling of
/// a loaded CI machine. A hang (the defect) lasts as long as the freeze.
const MARGIN: Duration = Duration::from_millis(1_500);

/// How long the worker stays frozen.
const FREEZE: Duration = Duration::from_secs(6);

/// A cluster node stopped with SIGSTOP until this guard drops (a failing test thaws it too).
struct Frozen {
    port: String,
}

impl Frozen {
    fn node(address: &str) -> Self {
        let port = address.rsplit(':').next().expect("host:port").to_owned();
        assert!(citus_sh(&["freeze", &port]), "tests/citus.sh freeze {port} failed");
        Self { port }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !citus_sh(&["thaw", &self.port]) {
            let notice = format!("tests/citus.sh thaw {} failed: thaw the node by hand\n", self.port);
            let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        }
    }
}

/// Runs `tests/citus.sh` with `arguments`; whether it succeeded.
fn citus_sh(arguments: &[&str]) -> bool {
    std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/citus.sh"))
        .args(arguments)
        .status()
        .is_ok_and(|status| status.success())
}

/// A tenant name whose shard group lies on the worker listening on `port` of the database
/// `client` (a superuser's connection to its coordinator) is connected to.
async fn tenant_on(client: &tokio_postgres::Client, port: i32, prefix: &str) -> String {
    for number in 0..500 {
        let tenant = format!("{prefix}{number}");
        let row = client
            .query_one(
                "SELECT nodeport FROM pg_dist_shard_placement \
                 WHERE shardid = get_shard_id_for_distribution_column('warrant_tenants', $1::text)",
                &[&tenant],
            )
            .await
            .expect("placement");
        if row.get::<_, i32>(0) == port {
            return tenant;
        }
    }
    panic!("no tenant among 500 names has its shard on port {port}");
}

/// `timed!(service, METHOD, path, token, body)`: one request to the in-process service (no
/// token when `token` is empty) → (status, JSON body, how long it took).
macro_rules! timed {
    ($service:expr, $method:expr, $path:expr, $token:expr, $body:expr) => {{
        let mut request = actix_web::test::TestRequest::default().method($method).uri($path);
        let token: &str = $token;
        if !token.is_empty() {
            request = request.insert_header(("authorization", format!("Bearer {token}")));
        }
        let body: Option<Value> = $body;
        if let Some(body) = body {
            request = request.set_json(body);
        }
        let started = Instant::now();
        // A request cut by its deadline is an error the server renders (`http::server`).
        let (status, bytes) = match actix_web::test::try_call_service($service, request.to_request()).await {
            Ok(response) => (response.status().as_u16(), actix_web::test::read_body(response).await),
            Err(error) => {
                let response = error.error_response();
                let status = response.status().as_u16();
                (status, actix_web::body::to_bytes(response.into_body()).await.unwrap_or_default())
            }
        };
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null), started.elapsed())
    }};
}

/// Issue 59: a worker frozen for 30 s took every tenant down (the pools filled with its tenants'
/// hung statements) and `/readyz` did not answer at all. Now: the healthy worker's tenant gets 0
/// errors, the frozen worker's tenant fails within its deadline with a code, `/readyz` answers
/// 200 within a second throughout and names the frozen worker, a write to the frozen tenant is
/// rolled back whole, and the frozen tenant is served again soon after the thaw; with the
/// tenant cache off and on ([`frozen_worker`]). Seen failing before the coordinator-only probe:
/// `/readyz` answered 503 `backend_unavailable` (its epoch statement read a shard on the frozen
/// worker).
#[actix_web::test]
async fn citus_a_frozen_worker_fails_its_tenants_fast_and_the_rest_keeps_serving() {
    let Some((url, workers)) = cluster() else { return };
    let Ok(freezable) = std::env::var("WARRANT_TEST_CITUS_FREEZABLE") else {
        let notice = "SKIPPED: citus freeze test (tests/citus.sh start prints WARRANT_TEST_CITUS_FREEZABLE)\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        return;
    };
    // In turn, never at once: both would freeze the one freezable node.
    for cached in [false, true] {
        frozen_worker(&url, &workers[0], &freezable, cached).await;
    }
}

/// One run of [`citus_a_frozen_worker_fails_its_tenants_fast_and_the_rest_keeps_serving`] in a
/// database of its own on `healthy_worker` and `freezable`, the node's tenant cache on when
/// `cached` (`storage.postgres.cache_mb` at its default) else off (0).
async fn frozen_worker(url: &str, healthy_worker: &str, freezable: &str, cached: bool) {
    let nodes = vec![healthy_worker.to_owned(), freezable.to_owned()];
    ensure_app_role(url, &nodes).await;
    let name = format!("warrant_freeze_{}", uuid::Uuid::new_v4().simple());
    // Test-only DDL: the name is generated here, never input.
    connect(url)
        .await
        .batch_execute(&format!("CREATE DATABASE {name} OWNER {}", super::APP_ROLE))
        .await
        .expect("database");
    let database = distributed_database(url, &name, &nodes, 64).await;
    let superuser = connect(&with_user(&database, user_of(url))).await;
    let port = |address: &str| address.rsplit(':').next().and_then(|port| port.parse::<i32>().ok()).expect("port");
    let healthy = tenant_on(&superuser, port(healthy_worker), "healthy").await;
    let frozen = tenant_on(&superuser, port(freezable), "frozen").await;
    // `/readyz` names a worker by its `pg_dist_node` id, never its address.
    let mut node_ids = std::collections::BTreeMap::new();
    for address in [healthy_worker, freezable] {
        let sql = "SELECT nodeid FROM pg_dist_node WHERE nodeport = $1";
        let node_id: i32 = superuser.query_one(sql, &[&port(address)]).await.expect("a worker").get(0);
        node_ids.insert(i64::from(node_id), address);
    }

    let mut settings = crate::support::settings(1);
    settings.storage.backend = warrant::config::StorageBackend::Postgres;
    settings.server.request_timeout_ms = REQUEST_TIMEOUT.as_millis() as u64;
    if !cached {
        settings.storage.postgres.cache_mb = 0;
    }
    let cache = warrant::postgres::CacheParams::from_settings(&settings);
    assert_eq!(cache.enabled(), cached);
    let providers = crate::support::hashed_providers(&settings, None);
    let mut params = crate::postgres::params(&database);
    params.acquire_timeout = Duration::from_millis(500);
    let limits = warrant::postgres::DatabaseLimits {
        statement_timeout: STATEMENT_TIMEOUT,
        ..warrant::postgres::DatabaseLimits::default()
    };
    let postgres =
        warrant::postgres::PostgresBackend::connect_cached(params, limits, cache, Arc::clone(&providers.embedder))
            .await
            .expect("connects");
    let state = crate::postgres::service_state_on(Arc::clone(&postgres), Arc::new(settings), providers);
    state.ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let node = actix_web::test::init_service(warrant::http::server::app(state)).await;
    let mode = if cached { "cache on" } else { "cache off" };

    let token = crate::snapshots::token;
    let admin = |tenant: &str| token(tenant, "root", &[], "admin");
    let reader = |tenant: &str| token(tenant, "alice", &["travel"], "");
    let upload = |doc_id: &str| {
        json!({"documents": [{"doc_id": doc_id, "title": "Hotels",
            "text": "Hotel stays are reimbursed up to 180 euros per night in London.", "acl": {"groups": ["travel"]}}]})
    };
    for tenant in [&healthy, &frozen] {
        let (status, body, _) =
            timed!(&node, Method::PUT, "/v1/admin/documents", &admin(tenant), Some(upload("hotels")));
        assert_eq!(status, 200, "{tenant}: {body}");
    }
    let retrieve = || Some(json!({"query": "hotel stays per night"}));
    for tenant in [&healthy, &frozen] {
        let (status, body, _) = timed!(&node, Method::POST, "/v1/retrieve", &reader(tenant), retrieve());
        assert_eq!(status, 200, "{mode}, before the freeze: {body}");
        // The read started the tenant's load: the freeze finds it cached, not loading.
        let settled = postgres.tenant_cache().settled(tenant, Duration::from_secs(30)).await;
        assert_eq!(settled, cached, "{mode}: {tenant} cached before the freeze");
    }
    let (status, body, _) = timed!(&node, Method::GET, "/readyz", "", None);
    assert_eq!(status, 200, "{body}");

    let guard = Frozen::node(freezable);
    let frozen_since = Instant::now();
    // A write to the frozen worker's tenant: rolled back whole by its statement deadline.
    let (status, body, took) =
        timed!(&node, Method::PUT, "/v1/admin/documents", &admin(&frozen), Some(upload("taxis")));
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("storage_timeout")),
        "{mode}: a write to the frozen worker: {body}"
    );
    assert!(took <= STATEMENT_TIMEOUT + MARGIN, "the write fails fast: {took:?}");
    let healthy_reads = async {
        let mut errors = Vec::new();
        let mut reads = 0;
        while frozen_since.elapsed() < FREEZE {
            let (status, body, _) = timed!(&node, Method::POST, "/v1/retrieve", &reader(&healthy), retrieve());
            reads += 1;
            if status != 200 {
                errors.push(format!("{status} {body}"));
            }
        }
        (reads, errors)
    };
    // Four at once: beyond the frozen tenant's share of the pool, so a tenant's hung statements
    // must not take the connections the healthy tenant needs.
    let frozen_reads = futures::future::join_all((0..4).map(|_| async {
        let mut failures = Vec::new();
        while frozen_since.elapsed() < FREEZE {
            failures.push(timed!(&node, Method::POST, "/v1/retrieve", &reader(&frozen), retrieve()));
        }
        failures
    }));
    let readiness = async {
        let mut answers = Vec::new();
        while frozen_since.elapsed() < FREEZE {
            answers.push(timed!(&node, Method::GET, "/readyz", "", None));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        answers
    };
    let ((reads, errors), frozen_reads, answers) = futures::join!(healthy_reads, frozen_reads, readiness);
    drop(guard);
    let thawed = Instant::now();

    assert!(
        reads > 0 && errors.is_empty(),
        "{mode}: the healthy worker's tenant: {} errors in {reads} reads: {errors:?}",
        errors.len()
    );
    assert!(!answers.is_empty());
    for (status, body, took) in &answers {
        assert_eq!(*status, 200, "{mode}: one worker frozen leaves the node ready: {body}");
        assert!(*took < Duration::from_secs(1), "/readyz answers within a second: {took:?}");
    }
    let (_, last, _) = answers.last().expect("an answer");
    let reported = last["backend"]["workers"].as_array().expect("workers listed");
    let worker = |address: &str| {
        let listed = |worker: &&Value| worker["node_id"].as_i64().and_then(|id| node_ids.get(&id)) == Some(&address);
        reported.iter().find(listed).expect("listed").clone()
    };
    assert!(!last.to_string().contains(&format!(":{}", port(freezable))), "/readyz names no address: {last}");
    assert_eq!(worker(healthy_worker)["outcome"], "ok", "{last}");
    assert_eq!(worker(freezable)["outcome"], "timeout", "{last}");
    assert_eq!(worker(freezable)["code"], "storage_timeout", "{last}");
    assert!(worker(freezable)["failing_seconds"].as_u64().is_some(), "{last}");

    let frozen_reads: Vec<_> = frozen_reads.into_iter().flatten().collect();
    assert!(!frozen_reads.is_empty());
    for (status, body, took) in &frozen_reads {
        let code = body["code"].as_str().unwrap_or_default();
        assert!(
            *status == 503
                && ["storage_timeout", "storage_unavailable", "overloaded", "request_timeout"].contains(&code),
            "{mode}: the frozen worker's tenant fails with a code: {status} {body}"
        );
        assert!(*took <= REQUEST_TIMEOUT + MARGIN, "{mode}: the frozen worker's tenant fails fast: {took:?} ({body})");
    }
    // After the thaw the frozen tenant is served again, and its write was rolled back whole.
    let recovered = loop {
        let (status, body, _) = timed!(&node, Method::POST, "/v1/retrieve", &reader(&frozen), retrieve());
        if status == 200 {
            break thawed.elapsed();
        }
        assert!(thawed.elapsed() < Duration::from_secs(20), "{mode}: not served 20 s after the thaw: {status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (status, _, _) = timed!(&node, Method::GET, "/v1/documents/taxis", &reader(&frozen), None);
    assert_eq!(status, 404, "{mode}: the write past its deadline left nothing behind");
    // Cached, the healthy tenant was held throughout: its reads were the cache's, each after
    // its epoch statement on the healthy worker.
    assert_eq!(postgres.tenant_cache().holds(&healthy), cached, "{mode}: the healthy tenant stayed cached");
    let (status, body, _) = timed!(&node, Method::GET, "/readyz", "", None);
    assert_eq!(status, 200, "{body}");
    let listed: Vec<(&str, &str)> = body["backend"]["workers"]
        .as_array()
        .expect("workers listed")
        .iter()
        .filter_map(|worker| Some((*node_ids.get(&worker["node_id"].as_i64()?)?, worker["outcome"].as_str()?)))
        .collect();
    assert_eq!(listed, [(healthy_worker, "ok"), (freezable, "ok")], "after the thaw: {body}");
    let notice = format!(
        "citus freeze, {mode}: healthy tenant {reads} reads, 0 errors; frozen tenant {} failures, slowest {:?}; \
         /readyz slowest {:?}; served again {recovered:?} after the thaw\n",
        frozen_reads.len(),
        frozen_reads.iter().map(|(_, _, took)| *took).max().unwrap_or_default(),
        answers.iter().map(|(_, _, took)| *took).max().unwrap_or_default(),
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
}
