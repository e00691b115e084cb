//! Authentication: verified JWTs become a [`Principal`]: HS256 with a shared secret, RS256 with
//! a PEM public key, and tokens of a company's identity provider verified with the keys it
//! publishes (`[auth.oidc]`, [`crate::oidc`]). Handlers take [`Authenticated`] or [`Admin`]
//! extractors, so no handler can run without a verified principal, and nothing in a request
//! body can name one.
//!
//! Invariants: each key verifies only its own algorithm (`none` and HS/RS confusion fail); with
//! an RS256 key or a provider configured, HS256 is off unless `auth.allow_hs256_with_rs256` turns
//! it on, so the token's own `alg` header cannot pick a weaker key; a token carrying a `kid` goes
//! to the provider's keys when `[auth.oidc]` is on (providers always name their key), any other
//! to the local keys; `exp` is required and `nbf` is checked (both with `auth.leeway_seconds`);
//! `iss` and `aud` are required and checked when configured (always for provider tokens), `aud`
//! as a string or an array of strings (RFC 7519 §4.1.3); the claims of provider tokens are read
//! through `[auth.claims]`, those of local tokens by warrant's own names; a token never reaches a
//! log.

use std::collections::BTreeSet;
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures::future::LocalBoxFuture;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use serde::{Deserialize, Serialize};

use crate::config::AuthSettings;
use crate::domain::{Principal, Role};
use crate::oidc::{MappedClaims, Provider, TokenHeader};

use super::AppState;
use super::error::ApiError;

/// Claims of a warrant token, as `warrant token` and the tests mint them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    /// Principal id.
    pub sub: String,
    /// Tenant.
    pub tenant: String,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Roles (`admin`).
    #[serde(default)]
    pub roles: Vec<String>,
    /// Expiry (seconds since the epoch).
    pub exp: u64,
    /// Issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
}

impl Claims {
    /// Claims `auth` accepts (its issuer and audience, when set) for `sub` of `tenant` with
    /// `groups` and `roles`, expiring `ttl_seconds` from now.
    pub fn for_settings(
        auth: &AuthSettings,
        (tenant, sub): (&str, &str),
        groups: Vec<String>,
        roles: &[Role],
        ttl_seconds: u64,
    ) -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs());
        Self {
            sub: sub.to_owned(),
            tenant: tenant.to_owned(),
            groups,
            roles: roles.iter().map(|role| role.as_str().to_owned()).collect(),
            exp: now.saturating_add(ttl_seconds),
            iss: (!auth.issuer.is_empty()).then(|| auth.issuer.clone()),
            aud: (!auth.audience.is_empty()).then(|| auth.audience.clone()),
        }
    }
}

/// The claims a verified token must carry to become a principal. `exp`, `nbf`, `iss` and `aud`
/// are checked by `jsonwebtoken` on the raw payload, so `aud` may be a string or an array here.
#[derive(Deserialize)]
struct PrincipalClaims {
    sub: String,
    tenant: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    roles: Vec<String>,
}

/// Errors of token handling outside requests (configuration, minting).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The RS256 key file cannot be read or parsed.
    #[error("cannot load rs256 public key {path}: {reason}")]
    Key {
        /// File.
        path: String,
        /// Why.
        reason: String,
    },
    /// No verification key is configured.
    #[error("no token verification key configured (auth.hs256_secret, auth.rs256_public_key_file or auth.oidc)")]
    NoKey,
    /// The identity provider's settings are unusable.
    #[error("auth.oidc: {0}")]
    Oidc(#[from] crate::oidc::OidcError),
    /// Signing failed.
    #[error("cannot sign token: {0}")]
    Sign(String),
}

/// Verifies tokens with the configured keys.
pub struct Authenticator {
    /// `auth.replica_subjects`: the only subjects for which role `replica` counts.
    replica_subjects: BTreeSet<String>,
    hs256: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    validation_hs: Validation,
    validation_rs: Validation,
    /// The identity provider (`[auth.oidc]`), when configured.
    oidc: Option<Arc<Provider>>,
}

