//! Settings of tokens from a company's identity provider: `[auth.oidc]` (where its keys are,
//! which issuer and audience its tokens must name, how the keys are refreshed) and
//! `[auth.claims]` (where the tenant, user, groups and roles are in its tokens).
//!
//! Invariant kept by this module: every problem found names its key (`auth.oidc.…`,
//! `auth.claims.…`); the defaults keep OpenID Connect off and read warrant's own claim names.

use std::collections::BTreeMap;

use super::*;
use crate::domain::Role;

/// The signature algorithm names `auth.oidc.algorithms` accepts. A key naming its `alg`
/// verifies that one; an RSA key without `alg` verifies each RSA algorithm listed. `Ed25519`
/// (RFC 9864) and `EdDSA` name one algorithm: either admits Ed25519 keys, and tokens naming
/// either.
pub const OIDC_ALGORITHMS: &[&str] = &["RS256", "PS256", "PS384", "PS512", "ES256", "EdDSA", "Ed25519"];

/// `auth.oidc.algorithms` by default.
const DEFAULT_OIDC_ALGORITHMS: &[&str] = &["RS256", "PS256", "ES256", "EdDSA"];

/// `[auth.oidc]`: verify tokens with the keys an OpenID provider publishes (off while both
/// `issuer` and `jwks_url` are empty).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OidcSettings {
    /// The provider's issuer URL, exactly as its tokens carry it in `iss` (required when OIDC is
    /// on). Its keys are found by discovery at `{issuer}/.well-known/openid-configuration`
    /// unless `jwks_url` is set.
    pub issuer: String,
    /// The provider's JWKS URL, to skip discovery. Empty: from discovery.
    pub jwks_url: String,
    /// The `aud` a provider token must carry (required when OIDC is on): the client id or API
    /// identifier the provider puts in tokens meant for warrant.
    pub audience: String,
    /// Signature algorithms accepted from provider keys (a subset of RS256, PS256, PS384, PS512,
    /// ES256, EdDSA, Ed25519, the last two one algorithm under two names); a published key of
    /// another algorithm is ignored, and an RSA key without `alg` verifies each RSA algorithm
    /// listed (list one to pin such keys to it).
    pub algorithms: Vec<String>,
    /// Soonest refresh of the keys after a fetch, seconds (a `Cache-Control: max-age` below it is
    /// raised to it); also the retry delay after a failed fetch.
    pub min_refresh_seconds: u64,
    /// Latest refresh of the keys after a fetch, seconds (a longer or missing `max-age` is cut
    /// to it).
    pub max_refresh_seconds: u64,
    /// A token naming a key (`kid`) that is not held triggers one fetch of the keys, at most once
    /// in this many seconds whatever the number of such tokens; requests that miss while a
    /// fetch runs wait for that fetch.
    pub unknown_kid_refetch_seconds: u64,
    /// Keys are used at most this long after the last successful fetch (the provider being
    /// unreachable meanwhile); then every provider token is refused until a fetch succeeds.
    /// Must exceed `max_refresh_seconds`.
    pub max_key_age_seconds: u64,
    /// Time limit of one request to the provider, milliseconds.
    pub fetch_timeout_ms: u64,
    /// The `typ` a provider token's header must carry, compared without case and with or without
    /// `application/` (RFC 7515 §4.1.9): `"at+jwt"` admits only access tokens of the RFC 9068
    /// profile, so an ID token whose `aud` happens to be `audience` is refused. Empty (the
    /// default): any `typ`, or none.
    pub require_typ: String,
}

impl Default for OidcSettings {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            jwks_url: String::new(),
            audience: String::new(),
            algorithms: DEFAULT_OIDC_ALGORITHMS.iter().map(|name| (*name).to_owned()).collect(),
            min_refresh_seconds: 60,
            max_refresh_seconds: 3600,
            unknown_kid_refetch_seconds: 30,
            max_key_age_seconds: 86_400,
            fetch_timeout_ms: 5000,
            require_typ: String::new(),
        }
    }
}

