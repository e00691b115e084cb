//! Tokens from a company's identity provider (OpenID Connect): its published keys found by
//! discovery (or a configured JWKS URL), fetched at start, cached and refreshed in the
//! background, and its tokens verified against them and mapped to a principal's parts
//! ([`claims`]). Knows nothing of HTTP serving: `http::auth` routes a token here and turns a
//! [`Refusal`] into a 401.
//!
//! Invariants:
//! - a token is verified only with the key its `kid` names and only in an algorithm that key is
//!   pinned to ([`keys`]); a header `alg` that differs is refused (`none`, HS256 signed with the
//!   public key); `Ed25519` (RFC 9864) and `EdDSA` name the same algorithm ([`token`]); with
//!   `auth.oidc.require_typ` set, the header's `typ` must be it (without case, with or without
//!   `application/`), so an ID token is not taken for an access token; `exp`, `iss`
//!   (= `auth.oidc.issuer`) and `aud` (= `auth.oidc.audience`) are required, `nbf` is checked;
//! - keys are fetched off the request path by one refresher task (at start, then after the
//!   JWKS's `Cache-Control: max-age` clamped to `[min_refresh_seconds, max_refresh_seconds]`,
//!   and `min_refresh_seconds` after a failure); the one exception is a token naming a key not
//!   held: it asks the refresher for one fetch, at most once per `unknown_kid_refetch_seconds`
//!   whatever the number of such tokens, and requests missing while a fetch runs wait for that
//!   fetch, asynchronously (no worker thread blocks);
//! - a failed fetch, or a JWKS without a usable key, keeps the keys held; they verify up to
//!   `max_key_age_seconds` after their fetch, and after that every provider token is refused
//!   ([`Refusal::KeysUnavailable`]) until a fetch succeeds: never an unverified pass;
//! - a refused token is counted (`warrant_oidc_tokens_refused_total{reason}`) and logged at info
//!   with the check it failed, its `kid`, `alg` and `typ` and the algorithms of the key it names,
//!   at most one line per reason every [`REFUSAL_LOG_INTERVAL`] ([`refusals::RefusalLog`]);
//! - nothing here logs or keeps a token.

pub mod claims;
pub mod fetch;
pub mod keys;
pub mod refusals;
pub mod token;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::Algorithm;
use tokio::sync::{Notify, watch};

pub use claims::{ClaimMapping, MappedClaims, MissingClaim};
pub use keys::{KeySet, VerifyingKey};
pub use refusals::Reason;
pub use token::TokenHeader;

use crate::config::AuthSettings;

/// Shortest time between two log lines of one refusal reason.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Longest `kid`, `alg` or `typ` shown in a log line (they are the caller's text).
const MAX_LOGGED_CHARS: usize = 64;

/// Errors of fetching the provider's keys (configuration and start-up, and `/readyz`).
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The request failed (connection, time limit, TLS).
    #[error("cannot fetch the provider's {what}: {reason}")]
    Fetch {
        /// `discovery` or `jwks`.
        what: &'static str,
        /// Why (no URL).
        reason: String,
    },
    /// The provider answered with an error status.
    #[error("the provider answered {status} to the {what} request")]
    Status {
        /// `discovery` or `jwks`.
        what: &'static str,
        /// HTTP status.
        status: u16,
    },
    /// The body exceeded [`fetch::MAX_BODY_BYTES`].
    #[error("the provider's {what} document exceeds {} bytes", fetch::MAX_BODY_BYTES)]
    TooLarge {
        /// `discovery` or `jwks`.
        what: &'static str,
    },
    /// The document is not what it should be.
    #[error("the provider's {what} document is invalid: {reason}")]
    Document {
        /// `discovery` or `jwks`.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// Discovery names another issuer than the configured one.
    #[error("discovery names issuer {advertised:?}, not auth.oidc.issuer {configured:?}")]
    IssuerMismatch {
        /// `auth.oidc.issuer`.
        configured: String,
        /// The document's `issuer`.
        advertised: String,
    },
    /// The JWKS holds no key this server may use.
    #[error("the provider's jwks holds no usable key ({skipped} skipped: {reasons})")]
    NoUsableKeys {
        /// Keys skipped.
        skipped: usize,
        /// Their reasons, deduplicated.
        reasons: String,
    },
}