impl Authenticator {
    /// Builds the verifier from settings.
    pub fn from_settings(settings: &AuthSettings) -> Result<Self, AuthError> {
        let hs256 = settings.hs256_enabled().then(|| DecodingKey::from_secret(settings.hs256_secret.as_bytes()));
        if !settings.hs256_secret.is_empty() && hs256.is_none() {
            // Name what turned it off: an RS256 key, the provider, or both.
            let beside = match (!settings.rs256_public_key_file.is_empty(), settings.oidc.enabled()) {
                (true, true) => "auth.rs256_public_key_file and auth.oidc are set",
                (true, false) => "auth.rs256_public_key_file is set",
                (false, _) => "auth.oidc is on",
            };
            tracing::warn!("auth.hs256_secret is ignored: {beside} and auth.allow_hs256_with_rs256 is false");
        }
        let rs256 = if settings.rs256_public_key_file.is_empty() {
            None
        } else {
            let path = &settings.rs256_public_key_file;
            let pem = std::fs::read(path)
                .map_err(|error| AuthError::Key { path: path.clone(), reason: error.to_string() })?;
            Some(
                DecodingKey::from_rsa_pem(&pem)
                    .map_err(|error| AuthError::Key { path: path.clone(), reason: error.to_string() })?,
            )
        };
        let oidc = if settings.oidc.enabled() { Some(Provider::new(settings)?) } else { None };
        if hs256.is_none() && rs256.is_none() && oidc.is_none() {
            return Err(AuthError::NoKey);
        }
        let validation = |algorithm| {
            let mut validation = Validation::new(algorithm);
            validation.leeway = settings.leeway_seconds;
            validation.validate_nbf = true;
            validation.set_required_spec_claims(&["exp"]);
            if settings.issuer.is_empty() {
                validation.iss = None;
            } else {
                validation.set_issuer(&[&settings.issuer]);
                validation.required_spec_claims.insert("iss".into());
            }
            if settings.audience.is_empty() {
                validation.validate_aud = false;
            } else {
                validation.set_audience(&[&settings.audience]);
                validation.required_spec_claims.insert("aud".into());
            }
            validation
        };
        Ok(Self {
            replica_subjects: settings.replica_subjects.iter().cloned().collect(),
            hs256,
            rs256,
            validation_hs: validation(Algorithm::HS256),
            validation_rs: validation(Algorithm::RS256),
            oidc,
        })
    }

    /// The identity provider, when `[auth.oidc]` is configured.
    pub fn provider(&self) -> Option<&Arc<Provider>> {
        self.oidc.as_ref()
    }