impl OidcSettings {
    /// Whether provider tokens are verified (an issuer or a JWKS URL is set).
    pub fn enabled(&self) -> bool {
        !self.issuer.is_empty() || !self.jwks_url.is_empty()
    }
}

/// `[auth.claims]`: where the principal is in a provider token. A path names a claim, or a
/// claim inside an object claim with dots (`realm_access.roles`); a claim whose own name holds
/// dots (`https://example.com/tenant`) is found by that name first. Applies to tokens verified
/// with `[auth.oidc]`'s keys; tokens of the local keys keep warrant's own names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClaimSettings {
    /// Path of the user id (a non-empty string).
    pub user: String,
    /// Path of the tenant (a non-empty string). Ignored when `fixed_tenant` is set.
    pub tenant: String,
    /// The tenant of every provider token (single-tenant deployments). Empty: from `tenant`.
    pub fixed_tenant: String,
    /// Path of the groups (an array of strings, or one string). Empty: no groups are read.
    pub groups: String,
    /// Only groups starting with this are kept, without it (`"/warrant/"` turns Keycloak's
    /// `/warrant/engineering` into `engineering` and drops `/sales`). Empty: every group.
    pub groups_prefix: String,
    /// Path of the roles (an array of strings, or one string). Empty: no roles are read.
    pub roles: String,
    /// Warrant role → the provider's names that grant it (`admin = ["warrant-admin"]`). Empty:
    /// the provider's role names are warrant's own (`admin`, `operator`, `replica`). Not empty:
    /// only the names listed grant anything.
    pub role_map: BTreeMap<String, Vec<String>>,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        Self {
            user: "sub".into(),
            tenant: "tenant".into(),
            fixed_tenant: String::new(),
            groups: "groups".into(),
            groups_prefix: String::new(),
            roles: "roles".into(),
            role_map: BTreeMap::new(),
        }
    }
}

/// The roles this server knows, named in error messages.
const ROLE_NAMES: &[Role] = &[Role::Admin, Role::Reviewer, Role::Operator, Role::Replica];

/// Longest accepted claim path.
const MAX_PATH_CHARS: usize = 256;