impl OidcError {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Fetch { .. } => "fetch_failed",
            Self::Status { .. } => "fetch_status",
            Self::TooLarge { .. } => "document_too_large",
            Self::Document { .. } => "invalid_document",
            Self::IssuerMismatch { .. } => "issuer_mismatch",
            Self::NoUsableKeys { .. } => "no_usable_keys",
        }
    }
}

/// Why a provider token was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Malformed, not signed by the key it names in that key's algorithm, or a failed `iss`,
    /// `aud` or `nbf` check.
    #[error("token is invalid")]
    Invalid,
    /// `exp` passed (beyond the leeway).
    #[error("token has expired")]
    Expired,
    /// The token names a key (`kid`) the provider does not publish.
    #[error("token names a key the provider does not publish")]
    UnknownKey,
    /// No key is usable: none fetched yet, or the last successful fetch is older than
    /// `auth.oidc.max_key_age_seconds`.
    #[error("the identity provider's keys are unavailable")]
    KeysUnavailable,
    /// A claim of `[auth.claims]` is missing.
    #[error(transparent)]
    MissingClaim(#[from] MissingClaim),
}

/// A refusal and the check that gave it (the caller sees the first, the operator's log the
/// second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// What the caller is told.
    pub refusal: Refusal,
    /// The check that failed.
    pub reason: Reason,
}

impl From<Reason> for Refused {
    fn from(reason: Reason) -> Self {
        Self { refusal: reason.refusal(), reason }
    }
}

impl Refusal {
    /// Transport-neutral code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid | Self::UnknownKey => "invalid_token",
            Self::Expired => "token_expired",
            Self::KeysUnavailable => "keys_unavailable",
            Self::MissingClaim(_) => "missing_claim",
        }
    }
}

/// What `/readyz` shows of the provider.
#[derive(Clone, Debug)]
pub struct ProviderStatus {
    /// `auth.oidc.issuer`.
    pub issuer: String,
    /// Keys held.
    pub keys: usize,
    /// Whether tokens can be verified (keys held, younger than the maximum age).
    pub usable: bool,
    /// Time since the last successful fetch.
    pub key_age: Option<Duration>,
    /// The last fetch's error (`None` after a success).
    pub last_error: Option<(&'static str, String)>,
}

/// The keys of the last successful fetch.
#[derive(Default)]
struct Held {
    set: KeySet,
    fetched_at: Option<Instant>,
    /// The keys that fetch skipped, and why (a change is logged at warn).
    skipped: Vec<keys::Skipped>,
}

/// Request-triggered fetches: one at a time, at most one per `unknown_kid_refetch_seconds`.
#[derive(Default)]
struct Gate {
    /// A fetch (of any trigger) is running.
    in_flight: bool,
    /// When a request last triggered one.
    last_triggered: Option<Instant>,
}

/// What a request that misses a key does.
enum Miss {
    /// Ask the refresher for a fetch, then wait for it.
    Trigger,
    /// A fetch runs: wait for it.
    Wait,
    /// Rate limited: answer with the keys held.
    Refuse,
}

/// One identity provider: its keys, their refresher's state, and how its tokens are checked.
pub struct Provider {
    issuer: String,
    allowed: Vec<Algorithm>,
    /// What the registered claims must say.
    expected: token::Expected,
    /// `auth.oidc.require_typ`, normalized ([`media_type`]); `None`: any `typ`.
    required_typ: Option<String>,
    mapping: ClaimMapping,
    min_refresh: Duration,
    max_refresh: Duration,
    refetch_interval: Duration,
    max_key_age: Duration,
    /// Longest wait for one fetch (discovery and JWKS, each within the time limit).
    fetch_wait: Duration,
    fetcher: fetch::Fetcher,
    held: ArcSwap<Held>,
    gate: Mutex<Gate>,
    last_error: Mutex<Option<(&'static str, String)>>,
    wake: Arc<Notify>,
    /// Fetch attempts finished (any outcome).
    attempts: watch::Sender<u64>,
    /// Whether [`Provider::spawn_refresher`] ran (without a refresher, a miss fetches nothing).
    refreshing: AtomicBool,
    /// The rate limit of refusal log lines.
    refusal_log: refusals::RefusalLog,
}

impl Provider {
    /// The provider of validated settings (`auth.oidc` on). Fetches nothing: see
    /// [`Provider::spawn_refresher`] and [`Provider::install`].
    pub fn new(settings: &AuthSettings) -> Result<Arc<Self>, OidcError> {
        let oidc = &settings.oidc;
        let mut allowed: Vec<Algorithm> = Vec::new();
        for algorithm in oidc.algorithms.iter().filter_map(|name| token::algorithm_named(name)) {
            if !allowed.contains(&algorithm) {
                allowed.push(algorithm);
            }
        }
        let timeout = Duration::from_millis(oidc.fetch_timeout_ms);
        Ok(Arc::new(Self {
            issuer: oidc.issuer.clone(),
            allowed,
            expected: token::Expected {
                issuer: oidc.issuer.clone(),
                audience: oidc.audience.clone(),
                leeway_seconds: settings.leeway_seconds,
            },
            required_typ: (!oidc.require_typ.is_empty()).then(|| media_type(&oidc.require_typ)),
            mapping: ClaimMapping::new(&settings.claims),
            min_refresh: Duration::from_secs(oidc.min_refresh_seconds),
            max_refresh: Duration::from_secs(oidc.max_refresh_seconds),
            refetch_interval: Duration::from_secs(oidc.unknown_kid_refetch_seconds),
            max_key_age: Duration::from_secs(oidc.max_key_age_seconds),
            fetch_wait: timeout * 2 + Duration::from_secs(1),
            fetcher: fetch::Fetcher::new(&oidc.issuer, &oidc.jwks_url, timeout)?,
            held: ArcSwap::from_pointee(Held::default()),
            gate: Mutex::new(Gate::default()),
            last_error: Mutex::new(None),
            wake: Arc::new(Notify::new()),
            attempts: watch::channel(0).0,
            refreshing: AtomicBool::new(false),
            refusal_log: refusals::RefusalLog::new(REFUSAL_LOG_INTERVAL),
        }))
    }

