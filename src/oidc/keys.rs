//! A provider's published keys (RFC 7517 JWKS) as verifying keys, each pinned to the algorithms
//! its own parameters allow.
//!
//! Invariants: the key decides what it verifies (`kty`, `crv`, `alg`, the last read as written:
//! RFC 9864's `Ed25519` is EdDSA's name on that curve, beside `EdDSA`), never a token; a key
//! naming its `alg` verifies exactly that algorithm; an RSA key without `alg` verifies the RSA
//! algorithms of the configured list (RS256, PS256, PS384, PS512: RSA signatures over one public
//! key, so no public-key/secret confusion; a list naming one of them pins such keys to it); EC
//! and Ed25519 keys verify their curve's one algorithm; symmetric (`oct`) keys, encryption keys
//! (`use` other than `sig`), RSA moduli under 2048 bits, algorithms outside the configured list
//! and keys without a `kid` are skipped (named in the skip list, never an error for the whole
//! set); the first key of a `kid` wins.

use std::collections::HashMap;
use std::sync::Arc;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::OidcError;

/// Smallest accepted RSA modulus, in bytes (2048 bits; RFC 7518 §3.3).
const MIN_RSA_MODULUS_BYTES: usize = 256;

/// The RSA signature algorithms a key may verify, in the order a key without `alg` lists them.
const RSA_ALGORITHMS: &[Algorithm] = &[Algorithm::RS256, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512];

/// Most keys kept from one JWKS (providers publish a handful).
pub const MAX_KEYS: usize = 64;

/// One published key, pinned to the algorithms its parameters allow.
pub struct VerifyingKey {
    /// The key id (`kid`).
    pub kid: String,
    /// The algorithms this key verifies (never empty; one unless the key is RSA without `alg`).
    pub algorithms: Vec<Algorithm>,
    /// The key material.
    pub key: DecodingKey,
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("VerifyingKey").field("kid", &self.kid).field("algorithms", &self.algorithms).finish()
    }
}

/// The keys of one successful fetch, by `kid`.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: HashMap<String, Arc<VerifyingKey>>,
}

impl KeySet {
    /// The key named `kid`.
    pub fn get(&self, kid: &str) -> Option<&Arc<VerifyingKey>> {
        self.keys.get(kid)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Key ids, sorted (reports and tests).
    pub fn kids(&self) -> Vec<String> {
        let mut kids: Vec<String> = self.keys.keys().cloned().collect();
        kids.sort();
        kids
    }
}

/// Why a published key was not kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Its `kid` (empty when it had none).
    pub kid: String,
    /// Why.
    pub reason: &'static str,
}

#[derive(serde::Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

/// Parses a JWKS document: the usable keys (those whose algorithm is in `allowed`) and what was
/// skipped. Fails only when the document is not a JWKS at all.
pub fn parse(body: &[u8], allowed: &[Algorithm]) -> Result<(KeySet, Vec<Skipped>), OidcError> {
    let raw: RawSet = serde_json::from_slice(body)
        .map_err(|error| OidcError::Document { what: "jwks", reason: error.to_string() })?;
    let mut set = KeySet::default();
    let mut skipped = Vec::new();
    for value in raw.keys {
        let kid = value.get("kid").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        match key_of(value, allowed) {
            Ok(_) if set.keys.len() >= MAX_KEYS => skipped.push(Skipped { kid, reason: "too many keys" }),
            Ok(key) if set.keys.contains_key(&key.kid) => skipped.push(Skipped { kid, reason: "duplicate kid" }),
            Ok(key) => {
                set.keys.insert(key.kid.clone(), Arc::new(key));
            }
            Err(reason) => skipped.push(Skipped { kid, reason }),
        }
    }
    Ok((set, skipped))
}

