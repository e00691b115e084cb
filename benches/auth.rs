//! Criterion benchmarks of token verification per request, as the extractors run it
//! (`Authenticator::verify`: header, key lookup, signature, claim checks, principal): today's
//! RS256 PEM key beside the identity provider's path with its JWKS cached (the same RSA key
//! published as `rs`, so the two differ only in the path around the signature), and the
//! provider's other algorithms. Each iteration asserts the principal it got.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::json;
use warrant::config::Settings;
use warrant::http::auth::Authenticator;

const ISSUER: &str = "https://idp.example.com/realms/acme";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth").join(name)
}

fn key(name: &str, algorithm: Algorithm) -> EncodingKey {
    let pem = std::fs::read(fixture(name)).expect("test key");
    match algorithm {
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem),
        _ => EncodingKey::from_rsa_pem(&pem),
    }
    .expect("test key parses")
}

fn claims() -> serde_json::Value {
    json!({
        "sub": "alice", "tenant": "acme", "groups": ["everyone", "engineering"], "roles": ["admin"],
        "iss": ISSUER, "aud": "warrant", "exp": jsonwebtoken::get_current_timestamp() + 3600,
    })
}

fn verification(criterion: &mut Criterion) {
    let mut pem = Settings::defaults().auth;
    pem.hs256_secret.clear();
    pem.rs256_public_key_file = fixture("test_rs256_public.pem").display().to_string();
    pem.issuer = ISSUER.into();
    pem.audience = "warrant".into();
    let local = Authenticator::from_settings(&pem).expect("pem authenticator");
    let token = encode(&Header::new(Algorithm::RS256), &claims(), &key("test_rs256_private.pem", Algorithm::RS256))
        .expect("sign");
    criterion.bench_function("auth_verify_rs256_pem", |bencher| {
        bencher.iter(|| {
            let principal = local.verify(black_box(&token)).expect("verifies");
            assert_eq!(principal.user, "alice");
        })
    });

    let mut oidc = Settings::defaults().auth;
    oidc.hs256_secret.clear();
    oidc.oidc.issuer = ISSUER.into();
    oidc.oidc.audience = "warrant".into();
    let provider = Authenticator::from_settings(&oidc).expect("oidc authenticator");
    let jwks = std::fs::read(fixture("oidc/jwks.json")).expect("jwks");
    provider.provider().expect("provider").install(&jwks).expect("keys installed");
    for (name, algorithm, kid, private) in [
        ("auth_verify_oidc_jwks_rs256", Algorithm::RS256, "rs", "test_rs256_private.pem"),
        ("auth_verify_oidc_jwks_ps256", Algorithm::PS256, "ps", "oidc/ps256_private.pem"),
        ("auth_verify_oidc_jwks_es256", Algorithm::ES256, "es", "oidc/es256_private.pem"),
        ("auth_verify_oidc_jwks_eddsa", Algorithm::EdDSA, "ed", "oidc/ed25519_private.pem"),
    ] {
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.into());
        let token = encode(&header, &claims(), &key(private, algorithm)).expect("sign");
        criterion.bench_function(name, |bencher| {
            bencher.iter(|| {
                let principal = provider.verify(black_box(&token)).expect("verifies");
                assert_eq!(principal.tenant, "acme");
            })
        });
    }
}

criterion_group!(benches, verification);
criterion_main!(benches);
