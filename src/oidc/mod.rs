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
mod tests;