    /// Verifies a token with the keys held (no fetch): the principal's parts, or why not (a
    /// refusal is counted and logged, rate limited).
    pub fn verify(&self, token: &str, header: &TokenHeader) -> Result<MappedClaims, Refusal> {
        self.check(token, header).map_err(|refused| self.refused(refused, header))
    }

    /// Verifies a token; one naming a key not held (or while no key is usable) first waits for
    /// one rate-limited fetch ([`Provider::refetch`]). A refusal is counted and logged, rate
    /// limited, once: after the fetch, if there was one.
    pub async fn authenticate(&self, token: &str, header: &TokenHeader) -> Result<MappedClaims, Refusal> {
        let outcome = match self.check(token, header) {
            Err(refused) if matches!(refused.reason, Reason::KeyNotHeld | Reason::KeysUnavailable) => {
                self.refetch().await;
                self.check(token, header)
            }
            other => other,
        };
        outcome.map_err(|refused| self.refused(refused, header))
    }

    /// Counts a refusal and logs it (at most one line per reason per [`REFUSAL_LOG_INTERVAL`]);
    /// the caller's refusal.
    fn refused(&self, refused: Refused, header: &TokenHeader) -> Refusal {
        metrics::counter!("warrant_oidc_tokens_refused_total", "reason" => refused.reason.code()).increment(1);
        if let Some(held_back) = self.refusal_log.admit(refused.reason) {
            // The caller's text, cut short and written escaped (`?`): never a line of its own.
            let shown = |value: Option<&str>| {
                value.map_or_else(|| "none".to_owned(), |text| text.chars().take(MAX_LOGGED_CHARS).collect())
            };
            let key_algorithms = header
                .kid
                .as_deref()
                .and_then(|kid| self.held.load().set.get(kid).map(|key| format!("{:?}", key.algorithms)));
            tracing::info!(
                reason = refused.reason.as_str(),
                kid = ?shown(header.kid.as_deref()),
                alg = ?shown(Some(&header.alg)),
                typ = ?shown(header.typ.as_deref()),
                key_algorithms = key_algorithms.as_deref().unwrap_or("none (key not held)"),
                held_back,
                "a provider token was refused (one line per reason every {} s; held_back: refusals since the last)",
                REFUSAL_LOG_INTERVAL.as_secs()
            );
        }
        refused.refusal
    }

