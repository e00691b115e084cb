//! Keys anyone can sign with: the demo HS256 secret of `config/default.toml`, and the test-only
//! key pairs committed under `fixtures/auth/` (their private halves are in the repository). A
//! server that accepts tokens of one of them serves only on loopback
//! ([`Settings::validate_for_serving`]) and answers only loopback host names
//! (`http::host::HostPolicy`).
//!
//! Invariant: a test key is recognized by its content, never by its path: the RSA modulus of the
//! configured public key (PKCS#1 or SubjectPublicKeyInfo PEM, any line endings, anywhere on
//! disk) is compared to the moduli of the committed test keys, compiled into the binary.

use std::path::Path;

use super::{DEMO_HS256_SECRET, Settings};

/// The committed test keys' public halves: the JWKS of the OpenID Connect tests (its RSA keys
/// `rs` and `ps`) and the RS256 key pair's public PEM.
const TEST_JWKS: &str = include_str!("../../fixtures/auth/oidc/jwks.json");
const TEST_RS256_PUBLIC_PEM: &[u8] = include_bytes!("../../fixtures/auth/test_rs256_public.pem");

/// A published key a configuration accepts tokens of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishedKey {
    /// `auth.hs256_secret` is the demo secret, and HS256 is on.
    DemoSecret,
    /// `auth.rs256_public_key_file` holds the public half of a test key of `fixtures/auth/`.
    TestKey,
}

impl Settings {
    /// The published key these settings accept tokens of, if any. Reads
    /// `auth.rs256_public_key_file` (a file that cannot be read or parsed is not recognized:
    /// the server does not start with it anyway).
    pub fn published_key(&self) -> Option<PublishedKey> {
        if self.auth.hs256_enabled() && self.auth.hs256_secret == DEMO_HS256_SECRET {
            return Some(PublishedKey::DemoSecret);
        }
        let file = &self.auth.rs256_public_key_file;
        if !file.is_empty() && std::fs::read(Path::new(file)).is_ok_and(|pem| is_test_rsa_key(&pem)) {
            return Some(PublishedKey::TestKey);
        }
        None
    }
}

/// Whether `pem` (an RSA key as `auth.rs256_public_key_file` takes it) is one of the committed
/// test keys.
pub fn is_test_rsa_key(pem: &[u8]) -> bool {
    let Some(modulus) = rsa_modulus_of_pem(pem) else { return false };
    test_moduli().contains(&modulus)
}

/// The moduli of the committed test keys (leading zero bytes removed).
fn test_moduli() -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let mut moduli: Vec<Vec<u8>> = rsa_modulus_of_pem(TEST_RS256_PUBLIC_PEM).into_iter().collect();
    let jwks: serde_json::Value = serde_json::from_str(TEST_JWKS).unwrap_or_default();
    for key in jwks["keys"].as_array().into_iter().flatten() {
        if key["kty"] == "RSA"
            && let Some(n) = key["n"].as_str()
            && let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(n)
        {
            moduli.push(unsigned(&bytes).to_vec());
        }
    }
    moduli
}

/// The modulus of an RSA key in PEM (public, or private: its `n` all the same).
fn rsa_modulus_of_pem(pem: &[u8]) -> Option<Vec<u8>> {
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(pem).ok()?;
    // jsonwebtoken hands back the PKCS#1 DER: RSAPublicKey ::= SEQUENCE { n, e }, or
    // RSAPrivateKey ::= SEQUENCE { version, n, e, ... } for a private key.
    let jsonwebtoken::DecodingKeyKind::SecretOrDer(der) = key.kind() else { return None };
    let (tag, body, _) = der_item(der)?;
    if tag != 0x30 {
        return None;
    }
    let mut rest = body;
    for _ in 0..2 {
        let (tag, value, after) = der_item(rest)?;
        if tag != 0x02 {
            return None;
        }
        let value = unsigned(value);
        // The version of a private key is one byte; a modulus is hundreds.
        if value.len() > 8 {
            return Some(value.to_vec());
        }
        rest = after;
    }
    None
}

/// One DER item: its tag, its contents and what follows it.
fn der_item(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        (bytes.iter().fold(0usize, |length, byte| (length << 8) | usize::from(*byte)), rest)
    };
    if rest.len() < length {
        return None;
    }
    let (contents, after) = rest.split_at(length);
    Some((tag, contents, after))
}