/// One JWK as a verifying key, or why not.
fn key_of(mut value: serde_json::Value, allowed: &[Algorithm]) -> Result<VerifyingKey, &'static str> {
    // `alg` is read here, as written: jsonwebtoken's `KeyAlgorithm` refuses names it does not
    // know, RFC 9864's `Ed25519` among them, and would take the whole key down with it.
    let declared = match value.as_object_mut().and_then(|fields| fields.remove("alg")) {
        None => None,
        Some(serde_json::Value::String(name)) => Some(name),
        Some(_) => return Err("alg is not a string"),
    };
    let jwk: Jwk = serde_json::from_value(value).map_err(|_| "not a public key this server reads")?;
    let kid = jwk.common.key_id.clone().filter(|kid| !kid.is_empty()).ok_or("no kid")?;
    if matches!(&jwk.common.public_key_use, Some(usage) if *usage != PublicKeyUse::Signature) {
        return Err("not a signing key (use)");
    }
    if matches!(&jwk.common.key_operations, Some(operations) if !operations.contains(&KeyOperations::Verify)) {
        return Err("not a verifying key (key_ops)");
    }
    let declared = declared.as_deref();
    let algorithms: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(parameters) => {
            let modulus = base64_decoded_len(&parameters.n);
            if modulus < MIN_RSA_MODULUS_BYTES {
                return Err("rsa modulus under 2048 bits");
            }
            match declared {
                // The provider did not say which: each RSA signature algorithm the list admits
                // (RS256 and PS256 by default), all of them RSA over this one public key.
                None => RSA_ALGORITHMS.to_vec(),
                Some("RS256") => vec![Algorithm::RS256],
                Some("PS256") => vec![Algorithm::PS256],
                Some("PS384") => vec![Algorithm::PS384],
                Some("PS512") => vec![Algorithm::PS512],
                Some(_) => return Err("unsupported rsa algorithm"),
            }
        }
        AlgorithmParameters::EllipticCurve(parameters) => match (&parameters.curve, declared) {
            (EllipticCurve::P256, None | Some("ES256")) => vec![Algorithm::ES256],
            _ => return Err("unsupported curve or algorithm (ES256 on P-256 only)"),
        },
        // `EdDSA` (RFC 8037) or `Ed25519` (RFC 9864), the same algorithm on this curve.
        AlgorithmParameters::OctetKeyPair(parameters) => match (&parameters.curve, declared) {
            (EllipticCurve::Ed25519, None | Some("EdDSA" | "Ed25519")) => vec![Algorithm::EdDSA],
            _ => return Err("unsupported curve or algorithm (EdDSA on Ed25519 only)"),
        },
        AlgorithmParameters::OctetKey(_) => return Err("symmetric key"),
    };
    let algorithms: Vec<Algorithm> = algorithms.into_iter().filter(|algorithm| allowed.contains(algorithm)).collect();
    if algorithms.is_empty() {
        return Err("algorithm not in auth.oidc.algorithms");
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| "malformed key parameters")?;
    Ok(VerifyingKey { kid, algorithms, key })
}

