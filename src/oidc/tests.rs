//! Unit tests of the provider: discovery, key rotation and every verification path.

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
        encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("../test_rs256_private.pem")).unwrap()).unwrap();
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
    let encode = |value: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string());
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
    let rs = encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("ps256_private.pem")).unwrap()).unwrap();
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
        encode(&header, &claims(), &EncodingKey::from_rsa_pem(&private("../test_rs256_private.pem")).unwrap()).unwrap();
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