    /// Verifies a bearer token and returns its principal; a provider token naming a key that is
    /// not held gets one rate-limited fetch of the provider's keys ([`Provider::refetch`]) before
    /// it is refused. What the extractors call.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, ApiError> {
        let header = TokenHeader::parse(token).ok_or_else(invalid)?;
        let Some(provider) = self.provider_of(&header) else { return self.verify_local(token, &header) };
        Ok(self.principal(provider.authenticate(token, &header).await?))
    }

    /// Verifies a bearer token with the keys held (never fetching) and returns its principal.
    pub fn verify(&self, token: &str) -> Result<Principal, ApiError> {
        let header = TokenHeader::parse(token).ok_or_else(invalid)?;
        match self.provider_of(&header) {
            Some(provider) => Ok(self.principal(provider.verify(token, &header)?)),
            None => self.verify_local(token, &header),
        }
    }

    /// The provider, for a token that names a key (`kid`) while `[auth.oidc]` is on.
    fn provider_of(&self, header: &TokenHeader) -> Option<&Arc<Provider>> {
        self.oidc.as_ref().filter(|_| header.kid.is_some())
    }

    /// Verifies a token of the local keys (HS256 secret, RS256 PEM), read by warrant's names.
    fn verify_local(&self, token: &str, header: &TokenHeader) -> Result<Principal, ApiError> {
        let (key, validation) = match header.alg.as_str() {
            "HS256" => (self.hs256.as_ref(), &self.validation_hs),
            "RS256" => (self.rs256.as_ref(), &self.validation_rs),
            _ => (None, &self.validation_hs),
        };
        let key = key.ok_or_else(invalid)?;
        let data = decode::<PrincipalClaims>(token, key, validation).map_err(|error| match error.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                ApiError::unauthorized("token_expired", "token has expired")
            }
            _ => invalid(),
        })?;
        let claims = data.claims;
        if claims.tenant.trim().is_empty() || claims.sub.trim().is_empty() {
            return Err(invalid());
        }
        // A role this server does not know grants nothing.
        let roles = claims.roles.iter().filter_map(|name| Role::parse(name)).collect::<BTreeSet<_>>();
        Ok(self.principal(MappedClaims {
            user: claims.sub,
            tenant: claims.tenant,
            groups: claims.groups.into_iter().collect(),
            roles,
        }))
    }

    /// The principal of verified claims: `replica` counts only for a configured replica subject.
    fn principal(&self, claims: MappedClaims) -> Principal {
        let MappedClaims { user, tenant, groups, mut roles } = claims;
        if roles.contains(&Role::Replica) && !self.replica_subjects.contains(&user) {
            roles.remove(&Role::Replica);
            metrics::counter!("warrant_replica_tokens_refused_total").increment(1);
            tracing::warn!(
                "a token with role replica names a subject outside auth.replica_subjects; the role is ignored"
            );
        }
        Principal { tenant, user, groups, roles }
    }
}

fn invalid() -> ApiError {
    ApiError::unauthorized("invalid_token", "token is invalid")
}

/// Mints an HS256 token (the `warrant token` command and tests).
pub fn mint_hs256(secret: &str, claims: &Claims) -> Result<String, AuthError> {
    encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret.as_bytes()))
        .map_err(|error| AuthError::Sign(error.to_string()))
}

/// The app state and the bearer token of a request.
fn bearer(request: &HttpRequest) -> Result<(web::Data<AppState>, String), ApiError> {
    let state = request.app_data::<web::Data<AppState>>().cloned().ok_or_else(invalid)?;
    let header = request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing_token", "authorization bearer token is required"))?;
    let value = header.to_str().map_err(|_| invalid())?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| ApiError::unauthorized("missing_token", "authorization bearer token is required"))?;
    Ok((state, token.trim().to_owned()))
}

/// The verified principal of a request (async: a provider token naming a key not held waits for
/// one rate-limited fetch of the provider's keys, without blocking the worker).
fn principal_of(request: &HttpRequest) -> LocalBoxFuture<'static, Result<Principal, ApiError>> {
    let bearer = bearer(request);
    Box::pin(async move {
        let (state, token) = bearer?;
        state.authenticator.authenticate(&token).await
    })
}

/// A verified caller.
pub struct Authenticated(pub Principal);

impl FromRequest for Authenticated {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let principal = principal_of(request);
        Box::pin(async move { principal.await.map(Authenticated) })
    }
}