    /// [`Provider::verify`], with the check that failed (nothing counted or logged).
    pub fn check(&self, token: &str, header: &TokenHeader) -> Result<MappedClaims, Refused> {
        let kid = header.kid.as_deref().ok_or(Reason::NoKid)?;
        let held = self.held.load();
        if !self.usable(&held) {
            return Err(Reason::KeysUnavailable.into());
        }
        let key = held.set.get(kid).ok_or(Reason::KeyNotHeld)?;
        // The key decides the algorithm; a token claiming another one (`none`, HS256 signed
        // with the public key, RS256 against an EC key) is refused before any check.
        let algorithm =
            header.algorithm().filter(|algorithm| key.algorithms.contains(algorithm)).ok_or(Reason::Algorithm)?;
        if let Some(required) = &self.required_typ
            && header.typ.as_deref().map(media_type).as_ref() != Some(required)
        {
            return Err(Reason::Type.into());
        }
        let claims = token::verify(token, &key.key, algorithm, &self.expected)?;
        self.mapping
            .map(&claims)
            .map_err(|missing| Refused { refusal: Refusal::MissingClaim(missing), reason: Reason::MissingClaim })
    }

    /// For a token whose key is not held (or while no key is usable): asks the refresher for one
    /// fetch unless one ran for a request less than `unknown_kid_refetch_seconds` ago, and waits
    /// for the running fetch, if any (bounded by twice the fetch time limit). Then verify again.
    pub async fn refetch(&self) {
        if !self.refreshing.load(Ordering::Acquire) {
            return;
        }
        let mut attempts = self.attempts.subscribe();
        let miss = {
            let mut gate = lock(&self.gate);
            if gate.in_flight {
                Miss::Wait
            } else if gate.last_triggered.is_none_or(|at| at.elapsed() >= self.refetch_interval) {
                gate.last_triggered = Some(Instant::now());
                gate.in_flight = true;
                Miss::Trigger
            } else {
                Miss::Refuse
            }
        };
        match miss {
            Miss::Refuse => {
                metrics::counter!("warrant_jwks_refetches_refused_total").increment(1);
                return;
            }
            Miss::Trigger => self.wake.notify_one(),
            Miss::Wait => {}
        }
        let _ = tokio::time::timeout(self.fetch_wait, attempts.changed()).await;
    }

    /// Starts the refresher on the current actix system (once; later calls do nothing): a fetch
    /// now, then on schedule and when a request asks ([`Provider::refetch`]). It ends when the
    /// provider is dropped.
    pub fn spawn_refresher(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let provider = Arc::downgrade(self);
        let wake = Arc::clone(&self.wake);
        actix_rt::spawn(async move {
            let mut trigger = "start";
            loop {
                let Some(strong) = provider.upgrade() else { return };
                let next = strong.refresh(trigger).await;
                drop(strong);
                tokio::select! {
                    () = tokio::time::sleep(next) => trigger = "schedule",
                    () = wake.notified() => trigger = "request",
                }
            }
        });
    }

    /// Waits (bounded) until the refresher's first fetch finished, whatever its outcome.
    pub async fn first_fetch(&self) {
        let mut attempts = self.attempts.subscribe();
        if *attempts.borrow_and_update() > 0 {
            return;
        }
        let _ = tokio::time::timeout(self.fetch_wait, attempts.changed()).await;
    }

    /// Installs a JWKS document as freshly fetched (the refresher's path; tests and benchmarks
    /// call it with a document of their own). Returns the number of usable keys; a document
    /// without one leaves the keys held as they are.
    pub fn install(&self, body: &[u8]) -> Result<usize, OidcError> {
        let (set, skipped) = keys::parse(body, &self.allowed)?;
        // A skipped key is news once (at warn: a key the provider signs with may be among them);
        // the same skips at every refresh after that stay at debug.
        let news = skipped != self.held.load().skipped;
        for key in &skipped {
            let kid = key.kid.chars().take(MAX_LOGGED_CHARS).collect::<String>();
            if news {
                tracing::warn!(kid = ?kid, reason = key.reason, "a key of the provider's jwks is not used");
            } else {
                tracing::debug!(kid = ?kid, reason = key.reason, "a key of the provider's jwks is not used");
            }
        }
        if set.is_empty() {
            let mut reasons: Vec<&str> = skipped.iter().map(|key| key.reason).collect();
            reasons.dedup();
            return Err(OidcError::NoUsableKeys { skipped: skipped.len(), reasons: reasons.join(", ") });
        }
        let count = set.len();
        let previous = self.held.load().set.kids();
        if previous != set.kids() {
            tracing::info!(keys = count, kids = ?set.kids(), skipped = skipped.len(), "provider keys updated");
        }
        self.held.store(Arc::new(Held { set, fetched_at: Some(Instant::now()), skipped }));
        Ok(count)
    }