/// A big-endian integer without its leading zero bytes.
fn unsigned(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|byte| *byte != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/auth").join(name)
    }

    /// A DER length.
    fn der_length(length: usize) -> Vec<u8> {
        match length {
            0..0x80 => vec![length as u8],
            0x80..0x100 => vec![0x81, length as u8],
            _ => vec![0x82, (length >> 8) as u8, length as u8],
        }
    }

    /// A PKCS#1 `RSA PUBLIC KEY` PEM of `n` and `e` (base64url, as a JWKS holds them).
    fn pkcs1_pem(n: &[u8], e: &[u8]) -> Vec<u8> {
        let integer = |value: &[u8]| {
            let mut bytes = if value[0] & 0x80 != 0 { vec![0] } else { vec![] };
            bytes.extend_from_slice(value);
            let mut der = vec![0x02];
            der.extend(der_length(bytes.len()));
            der.extend(bytes);
            der
        };
        let body = [integer(n), integer(e)].concat();
        let mut der = vec![0x30];
        der.extend(der_length(body.len()));
        der.extend(body);
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> =
            text.as_bytes().chunks(64).map(|line| std::str::from_utf8(line).unwrap_or_default()).collect();
        format!("-----BEGIN RSA PUBLIC KEY-----\n{}\n-----END RSA PUBLIC KEY-----\n", lines.join("\n")).into_bytes()
    }

    fn jwks_modulus(kid: &str) -> Vec<u8> {
        let jwks: serde_json::Value = serde_json::from_str(TEST_JWKS).unwrap();
        let key = jwks["keys"].as_array().unwrap().iter().find(|key| key["kid"] == kid).unwrap();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(key["n"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn the_test_keys_are_recognized_by_content_in_any_encoding() {
        let public = std::fs::read(fixture("test_rs256_public.pem")).unwrap();
        assert!(is_test_rsa_key(&public));
        let crlf = String::from_utf8(public.clone()).unwrap().replace('\n', "\r\n");
        assert!(is_test_rsa_key(crlf.as_bytes()), "other line endings");
        assert!(is_test_rsa_key(&std::fs::read(fixture("test_rs256_private.pem")).unwrap()), "the private half");
        // The PSS key's public half, never committed as a PEM, written as PKCS#1.
        assert!(is_test_rsa_key(&pkcs1_pem(&jwks_modulus("ps"), &[1, 0, 1])));
        assert!(is_test_rsa_key(&pkcs1_pem(&jwks_modulus("rs"), &[1, 0, 1])));
        // Another modulus of the same size is not a test key.
        let mut other = jwks_modulus("ps");
        other[100] ^= 0x40;
        assert!(!is_test_rsa_key(&pkcs1_pem(&other, &[1, 0, 1])));
        assert!(!is_test_rsa_key(b"not a pem"));
        assert!(!is_test_rsa_key(b""));
    }

    /// Regression (issue 57.17): a server configured with the committed test key
    /// (`fixtures/auth/test_rs256_public.pem`, whose private half is in the repository) served
    /// on any address.
    #[test]
    fn a_test_key_serves_only_on_loopback_wherever_its_file_lies() {
        let directory = tempfile::tempdir().unwrap();
        let copied = directory.path().join("idp.pem");
        std::fs::copy(fixture("test_rs256_public.pem"), &copied).unwrap();
        for file in [fixture("test_rs256_public.pem"), copied] {
            let mut settings = Settings::defaults();
            settings.auth.hs256_secret = "a-secret-of-our-own-that-is-32-bytes-or-more".into();
            settings.auth.rs256_public_key_file = file.display().to_string();
            assert_eq!(settings.published_key(), Some(PublishedKey::TestKey));
            settings.validate_for_serving().expect("the test key on loopback");
            settings.server.bind = "0.0.0.0:8080".into();
            let message = settings.validate_for_serving().unwrap_err().to_string();
            for named in ["auth.rs256_public_key_file", "fixtures/auth", "server.bind", "0.0.0.0:8080"] {
                assert!(message.contains(named), "{named}: {message}");
            }
        }
        let mut own = Settings::defaults();
        own.server.bind = "0.0.0.0:8080".into();
        own.auth.hs256_secret = "a-secret-of-our-own-that-is-32-bytes-or-more".into();
        let key_file = directory.path().join("own.pem");
        let mut modulus = jwks_modulus("ps");
        modulus[7] ^= 0x01;
        std::fs::write(&key_file, pkcs1_pem(&modulus, &[1, 0, 1])).unwrap();
        own.auth.rs256_public_key_file = key_file.display().to_string();
        assert_eq!(own.published_key(), None);
        own.validate_for_serving().expect("a key of our own serves anywhere");
    }

    #[test]
    fn the_demo_secret_is_published_only_while_hs256_is_on() {
        let mut settings = Settings::defaults();
        assert_eq!(settings.published_key(), Some(PublishedKey::DemoSecret));
        settings.auth.rs256_public_key_file = "/keys/idp.pem".into();
        assert_eq!(settings.published_key(), None, "hs256 off beside an rs256 key; the file is unreadable");
    }
}