/// A verified caller holding the `admin` role (403 otherwise). Acts only in its own tenant.
pub struct Admin(pub Principal);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let principal = principal_of(request);
        Box::pin(async move {
            let principal = principal.await?;
            if principal.has_role(Role::Admin) {
                Ok(Admin(principal))
            } else {
                Err(ApiError::forbidden("admin role required"))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(issuer: &str, audience: &str) -> AuthSettings {
        AuthSettings {
            hs256_secret: "unit-secret".into(),
            rs256_public_key_file: String::new(),
            allow_hs256_with_rs256: false,
            replica_subjects: vec!["replica-1".into()],
            issuer: issuer.into(),
            audience: audience.into(),
            leeway_seconds: 5,
            oidc: Default::default(),
            claims: Default::default(),
        }
    }

    fn claims(iss: Option<&str>, aud: Option<&str>, exp_offset: i64) -> Claims {
        let now = jsonwebtoken::get_current_timestamp() as i64;
        Claims {
            sub: "u".into(),
            tenant: "t".into(),
            groups: vec!["g".into()],
            roles: vec![],
            exp: (now + exp_offset) as u64,
            iss: iss.map(Into::into),
            aud: aud.map(Into::into),
        }
    }

    #[test]
    fn issuer_and_audience_are_enforced_when_configured() {
        let authenticator = Authenticator::from_settings(&settings("https://idp", "warrant")).unwrap();
        let good = mint_hs256("unit-secret", &claims(Some("https://idp"), Some("warrant"), 60)).unwrap();
        assert_eq!(authenticator.verify(&good).unwrap().tenant, "t");
        for (iss, aud) in [
            (None, Some("warrant")),
            (Some("https://idp"), None),
            (Some("other"), Some("warrant")),
            (Some("https://idp"), Some("other")),
        ] {
            let token = mint_hs256("unit-secret", &claims(iss, aud, 60)).unwrap();
            assert_eq!(authenticator.verify(&token).unwrap_err().code, "invalid_token", "{iss:?} {aud:?}");
        }
    }

    #[test]
    fn claims_for_settings_are_accepted_by_those_settings() {
        let auth = settings("https://idp", "warrant");
        let claims = Claims::for_settings(&auth, ("acme", "ops"), vec!["staff".into()], &[Role::Admin], 86_400);
        let now = jsonwebtoken::get_current_timestamp();
        assert!(claims.exp >= now + 86_399 && claims.exp <= now + 86_401, "{}", claims.exp);
        let principal =
            Authenticator::from_settings(&auth).unwrap().verify(&mint_hs256("unit-secret", &claims).unwrap()).unwrap();
        assert_eq!((principal.tenant.as_str(), principal.user.as_str()), ("acme", "ops"));
        assert!(principal.roles.contains(&Role::Admin) && principal.groups.contains("staff"));
    }

    #[test]
    fn leeway_tolerates_small_clock_skew_only() {
        let authenticator = Authenticator::from_settings(&settings("", "")).unwrap();
        let just_expired = mint_hs256("unit-secret", &claims(None, None, -2)).unwrap();
        assert!(authenticator.verify(&just_expired).is_ok());
        let expired = mint_hs256("unit-secret", &claims(None, None, -60)).unwrap();
        assert_eq!(authenticator.verify(&expired).unwrap_err().code, "token_expired");
    }

    fn encode_hs256(claims: &serde_json::Value) -> String {
        encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(b"unit-secret")).unwrap()
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth").join(name)
    }

    fn encode_rs256(claims: &serde_json::Value) -> String {
        let private = std::fs::read(fixture("test_rs256_private.pem")).unwrap();
        encode(&Header::new(Algorithm::RS256), claims, &EncodingKey::from_rsa_pem(&private).unwrap()).unwrap()
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    /// Regression: `nbf` was not checked, so a token minted for later worked at once.
    #[test]
    fn a_token_is_refused_before_its_not_before_time_beyond_the_leeway() {
        let authenticator = Authenticator::from_settings(&settings("", "")).unwrap();
        let claims = |nbf: u64| serde_json::json!({"sub": "u", "tenant": "t", "exp": now() + 3600, "nbf": nbf});
        let later = encode_hs256(&claims(now() + 600));
        assert_eq!(authenticator.verify(&later).unwrap_err().code, "invalid_token");
        let within_leeway = encode_hs256(&claims(now() + 2));
        assert!(authenticator.verify(&within_leeway).is_ok());
        let past = encode_hs256(&claims(now() - 60));
        assert!(authenticator.verify(&past).is_ok());
    }

    /// Regression: an `aud` array (RFC 7519 §4.1.3 allows one) was refused even when it named us.
    #[test]
    fn audience_may_be_a_string_or_an_array_of_strings() {
        let authenticator = Authenticator::from_settings(&settings("", "warrant")).unwrap();
        let claims =
            |aud: serde_json::Value| serde_json::json!({"sub": "u", "tenant": "t", "exp": now() + 60, "aud": aud});
        for good in
            [serde_json::json!("warrant"), serde_json::json!(["other", "warrant"]), serde_json::json!(["warrant"])]
        {
            assert!(authenticator.verify(&encode_hs256(&claims(good.clone()))).is_ok(), "{good}");
        }
        for bad in
            [serde_json::json!("other"), serde_json::json!(["other"]), serde_json::json!([]), serde_json::json!([1])]
        {
            assert_eq!(
                authenticator.verify(&encode_hs256(&claims(bad.clone()))).unwrap_err().code,
                "invalid_token",
                "{bad}"
            );
        }
    }

    /// Regression: with an RS256 key configured, the token's own `alg` header still let an HS256
    /// token (signed with the shared secret) in.
    #[test]
    fn hs256_is_off_when_an_rs256_key_is_configured() {
        let mut both = settings("", "");
        both.rs256_public_key_file = fixture("test_rs256_public.pem").display().to_string();
        let authenticator = Authenticator::from_settings(&both).unwrap();
        let claims = serde_json::json!({"sub": "u", "tenant": "t", "exp": now() + 60});
        assert_eq!(authenticator.verify(&encode_rs256(&claims)).unwrap().user, "u");
        assert_eq!(authenticator.verify(&encode_hs256(&claims)).unwrap_err().code, "invalid_token");
    }

    #[test]
    fn hs256_beside_rs256_only_when_explicitly_allowed() {
        let mut both = settings("", "");
        both.rs256_public_key_file = fixture("test_rs256_public.pem").display().to_string();
        both.allow_hs256_with_rs256 = true;
        let authenticator = Authenticator::from_settings(&both).unwrap();
        let claims = serde_json::json!({"sub": "u", "tenant": "t", "exp": now() + 60});
        assert_eq!(authenticator.verify(&encode_rs256(&claims)).unwrap().user, "u");
        assert_eq!(authenticator.verify(&encode_hs256(&claims)).unwrap().user, "u");
        // Still bound to the algorithm: the public key's bytes as an HS256 secret do not verify.
        let public = std::fs::read(fixture("test_rs256_public.pem")).unwrap();
        let confused = encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(&public)).unwrap();
        assert_eq!(authenticator.verify(&confused).unwrap_err().code, "invalid_token");
        // Only rs256 and a secret that is ignored beside it: still starts (rs256 verifies).
        both.allow_hs256_with_rs256 = false;
        both.hs256_secret = "unit-secret".into();
        assert!(Authenticator::from_settings(&both).is_ok());
    }

    /// Regression: role `replica` with any subject and tenant read every tenant's change feed.
    #[test]
    fn role_replica_counts_only_for_a_configured_replica_subject() {
        let authenticator = Authenticator::from_settings(&settings("", "")).unwrap();
        let token = |sub: &str, tenant: &str| {
            encode_hs256(
                &serde_json::json!({"sub": sub, "tenant": tenant, "roles": ["replica", "admin"], "exp": now() + 60}),
            )
        };
        assert!(authenticator.verify(&token("replica-1", "replication")).unwrap().has_role(Role::Replica));
        for (sub, tenant) in [("nobody", "globex"), ("replica-2", "replication"), ("Replica-1", "replication")] {
            let principal = authenticator.verify(&token(sub, tenant)).unwrap();
            assert!(!principal.has_role(Role::Replica), "{sub}");
            assert!(principal.has_role(Role::Admin), "other roles are kept");
        }
        let mut none = settings("", "");
        none.replica_subjects.clear();
        let authenticator = Authenticator::from_settings(&none).unwrap();
        assert!(!authenticator.verify(&token("replica-1", "replication")).unwrap().has_role(Role::Replica));
    }

    /// An authenticator of the provider `https://idp.example.com` holding the test keys
    /// (`fixtures/auth/oidc/jwks.json`), and claims it accepts.
    fn provider_authenticator() -> (Authenticator, serde_json::Value) {
        let mut auth = settings("", "");
        auth.hs256_secret.clear();
        auth.oidc.issuer = "https://idp.example.com".into();
        auth.oidc.audience = "warrant".into();
        let authenticator = Authenticator::from_settings(&auth).unwrap();
        let jwks = std::fs::read(fixture("oidc/jwks.json")).unwrap();
        authenticator.provider().unwrap().install(&jwks).unwrap();
        let claims = serde_json::json!({
            "sub": "u", "tenant": "t", "iss": "https://idp.example.com", "aud": "warrant", "exp": now() + 60
        });
        (authenticator, claims)
    }

    /// A token whose header is `header` as written, signed in `algorithm` with `key`.
    fn sign_raw(
        header: &serde_json::Value,
        claims: &serde_json::Value,
        key: &EncodingKey,
        algorithm: Algorithm,
    ) -> String {
        use base64::Engine as _;
        let encode =
            |value: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
        let message = format!("{}.{}", encode(header), encode(claims));
        format!("{message}.{}", jsonwebtoken::crypto::sign(message.as_bytes(), key, algorithm).unwrap())
    }

    /// Regression (issue 57.12): a provider token whose header says `alg: Ed25519` (RFC 9864)
    /// was refused before it reached the provider's keys: jsonwebtoken's header type knows
    /// only `EdDSA`.
    #[test]
    fn a_provider_token_naming_ed25519_reaches_the_providers_keys() {
        let (authenticator, claims) = provider_authenticator();
        let ed = EncodingKey::from_ed_pem(&std::fs::read(fixture("oidc/ed25519_private.pem")).unwrap()).unwrap();
        let token = sign_raw(&serde_json::json!({"alg": "Ed25519", "kid": "ed"}), &claims, &ed, Algorithm::EdDSA);
        assert_eq!(authenticator.verify(&token).unwrap().user, "u");
        // Without a kid it is a local token, and no local key verifies Ed25519.
        let local = sign_raw(&serde_json::json!({"alg": "Ed25519"}), &claims, &ed, Algorithm::EdDSA);
        assert_eq!(authenticator.verify(&local).unwrap_err().code, "invalid_token");
    }

    /// Regression (issue 57.15): with `[auth.oidc]` on and no RS256 key, start-up warned that
    /// `auth.rs256_public_key_file is set`.
    #[test]
    fn the_ignored_hs256_secret_warning_names_what_turned_it_off() {
        let mut beside_provider = settings("", "");
        beside_provider.oidc.issuer = "https://idp.example.com".into();
        beside_provider.oidc.audience = "warrant".into();
        let mut beside_rs256 = settings("", "");
        beside_rs256.rs256_public_key_file = fixture("test_rs256_public.pem").display().to_string();
        for (auth, named, not_named) in [
            (beside_provider, "auth.oidc", "rs256_public_key_file"),
            (beside_rs256, "auth.rs256_public_key_file", "auth.oidc"),
        ] {
            let (built, logs) = crate::oidc::refusals::tests::captured_logs(|| Authenticator::from_settings(&auth));
            assert!(built.is_ok());
            let line =
                logs.lines().find(|line| line.contains("hs256_secret is ignored")).unwrap_or_else(|| panic!("{logs}"));
            assert!(line.contains(named) && !line.contains(not_named), "{line}");
        }
    }

    #[test]
    fn no_key_configured_is_a_startup_error() {
        let mut none = settings("", "");
        none.hs256_secret.clear();
        assert!(matches!(Authenticator::from_settings(&none), Err(AuthError::NoKey)));
    }
}