impl AuthSettings {
    /// The problems of `[auth.oidc]` and `[auth.claims]`, each naming its key.
    pub(super) fn oidc_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let oidc = &self.oidc;
        if !oidc.enabled() {
            if self.claims != ClaimSettings::default() {
                problems.push(
                    "auth.claims applies to tokens verified with the provider's keys: set auth.oidc.issuer, or remove \
                     auth.claims"
                        .to_owned(),
                );
            }
            return problems;
        }
        let mut check = |ok: bool, message: String| {
            if !ok {
                problems.push(message);
            }
        };
        check(
            !oidc.issuer.trim().is_empty(),
            "auth.oidc.issuer must be set when auth.oidc is on (a provider token's iss must equal it)".into(),
        );
        for (key, url) in [("auth.oidc.issuer", &oidc.issuer), ("auth.oidc.jwks_url", &oidc.jwks_url)] {
            check(
                url.is_empty() || is_secure_url(url),
                format!("{key} must be an https:// url (http:// only to a loopback host), got {url:?}"),
            );
        }
        check(
            !oidc.audience.trim().is_empty(),
            "auth.oidc.audience must be set when auth.oidc is on (a provider token's aud must name it)".into(),
        );
        check(
            !oidc.algorithms.is_empty() && oidc.algorithms.iter().all(|name| OIDC_ALGORITHMS.contains(&name.as_str())),
            format!("auth.oidc.algorithms must list some of {}", OIDC_ALGORITHMS.join(", ")),
        );
        check(
            (1..=oidc.max_refresh_seconds).contains(&oidc.min_refresh_seconds),
            "auth.oidc.min_refresh_seconds must be in 1..=max_refresh_seconds".into(),
        );
        check(oidc.max_refresh_seconds <= 604_800, "auth.oidc.max_refresh_seconds must be at most 604800".into());
        check(
            (1..=86_400).contains(&oidc.unknown_kid_refetch_seconds),
            "auth.oidc.unknown_kid_refetch_seconds must be in 1..=86400".into(),
        );
        check(
            oidc.max_key_age_seconds > oidc.max_refresh_seconds && oidc.max_key_age_seconds <= 2_592_000,
            "auth.oidc.max_key_age_seconds must be above max_refresh_seconds (keys would age out between refreshes) \
             and at most 2592000"
                .into(),
        );
        check(
            (100..=60_000).contains(&oidc.fetch_timeout_ms),
            "auth.oidc.fetch_timeout_ms must be in 100..=60000".into(),
        );
        check(
            oidc.require_typ.len() <= 64 && oidc.require_typ.bytes().all(|byte| byte.is_ascii_graphic()),
            "auth.oidc.require_typ must be a media type without spaces, at most 64 characters (e.g. \"at+jwt\"), or \
             empty"
                .into(),
        );
        let claims = &self.claims;
        for (key, path) in [
            ("auth.claims.user", &claims.user),
            ("auth.claims.tenant", &claims.tenant),
            ("auth.claims.groups", &claims.groups),
            ("auth.claims.roles", &claims.roles),
        ] {
            check(
                path.trim() == path && path.chars().count() <= MAX_PATH_CHARS,
                format!("{key} must be a claim path without surrounding spaces, at most {MAX_PATH_CHARS} characters"),
            );
            check(
                !(path.starts_with('.') || path.ends_with('.') || path.contains("..")),
                format!("{key} must not start or end with a dot, nor hold two dots in a row"),
            );
        }
        check(!claims.user.is_empty(), "auth.claims.user must name the claim holding the user id".into());
        check(
            !claims.tenant.is_empty() || !claims.fixed_tenant.trim().is_empty(),
            "auth.claims.tenant must name the claim holding the tenant, or auth.claims.fixed_tenant must be set".into(),
        );
        check(
            claims.fixed_tenant.trim() == claims.fixed_tenant,
            "auth.claims.fixed_tenant must not have surrounding spaces".into(),
        );
        for (role, names) in &claims.role_map {
            check(
                Role::parse(role).is_some(),
                format!(
                    "auth.claims.role_map.{role} is not a role of this server ({})",
                    ROLE_NAMES.iter().map(Role::as_str).collect::<Vec<_>>().join(", ")
                ),
            );
            check(
                !names.is_empty() && names.iter().all(|name| !name.trim().is_empty()),
                format!("auth.claims.role_map.{role} must list at least one non-blank provider role name"),
            );
        }
        check(
            !claims.role_map.is_empty() || claims.roles.is_empty() || claims.roles == "roles",
            "auth.claims.role_map must map warrant's roles from the provider's names when auth.claims.roles is read \
             from a claim of the provider's own (e.g. role_map.admin = [\"warrant-admin\"])"
                .into(),
        );
        problems
    }
}

