//! Tokens of a real OpenID provider (NanoIDP from PyPI, started on loopback by
//! `tests/oidc/provider.sh`): discovery, a provider token mapped to its principal through
//! `[auth.claims]`, key rotation at the provider mid-run, a flood of unknown key ids, the provider
//! stopped, every refusal a 401 with its code, and no token in the logs.
//!
//! They need `WARRANT_TEST_OIDC_ISSUER`, `WARRANT_TEST_OIDC_DIR` and `WARRANT_TEST_OIDC_VENV`
//! (`tests/oidc/provider.sh start` prints them) and skip with a loud message without them. The
//! tests that rotate keys, count the provider's JWKS requests or stop it start a private provider
//! of their own; the others share the started one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header, decode_header};
use serde_json::{Value, json};
use warrant::config::Settings;
use warrant::domain::{Principal, Role};
use warrant::http::AppState;

use crate::snapshots::{call, command, retrieved_docs};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const CLIENT: (&str, &str) = ("warrant-test", "warrant-test-secret");

// ---- the provider ----

/// A running provider: the shared one (`tests/oidc/provider.sh start`) or a private one this
/// test started (stopped, by its own pid, when dropped).
struct Provider {
    issuer: String,
    /// Its configuration directory: `keys/`, and `log` (one line per HTTP request).
    dir: PathBuf,
    child: Option<Child>,
    http: reqwest::Client,
    _temporary: Option<tempfile::TempDir>,
}