/// Bytes a base64url text decodes to (without decoding it).
fn base64_decoded_len(text: &str) -> usize {
    let length = text.trim_end_matches('=').len();
    length * 3 / 4
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The test keys' JWKS (`fixtures/auth/oidc/jwks.json`): `rs` (RS256), `ps` (PS256), `es`
    /// (ES256), `ed` (EdDSA).
    pub(crate) fn fixture_jwks() -> Vec<u8> {
        std::fs::read(fixture("jwks.json")).unwrap()
    }

    pub(crate) fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth/oidc").join(name)
    }

    const ALL: &[Algorithm] = &[Algorithm::RS256, Algorithm::PS256, Algorithm::ES256, Algorithm::EdDSA];

    /// The one algorithm a key verifies (a key verifying several fails the test).
    fn key(value: serde_json::Value) -> Result<Algorithm, &'static str> {
        key_of(value, ALL).map(|key| match key.algorithms[..] {
            [one] => one,
            _ => panic!("{key:?} verifies several algorithms"),
        })
    }

    fn fixture_key(kid: &str) -> serde_json::Value {
        let set: serde_json::Value = serde_json::from_slice(&fixture_jwks()).unwrap();
        set["keys"].as_array().unwrap().iter().find(|key| key["kid"] == kid).unwrap().clone()
    }

    fn with(mut value: serde_json::Value, field: &str, new: serde_json::Value) -> serde_json::Value {
        if new.is_null() {
            value.as_object_mut().unwrap().remove(field);
        } else {
            value[field] = new;
        }
        value
    }

    #[test]
    fn each_fixture_key_verifies_the_algorithm_it_names() {
        let (set, skipped) = parse(&fixture_jwks(), ALL).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let pinned: Vec<_> =
            set.kids().iter().map(|kid| (kid.clone(), set.get(kid).unwrap().algorithms.clone())).collect();
        assert_eq!(
            pinned,
            vec![
                ("ed".into(), vec![Algorithm::EdDSA]),
                ("es".into(), vec![Algorithm::ES256]),
                ("ps".into(), vec![Algorithm::PS256]),
                ("rs".into(), vec![Algorithm::RS256])
            ]
        );
    }

    #[test]
    fn the_key_decides_the_algorithm_and_mismatches_are_skipped() {
        let rsa = fixture_key("rs");
        assert_eq!(
            key_of(with(rsa.clone(), "alg", serde_json::Value::Null), ALL).map(|key| key.algorithms),
            Ok(vec![Algorithm::RS256, Algorithm::PS256]),
            "an rsa key without alg: the rsa algorithms of the list"
        );
        assert_eq!(key(with(rsa.clone(), "alg", json!("PS256"))), Ok(Algorithm::PS256));
        for wrong in ["ES256", "HS256", "RS512", "RSA-OAEP", "none"] {
            assert!(key(with(rsa.clone(), "alg", json!(wrong))).is_err(), "{wrong}");
        }
        assert!(key(with(fixture_key("es"), "alg", json!("RS256"))).is_err());
        assert!(key(with(fixture_key("es"), "crv", json!("P-384"))).is_err());
        assert!(key(with(fixture_key("ed"), "alg", json!("ES256"))).is_err());
        assert_eq!(key(with(fixture_key("ed"), "alg", serde_json::Value::Null)), Ok(Algorithm::EdDSA));
    }

    /// Regression (issue 57.13): a provider publishing RSA keys without `alg` and signing PS256
    /// (node oidc-provider's default) had every token refused: such a key verified RS256 only.
    #[test]
    fn an_rsa_key_without_alg_verifies_the_rsa_algorithms_configured() {
        let bare = with(fixture_key("ps"), "alg", serde_json::Value::Null);
        let algorithms = |allowed: &[Algorithm]| key_of(bare.clone(), allowed).map(|key| key.algorithms);
        assert_eq!(algorithms(ALL), Ok(vec![Algorithm::RS256, Algorithm::PS256]));
        assert_eq!(algorithms(&[Algorithm::PS256, Algorithm::ES256]), Ok(vec![Algorithm::PS256]), "pinned by the list");
        assert_eq!(
            algorithms(&[Algorithm::PS512, Algorithm::PS384, Algorithm::RS256]),
            Ok(vec![Algorithm::RS256, Algorithm::PS384, Algorithm::PS512])
        );
        assert_eq!(algorithms(&[Algorithm::ES256, Algorithm::EdDSA]), Err("algorithm not in auth.oidc.algorithms"));
        // A key that names its algorithm keeps to it.
        for (name, algorithm) in [("PS384", Algorithm::PS384), ("PS512", Algorithm::PS512)] {
            let named = with(fixture_key("ps"), "alg", json!(name));
            assert_eq!(key_of(named, &[algorithm]).map(|key| key.algorithms), Ok(vec![algorithm]), "{name}");
        }
        assert_eq!(key_of(fixture_key("ps"), ALL).map(|key| key.algorithms), Ok(vec![Algorithm::PS256]));
    }

    /// Regression (issue 57.12): a key published with `alg: Ed25519` (RFC 9864's name, which
    /// deprecates `EdDSA` for it) was skipped as "not a public key this server reads".
    #[test]
    fn an_ed25519_key_may_name_its_algorithm_ed25519() {
        assert_eq!(key(with(fixture_key("ed"), "alg", json!("Ed25519"))), Ok(Algorithm::EdDSA));
        for other in ["rs", "es"] {
            assert!(key(with(fixture_key(other), "alg", json!("Ed25519"))).is_err(), "{other}");
        }
        assert!(key(with(fixture_key("ed"), "alg", json!("Ed448"))).is_err());
        assert!(key(with(fixture_key("ed"), "alg", json!(7))).is_err());
    }

    #[test]
    fn symmetric_encryption_small_and_unnamed_keys_are_skipped() {
        let rsa = fixture_key("rs");
        assert_eq!(key(json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0", "alg": "HS256"})), Err("symmetric key"));
        assert_eq!(key(with(rsa.clone(), "use", json!("enc"))), Err("not a signing key (use)"));
        assert_eq!(key(with(rsa.clone(), "key_ops", json!(["encrypt"]))), Err("not a verifying key (key_ops)"));
        assert!(key(with(rsa.clone(), "key_ops", json!(["verify"]))).is_ok());
        assert_eq!(key(with(rsa.clone(), "kid", serde_json::Value::Null)), Err("no kid"));
        assert_eq!(key(with(rsa.clone(), "n", json!("sXch"))), Err("rsa modulus under 2048 bits"));
        assert_eq!(
            key_of(rsa, &[Algorithm::ES256]).map(|key| key.algorithms),
            Err("algorithm not in auth.oidc.algorithms")
        );
    }

    #[test]
    fn one_bad_key_does_not_spoil_the_set_and_the_first_kid_wins() {
        let body = json!({"keys": [
            fixture_key("rs"),
            {"kty": "RSA", "kid": "enc", "use": "enc", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB"},
            {"kty": "weird", "kid": "w"},
            with(fixture_key("es"), "kid", json!("rs")),
        ]});
        let (set, skipped) = parse(body.to_string().as_bytes(), ALL).unwrap();
        assert_eq!(set.kids(), vec!["rs".to_owned()]);
        assert_eq!(set.get("rs").unwrap().algorithms, [Algorithm::RS256]);
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(parse(b"{\"not\": \"a jwks\"}", ALL).is_err());
    }
}