    /// What `/readyz` shows.
    pub fn status(&self) -> ProviderStatus {
        let held = self.held.load();
        ProviderStatus {
            issuer: self.issuer.clone(),
            keys: held.set.len(),
            usable: self.usable(&held),
            key_age: held.fetched_at.map(|at| at.elapsed()),
            last_error: lock(&self.last_error).clone(),
        }
    }

    fn usable(&self, held: &Held) -> bool {
        !held.set.is_empty() && held.fetched_at.is_some_and(|at| at.elapsed() <= self.max_key_age)
    }

    /// One fetch; returns the delay until the next scheduled one.
    async fn refresh(&self, trigger: &'static str) -> Duration {
        lock(&self.gate).in_flight = true;
        let outcome = match self.fetcher.fetch().await {
            Ok(fetched) => self.install(&fetched.body).map(|_| fetched.max_age),
            Err(error) => Err(error),
        };
        let next = match outcome {
            Ok(max_age) => {
                metrics::counter!("warrant_jwks_fetches_total", "outcome" => "ok", "trigger" => trigger).increment(1);
                lock(&self.last_error).take();
                max_age.unwrap_or(self.max_refresh).clamp(self.min_refresh, self.max_refresh)
            }
            Err(error) => {
                metrics::counter!("warrant_jwks_fetches_total", "outcome" => "error", "trigger" => trigger)
                    .increment(1);
                tracing::warn!(code = error.code(), %error, trigger, "cannot refresh the identity provider's keys; the keys held stay in use up to auth.oidc.max_key_age_seconds after their fetch");
                *lock(&self.last_error) = Some((error.code(), error.to_string()));
                self.min_refresh
            }
        };
        lock(&self.gate).in_flight = false;
        self.attempts.send_modify(|count| *count += 1);
        next
    }
}

/// A `typ` as compared (RFC 7515 §4.1.9): lowercase, without an `application/` prefix.
fn media_type(typ: &str) -> String {
    let lower = typ.to_ascii_lowercase();
    match lower.strip_prefix("application/") {
        Some(subtype) => subtype.to_owned(),
        None => lower,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    use super::keys::tests::{fixture, fixture_jwks};
    use super::*;
    use crate::config::Settings;

    const ISSUER: &str = "https://idp.example.com";

    fn provider() -> Arc<Provider> {
        let mut settings = Settings::defaults().auth;
        settings.oidc.issuer = ISSUER.into();
        settings.oidc.audience = "warrant".into();
        settings.leeway_seconds = 0;
        let provider = Provider::new(&settings).unwrap();
        provider.install(&fixture_jwks()).unwrap();
        provider
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn claims() -> serde_json::Value {
        json!({"sub": "alice", "tenant": "acme", "groups": ["everyone"], "iss": ISSUER, "aud": "warrant", "exp": now() + 60})
    }

    fn private(name: &str) -> Vec<u8> {
        std::fs::read(fixture(name)).unwrap()
    }

    fn sign(algorithm: Algorithm, kid: &str, claims: &serde_json::Value) -> String {
        let key = match algorithm {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&private("../test_rs256_private.pem")).unwrap(),
            Algorithm::PS256 => EncodingKey::from_rsa_pem(&private("ps256_private.pem")).unwrap(),
            Algorithm::ES256 => EncodingKey::from_ec_pem(&private("es256_private.pem")).unwrap(),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(&private("ed25519_private.pem")).unwrap(),
            other => panic!("{other:?}"),
        };
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.into());
        encode(&header, claims, &key).unwrap()
    }

    fn verify(provider: &Provider, token: &str) -> Result<MappedClaims, Refusal> {
        provider.verify(token, &TokenHeader::parse(token).unwrap())
    }

    #[test]
    fn each_algorithm_verifies_with_its_own_key_only() {
        let provider = provider();
        for (algorithm, kid) in
            [(Algorithm::RS256, "rs"), (Algorithm::PS256, "ps"), (Algorithm::ES256, "es"), (Algorithm::EdDSA, "ed")]
        {
            let mapped = verify(&provider, &sign(algorithm, kid, &claims())).unwrap();
            assert_eq!((mapped.user.as_str(), mapped.tenant.as_str()), ("alice", "acme"), "{algorithm:?}");
            // The same signature under another key's id: that key's algorithm differs, or its
            // material does.
            for other in ["rs", "ps", "es", "ed"].into_iter().filter(|other| *other != kid) {
                assert_eq!(
                    verify(&provider, &sign(algorithm, other, &claims())),
                    Err(Refusal::Invalid),
                    "{algorithm:?} as {other}"
                );
            }
        }
        // PS256 with the RS256 key's material (same RSA family): pinned to RS256, refused.
        let mut header = Header::new(Algorithm::PS256);
        header.kid = Some("rs".into());
        let pss =
            encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("../test_rs256_private.pem")).unwrap())
                .unwrap();
        assert_eq!(verify(&provider, &pss), Err(Refusal::Invalid));
    }