/// The environment of the started provider, or `None` with a loud skip message.
fn environment(test: &str) -> Option<(String, PathBuf, String)> {
    let variables = ["WARRANT_TEST_OIDC_ISSUER", "WARRANT_TEST_OIDC_DIR", "WARRANT_TEST_OIDC_VENV"];
    let values: Vec<String> = variables.iter().filter_map(|name| std::env::var(name).ok()).collect();
    if values.len() < variables.len() {
        // Straight to stderr, past the test harness's capture, so the skip is seen.
        let notice = format!(
            "SKIPPED: OpenID provider test {test} (set WARRANT_TEST_OIDC_ISSUER, WARRANT_TEST_OIDC_DIR and \
             WARRANT_TEST_OIDC_VENV; tests/oidc/provider.sh start prints them)\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        return None;
    }
    Some((values[0].clone(), PathBuf::from(&values[1]), values[2].clone()))
}

/// An HTTP client (reqwest needs the process's rustls provider first).
fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Provider {
    fn shared(test: &str) -> Option<Self> {
        let (issuer, dir, _) = environment(test)?;
        Some(Self { issuer, dir, child: None, http: http(), _temporary: None })
    }

    /// A provider of this test's own on a free port (the started provider's venv).
    async fn private(test: &str) -> Option<Self> {
        let (_, _, venv) = environment(test)?;
        let temporary = tempfile::tempdir().unwrap();
        let dir = temporary.path().to_owned();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new("bash")
            .arg(Path::new(MANIFEST_DIR).join("tests/oidc/provider.sh"))
            .args(["run", dir.to_str().unwrap(), &port.to_string()])
            .env("WARRANT_TEST_OIDC_VENV", venv)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the provider");
        let provider = Self {
            issuer: format!("http://127.0.0.1:{port}"),
            dir,
            child: Some(child),
            http: http(),
            _temporary: Some(temporary),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        // Its health endpoint, so the request log holds only what warrant asked for.
        let health = format!("{}/api/health", provider.issuer);
        while !provider.http.get(&health).send().await.is_ok_and(|response| response.status().is_success()) {
            assert!(Instant::now() < deadline, "the provider did not start: {}", provider.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(provider)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Requests for the JWKS the provider served so far (its request log).
    fn jwks_requests(&self) -> usize {
        self.log().lines().filter(|line| line.contains("\"GET /.well-known/jwks.json")).count()
    }

    /// Requests for the discovery document the provider served so far.
    fn discovery_requests(&self) -> usize {
        self.log().lines().filter(|line| line.contains("\"GET /.well-known/openid-configuration")).count()
    }

    /// An access token of `user` from the provider's token endpoint (password grant), with
    /// `extra` form fields, asked under `host` (the issuer it names follows the host).
    async fn token_with(&self, user: &str, extra: &[(&str, &str)], host: Option<&str>) -> String {
        let password = format!("{user}-password");
        let mut form = vec![("grant_type", "password"), ("username", user), ("password", password.as_str())];
        form.extend_from_slice(extra);
        let mut request = self.http.post(format!("{}/token", self.issuer)).basic_auth(CLIENT.0, Some(CLIENT.1));
        if let Some(host) = host {
            request = request.header(reqwest::header::HOST, host);
        }
        let response: Value = request.form(&form).send().await.unwrap().json().await.unwrap();
        response["access_token"].as_str().unwrap_or_else(|| panic!("no token for {user}: {response}")).to_owned()
    }

    async fn token(&self, user: &str) -> String {
        self.token_with(user, &[], None).await
    }

    /// An ID token of `user` (password grant, scope `openid`): `aud` is the client id.
    async fn id_token(&self, user: &str) -> String {
        let password = format!("{user}-password");
        let form = [("grant_type", "password"), ("username", user), ("password", &password), ("scope", "openid")];
        let request = self.http.post(format!("{}/token", self.issuer)).basic_auth(CLIENT.0, Some(CLIENT.1));
        let response: Value = request.form(&form).send().await.unwrap().json().await.unwrap();
        response["id_token"].as_str().unwrap_or_else(|| panic!("no id token for {user}: {response}")).to_owned()
    }

    /// A token the provider minted with a lifetime of `minutes` (negative: already expired).
    async fn token_for_minutes(&self, user: &str, minutes: i64) -> String {
        let response: Value = self
            .http
            .post(format!("{}/api/users/{user}/token", self.issuer))
            .json(&json!({"exp_minutes": minutes}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        response["access_token"].as_str().unwrap().to_owned()
    }

    /// Rotates the provider's signing key (the old one stays published until the next rotation).
    async fn rotate(&self) -> String {
        let response: Value =
            self.http.post(format!("{}/api/keys/rotate", self.issuer)).send().await.unwrap().json().await.unwrap();
        assert_eq!(response["success"], true, "{response}");
        response["new_kid"].as_str().unwrap().to_owned()
    }

    /// Stops a private provider.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---- warrant ----

/// Settings that take `issuer`'s tokens, mapped the way the test users' claims are shaped
/// (tests/oidc/users.yaml): the tenant in `attributes.org_id`, groups prefixed `warrant-`, roles
/// in `attributes.realm_access.roles` with `warrant-admin` granting admin.
fn settings(issuer: &str, change: impl FnOnce(&mut Settings)) -> Settings {
    let mut settings = Settings::defaults();
    settings.embedder.dim = 64;
    settings.index.shards = 2;
    let auth = &mut settings.auth;
    auth.oidc.issuer = issuer.into();
    auth.oidc.audience = "warrant".into();
    auth.claims.tenant = "attributes.org_id".into();
    auth.claims.groups_prefix = "warrant-".into();
    auth.claims.roles = "attributes.realm_access.roles".into();
    auth.claims.role_map = BTreeMap::from([("admin".into(), vec!["warrant-admin".into()])]);
    change(&mut settings);
    settings.validate().expect("valid settings");
    settings
}

struct Server {
    base: String,
    client: reqwest::Client,
    state: actix_web::web::Data<AppState>,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_rt::spawn(async move { handle.stop(false).await });
    }
}

/// The service on `settings` with the demo corpus, over a loopback socket.
async fn start(settings: Settings) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Arc::new(settings);
    let providers = crate::support::hashed_providers(&settings, None);
    let state = crate::support::demo_state(Arc::clone(&settings), providers).await;
    let (base, handle) = crate::support::listen(state.clone(), 2);
    Server { base, client: reqwest::Client::new(), state, handle }
}

impl Server {
    /// `/v1/retrieve` as `token`: status and body.
    async fn retrieve(&self, token: &str) -> (u16, Value) {
        let query = json!({"query": "travel hotel policy on-call runbook", "k": 20});
        call(&self.client, &self.base, reqwest::Method::POST, "/v1/retrieve", token, Some(query)).await
    }

    async fn readyz(&self) -> (u16, Value) {
        let response = self.client.get(format!("{}/readyz", self.base)).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

fn codes(body: &Value) -> Option<&str> {
    body["code"].as_str()
}

// ---- token surgery ----

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `token` with its header replaced by `header` (payload and signature kept).
fn with_header(token: &str, header: &Value) -> String {
    let (_, rest) = token.split_once('.').unwrap();
    format!("{}.{rest}", base64url(header.to_string().as_bytes()))
}

/// The claims of `token`, unverified (to re-sign or forge them).
fn payload(token: &str) -> Value {
    serde_json::from_slice(&decode_base64url(token.split('.').nth(1).unwrap())).unwrap()
}

fn decode_base64url(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).expect("base64url")
}

fn kid(token: &str) -> String {
    decode_header(token).unwrap().kid.unwrap()
}

// ---- the tests ----

#[actix_web::test]
async fn oidc_discovery_finds_the_keys_and_a_provider_token_maps_to_its_principal() {
    let Some(provider) = Provider::private("discovery").await else { return };
    let server = start(settings(&provider.issuer, |_| {})).await;
    // Discovery first, then the JWKS it names: fetched once, before anything was served.
    assert_eq!((provider.discovery_requests(), provider.jwks_requests()), (1, 1), "{}", provider.log());
    let (status, ready) = server.readyz().await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!((ready["oidc"]["usable"].as_bool(), ready["oidc"]["keys"].as_u64()), (Some(true), Some(1)), "{ready}");

    // Alice's token from the provider's token endpoint: tenant from attributes.org_id (not the
    // provider's own `tenant` claim, "default"), groups without their prefix and without the
    // unprefixed `sales`, admin from the mapped realm role.
    let alice = provider.token("alice").await;
    assert_eq!(payload(&alice)["tenant"], "default", "the provider's own tenant claim is not the mapped one");
    let principal = server.state.authenticator.authenticate(&alice).await.expect("alice's token verifies");
    assert_eq!(
        principal,
        Principal {
            tenant: "acme".into(),
            user: "alice".into(),
            groups: ["engineering", "everyone"].into_iter().map(str::to_owned).collect(),
            roles: [Role::Admin].into_iter().collect(),
        }
    );
    // Over HTTP: acme's documents for her groups and her own, nothing of globex.
    let (status, body) = server.retrieve(&alice).await;
    assert_eq!(status, 200, "{body}");
    let mut documents = retrieved_docs(&body);
    documents.sort();
    documents.dedup();
    assert_eq!(documents, ["laptop-faq", "oncall-runbook", "reorg-plan", "travel-policy", "vacation-policy"], "{body}");
    let changes =
        call(&server.client, &server.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &alice, None);
    assert_eq!(changes.await.0, 200, "the mapped admin role opens the admin API");
    // Carol: no warrant-admin realm role, fewer groups.
    let carol = provider.token("carol").await;
    let changes =
        call(&server.client, &server.base, reqwest::Method::GET, "/v1/admin/acl/changes?since=0", &carol, None);
    assert_eq!(changes.await.0, 403);
    let (status, body) = server.retrieve(&carol).await;
    assert_eq!(status, 200, "{body}");
    assert!(!retrieved_docs(&body).contains(&"oncall-runbook".to_owned()), "{body}");
    // Gina of globex sees globex's documents only.
    let (status, body) = server.retrieve(&provider.token("gina").await).await;
    assert_eq!(status, 200, "{body}");
    assert!(retrieved_docs(&body).iter().all(|doc| doc != "oncall-runbook" && doc != "reorg-plan"), "{body}");
    assert!(!retrieved_docs(&body).is_empty(), "{body}");

    // Discovery naming another issuer than the configured one (a trailing slash too many) is
    // refused: no key, every provider token 401 keys_unavailable, and /readyz says why.
    let mistyped = start(settings(&format!("{}/", provider.issuer), |_| {})).await;
    let (status, ready) = mistyped.readyz().await;
    assert_eq!((status, ready["status"].as_str()), (503, Some("keys_unavailable")), "{ready}");
    assert_eq!(ready["oidc"]["last_error"]["code"], "issuer_mismatch", "{ready}");
    let (status, body) = mistyped.retrieve(&alice).await;
    assert_eq!((status, codes(&body)), (401, Some("keys_unavailable")), "{body}");

    // A configured jwks_url skips discovery.
    let before = provider.discovery_requests();
    let direct = start(settings(&provider.issuer, |settings| {
        settings.auth.oidc.jwks_url = format!("{}/.well-known/jwks.json", provider.issuer);
    }))
    .await;
    assert_eq!(direct.retrieve(&alice).await.0, 200);
    assert_eq!(provider.discovery_requests(), before, "no discovery with auth.oidc.jwks_url");
}

#[actix_web::test]
async fn oidc_every_refusal_is_a_401_with_its_code() {
    let Some(provider) = Provider::shared("refusals") else { return };
    let server = start(settings(&provider.issuer, |settings| settings.auth.leeway_seconds = 5)).await;
    let alice = provider.token("alice").await;
    assert_eq!(server.retrieve(&alice).await.0, 200);
    let public_pem = std::fs::read(provider.dir.join("keys/rsa_public.pem")).expect("the provider's public key");
    let jwks = provider.http.get(format!("{}/.well-known/jwks.json", provider.issuer)).send().await.unwrap();
    let jwks = jwks.bytes().await.unwrap();
    let hs256 = |secret: &[u8], kid: Option<String>| {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid;
        jsonwebtoken::encode(&header, &payload(&alice), &EncodingKey::from_secret(secret)).unwrap()
    };
    let (head, rest) = alice.split_once('.').unwrap();
    let (body, signature) = rest.split_once('.').unwrap();
    let mut forged = payload(&alice);
    forged["sub"] = json!("carol");
    let cases: Vec<(&str, String, &str)> = vec![
        // HS256 signed with the provider's public key (its PEM, its JWKS), naming its key.
        ("alg confusion (pem)", hs256(&public_pem, Some(kid(&alice))), "invalid_token"),
        ("alg confusion (jwks)", hs256(&jwks, Some(kid(&alice))), "invalid_token"),
        // The same without a kid goes to the local keys, where HS256 is off beside a provider.
        ("alg confusion without kid", hs256(&public_pem, None), "invalid_token"),
        (
            "none",
            format!(
                "{}.{body}.",
                base64url(json!({"alg": "none", "typ": "JWT", "kid": kid(&alice)}).to_string().as_bytes())
            ),
            "invalid_token",
        ),
        ("none, signature kept", with_header(&alice, &json!({"alg": "none", "kid": kid(&alice)})), "invalid_token"),
        ("RS256 claimed as PS256", with_header(&alice, &json!({"alg": "PS256", "kid": kid(&alice)})), "invalid_token"),
        (
            "forged claims under a real signature",
            format!("{head}.{}.{signature}", base64url(forged.to_string().as_bytes())),
            "invalid_token",
        ),
        (
            "wrong issuer",
            provider
                .token_with(
                    "alice",
                    &[],
                    Some(&provider.issuer.replace("127.0.0.1", "localhost").replace("http://", "")),
                )
                .await,
            "invalid_token",
        ),
        (
            "wrong audience",
            provider.token_with("alice", &[("resource", "urn:another-service")], None).await,
            "invalid_token",
        ),
        ("expired", provider.token_for_minutes("alice", -5).await, "token_expired"),
        ("missing mapped claim", provider.token("bob").await, "missing_claim"),
    ];
    for (case, token, code) in &cases {
        let (status, body) = server.retrieve(token).await;
        assert_eq!((status, codes(&body)), (401, Some(*code)), "{case}: {body}");
    }
    // The wrong-issuer and wrong-audience tokens are the provider's own, correctly signed ones.
    let wrong_issuer = &cases.iter().find(|case| case.0 == "wrong issuer").unwrap().1;
    assert_eq!(payload(wrong_issuer)["iss"], provider.issuer.replace("127.0.0.1", "localhost"));
    assert_eq!(kid(wrong_issuer), kid(&alice));
    let wrong_audience = &cases.iter().find(|case| case.0 == "wrong audience").unwrap().1;
    assert_eq!(payload(wrong_audience)["aud"], "urn:another-service");
    let missing = server.retrieve(&cases.last().unwrap().1).await.1;
    assert!(missing["message"].as_str().unwrap().contains("auth.claims.tenant"), "{missing}");
}

/// Regression (issue 57.14): `typ` was never checked, so an ID token whose `aud` is warrant's
/// audience (here the client id) was taken as an access token. `auth.oidc.require_typ =
/// "at+jwt"` refuses it (NanoIDP writes `typ: JWT` on both kinds, so the setting would refuse its
/// access tokens too: it is for providers that write RFC 9068's `at+jwt`).
#[actix_web::test]
async fn oidc_a_required_typ_refuses_an_id_token_whose_aud_is_warrants() {
    let Some(provider) = Provider::shared("require_typ") else { return };
    let id_token = provider.id_token("alice").await;
    let for_the_client = |settings: &mut Settings| {
        settings.auth.oidc.audience = CLIENT.0.into();
        settings.auth.claims.tenant = String::new();
        settings.auth.claims.fixed_tenant = "acme".into();
    };
    let open = start(settings(&provider.issuer, for_the_client)).await;
    assert_eq!(open.retrieve(&id_token).await.0, 200, "by default any typ is accepted");
    let strict = start(settings(&provider.issuer, |settings| {
        for_the_client(settings);
        settings.auth.oidc.require_typ = "at+jwt".into();
    }))
    .await;
    let (status, body) = strict.retrieve(&id_token).await;
    assert_eq!((status, codes(&body)), (401, Some("invalid_token")), "{body}");
}

#[actix_web::test]
async fn oidc_key_rotation_at_the_provider_needs_one_refetch() {
    let Some(provider) = Provider::private("rotation").await else { return };
    let server = start(settings(&provider.issuer, |settings| settings.auth.oidc.unknown_kid_refetch_seconds = 1)).await;
    assert_eq!(provider.jwks_requests(), 1, "fetched at start");
    let first = provider.token("alice").await;
    assert_eq!(server.retrieve(&first).await.0, 200);

    // Rotate: the old key stays published beside the new one.
    let second_kid = provider.rotate().await;
    assert_eq!(server.retrieve(&first).await.0, 200, "the old token needs no fetch");
    assert_eq!(provider.jwks_requests(), 1);
    let second = provider.token("alice").await;
    assert_eq!(kid(&second), second_kid);
    assert_ne!(kid(&second), kid(&first));
    assert_eq!(server.retrieve(&second).await.0, 200, "the new key is fetched once");
    assert_eq!(provider.jwks_requests(), 2, "exactly one refetch: {}", provider.log());
    assert_eq!(server.retrieve(&first).await.0, 200, "old tokens keep working while their key is published");
    assert_eq!(server.retrieve(&second).await.0, 200);
    assert_eq!(provider.jwks_requests(), 2);

    // Rotate again: the first key is no longer published.
    provider.rotate().await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // past unknown_kid_refetch_seconds
    let third = provider.token("alice").await;
    assert_eq!(server.retrieve(&third).await.0, 200);
    assert_eq!(provider.jwks_requests(), 3);
    let (status, body) = server.retrieve(&first).await;
    assert_eq!((status, codes(&body)), (401, Some("invalid_token")), "a retired key verifies nothing: {body}");
    assert_eq!(server.retrieve(&second).await.0, 200, "the previous key is still published");
    assert_eq!(server.state.authenticator.provider().unwrap().status().keys, 2);
}

#[actix_web::test]
async fn oidc_a_flood_of_unknown_key_ids_fetches_the_keys_once() {
    let Some(provider) = Provider::private("flood").await else { return };
    let server =
        start(settings(&provider.issuer, |settings| settings.auth.oidc.unknown_kid_refetch_seconds = 300)).await;
    assert_eq!(provider.jwks_requests(), 1, "fetched at start");
    let alice = provider.token("alice").await;
    // A rotation first, so a genuinely new key arrives in the middle of the flood.
    provider.rotate().await;
    let rotated = provider.token("alice").await;
    let floods: Vec<String> = (0..300)
        .map(|index| {
            with_header(
                &alice,
                &json!({"alg": "RS256", "typ": "JWT", "kid": format!("random-{index}-{}", uuid::Uuid::new_v4())}),
            )
        })
        .collect();
    let mut requests: Vec<_> = floods.iter().map(|token| server.retrieve(token)).collect();
    requests.insert(150, server.retrieve(&rotated));
    let results = futures::future::join_all(requests).await;
    let refused =
        results.iter().filter(|(status, body)| *status == 401 && codes(body) == Some("invalid_token")).count();
    assert_eq!(refused, floods.len(), "every random kid is refused");
    assert_eq!(results[150].0, 200, "the new key's token verifies: {}", results[150].1);
    assert_eq!(provider.jwks_requests(), 2, "one refetch for 300 unknown key ids: {}", provider.log());
    // And afterwards: still one fetch, old and new tokens verify.
    for _ in 0..20 {
        let token = with_header(&alice, &json!({"alg": "RS256", "kid": uuid::Uuid::new_v4().to_string()}));
        assert_eq!(server.retrieve(&token).await.0, 401);
    }
    assert_eq!(server.retrieve(&alice).await.0, 200);
    assert_eq!(server.retrieve(&rotated).await.0, 200);
    assert_eq!(provider.jwks_requests(), 2);
}

#[actix_web::test]
async fn oidc_with_the_provider_stopped_cached_keys_verify_until_their_maximum_age() {
    let Some(mut provider) = Provider::private("provider stopped").await else { return };
    let server = start(settings(&provider.issuer, |settings| {
        let oidc = &mut settings.auth.oidc;
        (oidc.min_refresh_seconds, oidc.max_refresh_seconds, oidc.max_key_age_seconds) = (1, 1, 5);
        oidc.fetch_timeout_ms = 500;
    }))
    .await;
    let alice = provider.token("alice").await;
    assert_eq!(server.retrieve(&alice).await.0, 200);
    assert_eq!(server.readyz().await.0, 200);
    provider.stop();

    // A refresh fails, and the cached keys still verify.
    let deadline = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let (_, ready) = server.readyz().await;
        if ready["oidc"]["last_error"].is_object() {
            break ready;
        }
        assert!(Instant::now() < deadline, "no refresh failed: {ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed["oidc"]["last_error"]["code"], "fetch_failed", "{failed}");
    assert_eq!(failed["oidc"]["usable"], true, "{failed}");
    assert_eq!(server.retrieve(&alice).await.0, 200, "the cached key verifies while the provider is down");

    // Past the maximum age: 401 keys_unavailable (never an unverified pass), /readyz 503.
    let refused = loop {
        let (status, body) = server.retrieve(&alice).await;
        if status != 200 {
            break (status, body);
        }
        assert!(Instant::now() < deadline, "the cached keys never aged out");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((refused.0, codes(&refused.1)), (401, Some("keys_unavailable")), "{}", refused.1);
    let (status, ready) = server.readyz().await;
    assert_eq!((status, ready["status"].as_str()), (503, Some("keys_unavailable")), "{ready}");
    assert_eq!(ready["oidc"]["usable"], false, "{ready}");
    assert_eq!(ready["oidc"]["last_error"]["code"], "fetch_failed", "{ready}");
}

#[actix_web::test]
async fn oidc_tokens_never_reach_the_logs() {
    let Some(provider) = Provider::shared("logs") else { return };
    let snapshots = tempfile::tempdir().unwrap();
    let mut server = command(snapshots.path(), &[]);
    server
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .env("WARRANT__AUTH__OIDC__ISSUER", &provider.issuer)
        .env("WARRANT__AUTH__OIDC__AUDIENCE", "warrant")
        .env("WARRANT__AUTH__CLAIMS__TENANT", "attributes.org_id")
        .env("WARRANT__AUTH__CLAIMS__GROUPS_PREFIX", "warrant-")
        .env("WARRANT__AUTH__CLAIMS__ROLES", "attributes.realm_access.roles")
        .env("WARRANT__AUTH__CLAIMS__ROLE_MAP__ADMIN", r#"["warrant-admin"]"#);
    let (process, (lines, reader)) = crate::logs::spawn_capturing(server);
    let alice = provider.token("alice").await;
    let tokens = vec![
        alice.clone(),
        provider.token("bob").await,
        provider.token_for_minutes("alice", -5).await,
        provider.token_with("alice", &[("resource", "urn:another-service")], None).await,
        with_header(&alice, &json!({"alg": "RS256", "kid": "no-such-key"})),
        with_header(&alice, &json!({"alg": "none", "kid": kid(&alice)})),
        format!("{alice}x"),
    ];
    let client = http();
    let mut statuses = Vec::new();
    for token in &tokens {
        let query = json!({"query": "hotel", "k": 5});
        statuses.push(call(&client, &process.base, reqwest::Method::POST, "/v1/retrieve", token, Some(query)).await.0);
    }
    assert_eq!(statuses, [200, 401, 401, 401, 401, 401, 401]);
    drop(process);
    reader.join().unwrap();
    let logs = lines.lock().unwrap();
    assert!(logs.iter().any(|line| line.contains("/v1/retrieve")), "the requests were not logged");
    // Regression (issue 57.13): a refused provider token left no line naming why; now the check,
    // the key id and the algorithms are named (rate limited), and still no part of the token.
    let refusals: Vec<&String> = logs.iter().filter(|line| line.contains("a provider token was refused")).collect();
    for (reason, named) in
        [("key not held", "no-such-key"), ("algorithm not accepted by the key", "none"), ("expired", "RS256")]
    {
        assert!(
            refusals.iter().any(|line| line.contains(reason) && line.contains(named)),
            "no refusal line names {reason:?} and {named:?}: {refusals:?}"
        );
    }
    for token in &tokens {
        for part in token.split('.').filter(|part| part.len() >= 16) {
            if let Some(line) = logs.iter().find(|line| line.contains(part)) {
                panic!("a token part reached the log: {}", line.chars().take(300).collect::<String>());
            }
        }
    }
}