/// Whether `url` is `https://…`, or `http://` to a loopback host (a provider on this machine).
pub fn is_secure_url(url: &str) -> bool {
    if let Some(rest) = url.strip_prefix("https://") {
        return !rest.is_empty() && !rest.starts_with('/');
    }
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    !authority.contains('@') && is_loopback_bind(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> ConfigResult<Settings> {
        Settings::from_toml(
            include_str!("../../config/default.toml"),
            pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        )
    }

    const ON: &[(&str, &str)] = &[
        ("WARRANT__AUTH__OIDC__ISSUER", "https://idp.example.com/realms/acme"),
        ("WARRANT__AUTH__OIDC__AUDIENCE", "warrant"),
    ];

    fn on_with(pairs: &[(&str, &str)]) -> ConfigResult<Settings> {
        settings(&[ON, pairs].concat())
    }

    #[test]
    fn oidc_is_off_by_default_and_the_claims_keep_warrants_names() {
        let auth = Settings::defaults().auth;
        assert!(!auth.oidc.enabled());
        assert_eq!(
            (auth.claims.user.as_str(), auth.claims.tenant.as_str(), auth.claims.groups.as_str()),
            ("sub", "tenant", "groups")
        );
        assert_eq!(auth.claims.roles, "roles");
        let settings = on_with(&[]).expect("issuer and audience are enough");
        assert!(settings.auth.oidc.enabled());
    }

    #[test]
    fn each_oidc_problem_names_its_key() {
        for (pairs, key) in [
            (
                &[
                    ("WARRANT__AUTH__OIDC__ISSUER", "\"\""),
                    ("WARRANT__AUTH__OIDC__JWKS_URL", "https://idp.example.com/jwks"),
                ][..],
                "auth.oidc.issuer",
            ),
            (&[("WARRANT__AUTH__OIDC__ISSUER", "http://idp.example.com")][..], "auth.oidc.issuer"),
            (&[("WARRANT__AUTH__OIDC__JWKS_URL", "http://10.0.0.1/jwks")][..], "auth.oidc.jwks_url"),
            (&[("WARRANT__AUTH__OIDC__AUDIENCE", "")][..], "auth.oidc.audience"),
            (&[("WARRANT__AUTH__OIDC__ALGORITHMS", r#"["HS256"]"#)][..], "auth.oidc.algorithms"),
            (&[("WARRANT__AUTH__OIDC__MIN_REFRESH_SECONDS", "0")][..], "auth.oidc.min_refresh_seconds"),
            (&[("WARRANT__AUTH__OIDC__MAX_KEY_AGE_SECONDS", "60")][..], "auth.oidc.max_key_age_seconds"),
            (&[("WARRANT__AUTH__OIDC__UNKNOWN_KID_REFETCH_SECONDS", "0")][..], "auth.oidc.unknown_kid_refetch_seconds"),
            (&[("WARRANT__AUTH__OIDC__FETCH_TIMEOUT_MS", "1")][..], "auth.oidc.fetch_timeout_ms"),
            (&[("WARRANT__AUTH__OIDC__REQUIRE_TYP", "at+jwt ")][..], "auth.oidc.require_typ"),
            (&[("WARRANT__AUTH__CLAIMS__USER", "")][..], "auth.claims.user"),
            (&[("WARRANT__AUTH__CLAIMS__TENANT", "")][..], "auth.claims.tenant"),
            (&[("WARRANT__AUTH__CLAIMS__GROUPS", ".groups")][..], "auth.claims.groups"),
            (&[("WARRANT__AUTH__CLAIMS__ROLE_MAP__SUPERUSER", r#"["root"]"#)][..], "auth.claims.role_map.superuser"),
            (&[("WARRANT__AUTH__CLAIMS__ROLE_MAP__ADMIN", "[]")][..], "auth.claims.role_map.admin"),
            (&[("WARRANT__AUTH__CLAIMS__ROLES", "realm_access.roles")][..], "auth.claims.role_map"),
            (&[("WARRANT__AUTH__OIDC__ALGORITM", r#"["RS256"]"#)][..], "algoritm"),
        ] {
            let error = on_with(pairs).unwrap_err().to_string();
            assert!(error.contains(key), "{pairs:?}: {error}");
        }
    }

    /// Regression (issue 57.12): RFC 9864's name for EdDSA over Ed25519 was refused.
    #[test]
    fn ed25519_is_a_name_of_eddsa_in_the_algorithms() {
        let settings = on_with(&[("WARRANT__AUTH__OIDC__ALGORITHMS", r#"["Ed25519"]"#)]).expect("ed25519 accepted");
        assert_eq!(settings.auth.oidc.algorithms, vec!["Ed25519".to_owned()]);
        assert_eq!(Settings::defaults().auth.oidc.algorithms, ["RS256", "PS256", "ES256", "EdDSA"]);
    }

    #[test]
    fn hs256_is_off_beside_a_provider_unless_allowed() {
        let mut auth = on_with(&[]).unwrap().auth;
        assert!(!auth.hs256_enabled(), "the demo secret stays unused beside a provider");
        auth.allow_hs256_with_rs256 = true;
        assert!(auth.hs256_enabled());
    }

    #[test]
    fn claims_without_oidc_are_refused_naming_the_section() {
        let error = settings(&[("WARRANT__AUTH__CLAIMS__TENANT", "org_id")]).unwrap_err().to_string();
        assert!(error.contains("auth.claims"), "{error}");
    }

    #[test]
    fn keycloak_and_single_tenant_configurations_are_accepted() {
        let keycloak = on_with(&[
            ("WARRANT__AUTH__CLAIMS__TENANT", "org_id"),
            ("WARRANT__AUTH__CLAIMS__GROUPS", "groups"),
            ("WARRANT__AUTH__CLAIMS__GROUPS_PREFIX", "/warrant/"),
            ("WARRANT__AUTH__CLAIMS__ROLES", "realm_access.roles"),
            ("WARRANT__AUTH__CLAIMS__ROLE_MAP__ADMIN", r#"["warrant-admin"]"#),
        ])
        .expect("keycloak");
        assert_eq!(keycloak.auth.claims.role_map["admin"], vec!["warrant-admin".to_owned()]);
        let single = on_with(&[("WARRANT__AUTH__CLAIMS__TENANT", ""), ("WARRANT__AUTH__CLAIMS__FIXED_TENANT", "acme")]);
        assert_eq!(single.expect("fixed tenant").auth.claims.fixed_tenant, "acme");
        on_with(&[
            ("WARRANT__AUTH__OIDC__ISSUER", "http://127.0.0.1:9400"),
            ("WARRANT__AUTH__OIDC__JWKS_URL", "http://localhost:9400/jwks"),
        ])
        .expect("http to loopback");
    }

    /// The worked configurations of README.md ("Tokens from your identity provider") load.
    #[test]
    fn the_readme_configurations_are_valid() {
        let readme = include_str!("../../README.md");
        let section = readme.split("## Tokens from your identity provider").nth(1).expect("the README section");
        let section = section.split("\n## ").next().unwrap();
        let examples: Vec<&str> =
            section.split("```toml\n").skip(1).map(|block| block.split("```").next().unwrap()).collect();
        assert_eq!(examples.len(), 2);
        for example in examples {
            let mut config: toml::Value = toml::from_str(include_str!("../../config/default.toml")).unwrap();
            merge(&mut config, toml::from_str(example).unwrap_or_else(|error| panic!("{error}\n{example}")));
            let settings = Settings::from_toml(&toml::to_string(&config).unwrap(), std::iter::empty())
                .unwrap_or_else(|error| panic!("{error}\n{example}"));
            assert!(settings.auth.oidc.enabled() && !settings.auth.claims.role_map.is_empty());
        }
    }

    /// `overlay`'s keys over `base`, tables merged key by key.
    fn merge(base: &mut toml::Value, overlay: toml::Value) {
        match (base, overlay) {
            (toml::Value::Table(base), toml::Value::Table(overlay)) => {
                for (key, value) in overlay {
                    match base.get_mut(&key) {
                        Some(existing) => merge(existing, value),
                        None => {
                            base.insert(key, value);
                        }
                    }
                }
            }
            (base, overlay) => *base = overlay,
        }
    }

    #[test]
    fn only_https_or_loopback_http_urls_are_secure() {
        for good in
            ["https://idp.example.com", "http://127.0.0.1:8080/realms/x", "http://localhost", "http://[::1]:9/x"]
        {
            assert!(is_secure_url(good), "{good}");
        }
        for bad in [
            "http://idp.example.com",
            "ftp://x",
            "https://",
            "http://127.0.0.1.evil.com/",
            "http://user@127.0.0.1@evil/",
        ] {
            assert!(!is_secure_url(bad), "{bad}");
        }
    }
}