    /// Regression (issue 57.14): `typ` was never checked, so an ID token whose `aud` equals
    /// warrant's audience was taken as an access token. With `auth.oidc.require_typ` it is not.
    #[test]
    fn a_required_typ_refuses_tokens_of_another_type() {
        let es = EncodingKey::from_ec_pem(&private("es256_private.pem")).unwrap();
        let token = |typ: Option<&str>| {
            let mut header = json!({"alg": "ES256", "kid": "es"});
            if let Some(typ) = typ {
                header["typ"] = json!(typ);
            }
            sign_with_header(&header, &claims(), &es, Algorithm::ES256)
        };
        // The default accepts any typ, or none.
        let open = provider();
        for typ in [Some("JWT"), Some("at+jwt"), None] {
            assert!(verify(&open, &token(typ)).is_ok(), "{typ:?}");
        }
        let mut settings = Settings::defaults().auth;
        settings.oidc.issuer = ISSUER.into();
        settings.oidc.audience = "warrant".into();
        settings.oidc.require_typ = "at+jwt".into();
        let strict = Provider::new(&settings).unwrap();
        strict.install(&fixture_jwks()).unwrap();
        for typ in ["at+jwt", "AT+JWT", "application/at+jwt", "Application/At+JWT"] {
            assert!(verify(&strict, &token(Some(typ))).is_ok(), "{typ}");
        }
        for typ in [Some("JWT"), Some("id_token+jwt"), Some("at+jwt; x=1"), Some("application/jwt"), None] {
            assert_eq!(verify(&strict, &token(typ)), Err(Refusal::Invalid), "{typ:?}");
        }
        let refused = strict.check(&token(Some("JWT")), &header_of(&token(Some("JWT")))).unwrap_err();
        assert_eq!(refused.reason, Reason::Type);
        // Written with its prefix in the settings, it means the same.
        settings.oidc.require_typ = "application/AT+JWT".into();
        let prefixed = Provider::new(&settings).unwrap();
        prefixed.install(&fixture_jwks()).unwrap();
        assert!(verify(&prefixed, &token(Some("at+jwt"))).is_ok());
        assert_eq!(verify(&prefixed, &token(Some("JWT"))), Err(Refusal::Invalid));
    }

    /// A token of `header` over `claims`, signed with `key` in `algorithm` (whatever the header
    /// says: the header may name an algorithm jsonwebtoken does not know).
    fn sign_with_header(
        header: &serde_json::Value,
        claims: &serde_json::Value,
        key: &EncodingKey,
        algorithm: Algorithm,
    ) -> String {
        use base64::Engine as _;
        let encode =
            |value: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
        let message = format!("{}.{}", encode(header), encode(claims));
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), key, algorithm).unwrap();
        format!("{message}.{signature}")
    }

    fn header_of(token: &str) -> TokenHeader {
        TokenHeader::parse(token).unwrap()
    }

    /// Regression (issue 57.12): a token whose header says `alg: Ed25519` (RFC 9864) was refused
    /// 401 `invalid_token`: jsonwebtoken 10 knows only `EdDSA`.
    #[test]
    fn an_ed25519_token_verifies_under_either_name_with_an_ed25519_key_only() {
        let provider = provider();
        let ed = EncodingKey::from_ed_pem(&private("ed25519_private.pem")).unwrap();
        for name in ["Ed25519", "EdDSA"] {
            let token =
                sign_with_header(&json!({"alg": name, "kid": "ed", "typ": "JWT"}), &claims(), &ed, Algorithm::EdDSA);
            let mapped = provider.verify(&token, &header_of(&token)).unwrap();
            assert_eq!(mapped.user, "alice", "{name}");
        }
        // The new name is no way around pinning: under another key's id it is refused.
        for other in ["rs", "ps", "es"] {
            let token = sign_with_header(&json!({"alg": "Ed25519", "kid": other}), &claims(), &ed, Algorithm::EdDSA);
            assert_eq!(provider.verify(&token, &header_of(&token)), Err(Refusal::Invalid), "{other}");
        }
        // Nor is a look-alike name.
        for name in ["ed25519", "Ed448", "EDDSA"] {
            let token = sign_with_header(&json!({"alg": name, "kid": "ed"}), &claims(), &ed, Algorithm::EdDSA);
            assert_eq!(provider.verify(&token, &header_of(&token)), Err(Refusal::Invalid), "{name}");
        }
    }

    /// The fixture JWKS with `kid`'s `alg` removed.
    fn jwks_without_alg(kid: &str) -> Vec<u8> {
        let mut set: serde_json::Value = serde_json::from_slice(&fixture_jwks()).unwrap();
        for key in set["keys"].as_array_mut().unwrap() {
            if key["kid"] == kid {
                key.as_object_mut().unwrap().remove("alg");
            }
        }
        set.to_string().into_bytes()
    }

    /// Regression (issue 57.13): a provider whose RSA keys carry no `alg` and which signs PS256
    /// had every token refused, and nothing said why.
    #[test]
    fn an_rsa_key_without_alg_verifies_ps256_when_the_algorithms_admit_it() {
        let provider = provider();
        provider.install(&jwks_without_alg("ps")).unwrap();
        assert!(verify(&provider, &sign(Algorithm::PS256, "ps", &claims())).is_ok());
        // The same key material signing RS256: admitted too, by the default list.
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("ps".into());
        let rs =
            encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("ps256_private.pem")).unwrap()).unwrap();
        assert!(verify(&provider, &rs).is_ok());
        // A list naming only RS256 pins such keys to it.
        let mut settings = Settings::defaults().auth;
        settings.oidc.issuer = ISSUER.into();
        settings.oidc.audience = "warrant".into();
        settings.oidc.algorithms = vec!["RS256".into()];
        let pinned = Provider::new(&settings).unwrap();
        pinned.install(&jwks_without_alg("ps")).unwrap();
        assert!(verify(&pinned, &rs).is_ok());
        assert_eq!(verify(&pinned, &sign(Algorithm::PS256, "ps", &claims())), Err(Refusal::Invalid));
    }

    /// Regression (issue 57.13): a refused provider token left no log line naming why. One line
    /// per reason per interval names the check, the key id and the algorithms; never the token.
    #[test]
    fn a_refused_token_is_logged_with_its_reason_at_most_once_per_interval() {
        let provider = provider();
        let unknown = sign(Algorithm::ES256, "no-such-key", &claims());
        let mut header = Header::new(Algorithm::PS256);
        header.kid = Some("rs".into());
        let pss =
            encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("../test_rs256_private.pem")).unwrap())
                .unwrap();
        let ((), logs) = refusals::tests::captured_logs(|| {
            for _ in 0..3 {
                assert_eq!(verify(&provider, &unknown), Err(Refusal::UnknownKey));
            }
            assert_eq!(verify(&provider, &pss), Err(Refusal::Invalid));
        });
        let lines: Vec<&str> = logs.lines().filter(|line| line.contains("provider token was refused")).collect();
        assert_eq!(lines.len(), 2, "{logs}");
        assert!(
            lines[0].contains("INFO") && lines[0].contains("key not held") && lines[0].contains("no-such-key"),
            "{logs}"
        );
        assert!(lines[1].contains("algorithm not accepted by the key") && lines[1].contains("PS256"), "{logs}");
        assert!(lines[1].contains("RS256"), "the key's own algorithm is named: {logs}");
        for token in [&unknown, &pss] {
            for part in token.split('.') {
                assert!(!logs.contains(part), "a token part reached the log: {logs}");
            }
        }
    }

    #[test]
    fn hs256_signed_with_the_public_key_and_none_are_refused() {
        let provider = provider();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("rs".into());
        for secret in [fixture_jwks(), private("../test_rs256_public.pem")] {
            let confused = encode(&header, &claims(), &EncodingKey::from_secret(&secret)).unwrap();
            assert_eq!(verify(&provider, &confused), Err(Refusal::Invalid));
        }
    }

    #[test]
    fn issuer_audience_expiry_and_mapped_claims_are_required() {
        let provider = provider();
        let with = |field: &str, value: serde_json::Value| {
            let mut claims = claims();
            if value.is_null() {
                claims.as_object_mut().unwrap().remove(field);
            } else {
                claims[field] = value;
            }
            sign(Algorithm::ES256, "es", &claims)
        };
        assert_eq!(verify(&provider, &with("iss", json!("https://evil.example.com"))), Err(Refusal::Invalid));
        assert_eq!(verify(&provider, &with("iss", serde_json::Value::Null)), Err(Refusal::Invalid));
        assert_eq!(verify(&provider, &with("aud", json!("other"))), Err(Refusal::Invalid));
        assert_eq!(verify(&provider, &with("aud", serde_json::Value::Null)), Err(Refusal::Invalid));
        assert!(verify(&provider, &with("aud", json!(["other", "warrant"]))).is_ok());
        assert_eq!(verify(&provider, &with("exp", json!(now() - 10))), Err(Refusal::Expired));
        assert_eq!(verify(&provider, &with("exp", serde_json::Value::Null)), Err(Refusal::Invalid));
        assert_eq!(verify(&provider, &with("nbf", json!(now() + 600))), Err(Refusal::Invalid));
        let missing = verify(&provider, &with("tenant", serde_json::Value::Null)).unwrap_err();
        assert_eq!(missing.code(), "missing_claim");
        assert_eq!(verify(&provider, &sign(Algorithm::ES256, "nope", &claims())), Err(Refusal::UnknownKey));
    }

    #[test]
    fn no_key_is_usable_before_a_fetch_or_after_the_maximum_age() {
        let mut settings = Settings::defaults().auth;
        settings.oidc.issuer = ISSUER.into();
        settings.oidc.audience = "warrant".into();
        let fresh = Provider::new(&settings).unwrap();
        let token = sign(Algorithm::ES256, "es", &claims());
        assert_eq!(verify(&fresh, &token), Err(Refusal::KeysUnavailable));
        assert!(!fresh.status().usable);
        fresh.install(&fixture_jwks()).unwrap();
        assert!(verify(&fresh, &token).is_ok());
        // The last fetch long ago: aged out.
        let held = fresh.held.load_full();
        let old = Instant::now().checked_sub(Duration::from_secs(settings.oidc.max_key_age_seconds + 1));
        fresh.held.store(Arc::new(Held {
            set: keys::parse(&fixture_jwks(), &fresh.allowed).unwrap().0,
            fetched_at: old,
            skipped: Vec::new(),
        }));
        assert_eq!(verify(&fresh, &token), Err(Refusal::KeysUnavailable));
        assert!(!fresh.status().usable);
        drop(held);
    }

    /// Regression (issue 57.15): a key skipped at fetch was named at debug level only, so a
    /// provider whose keys were all unusable but one looked healthy in the log.
    #[test]
    fn keys_skipped_at_fetch_are_named_with_their_reason_when_the_set_changes() {
        let provider = provider();
        let mut set: serde_json::Value = serde_json::from_slice(&fixture_jwks()).unwrap();
        set["keys"].as_array_mut().unwrap().push(json!({"kty": "oct", "kid": "shared-secret", "k": "c2VjcmV0"}));
        let body = set.to_string().into_bytes();
        let (_, logs) = refusals::tests::captured_logs(|| provider.install(&body).unwrap());
        let line = logs.lines().find(|line| line.contains("shared-secret")).unwrap_or_else(|| panic!("{logs}"));
        assert!(line.contains(" WARN ") && line.contains("symmetric key"), "{line}");
        // The same set again: nothing new to say above debug.
        let (_, again) = refusals::tests::captured_logs(|| provider.install(&body).unwrap());
        assert!(!again.lines().any(|line| line.contains("shared-secret") && !line.contains("DEBUG")), "{again}");
    }

    #[test]
    fn a_jwks_without_usable_keys_keeps_the_keys_held() {
        let provider = provider();
        let error = provider.install(br#"{"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}"#).unwrap_err();
        assert_eq!(error.code(), "no_usable_keys");
        assert!(verify(&provider, &sign(Algorithm::EdDSA, "ed", &claims())).is_ok());
    }
}
