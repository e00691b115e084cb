//! A provider token taken apart without jsonwebtoken's `Header` type, which refuses any `alg`
//! name it does not know: RFC 9864's `Ed25519` (the fully specified name that deprecates `EdDSA`
//! for Ed25519 keys) among them. The header's `alg`, `kid` and `typ` are read as written; the
//! signature is checked with jsonwebtoken's own primitive ([`jsonwebtoken::crypto::verify`]) in the
//! algorithm the key decided; the registered claims are checked as RFC 7519 §4.1 defines them.
//!
//! Invariants:
//! - a token is exactly three base64url parts, its header a JSON object with a string `alg`
//!   (`kid` and `typ`, when present, strings too); anything else is [`Reason::Malformed`];
//! - the signature is verified over the first two parts as sent, before the payload is read;
//! - `exp` (a non-negative number), `iss` (a string equal to the configured issuer) and `aud`
//!   (the configured audience, or an array of strings holding it) are required; `nbf` is
//!   checked when present; `exp` and `nbf` within the leeway;
//! - nothing here logs, keeps or returns any part of the token but the header's three fields.

use std::str::FromStr;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::refusals::Reason;

/// Longest header (decoded) read: providers write well under 1 KiB.
const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The fields of a token's header that decide how it is verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenHeader {
    /// `alg`, as written.
    pub alg: String,
    /// `kid`, the key the token names.
    pub kid: Option<String>,
    /// `typ`, the token's media type (RFC 7515 §4.1.9; `at+jwt` for access tokens, RFC 9068).
    pub typ: Option<String>,
}

impl TokenHeader {
    /// The header of `token`, or `None` when it is not a JWS compact token with a JSON header
    /// whose `alg` is a string (and `kid`/`typ`, when present, strings).
    pub fn parse(token: &str) -> Option<Self> {
        let encoded = token.split('.').next()?;
        if encoded.len() > MAX_HEADER_BYTES * 4 / 3 + 4 {
            return None;
        }
        let bytes = base64url(encoded)?;
        let Value::Object(mut fields) = serde_json::from_slice::<Value>(&bytes).ok()? else { return None };
        let mut text = |name: &str| match fields.remove(name) {
            None => Some(None),
            Some(Value::String(value)) => Some(Some(value)),
            Some(_) => None,
        };
        let alg = text("alg")??;
        let kid = text("kid")?;
        let typ = text("typ")?;
        Some(Self { alg, kid, typ })
    }

    /// The algorithm the header names ([`algorithm_named`]).
    pub fn algorithm(&self) -> Option<Algorithm> {
        algorithm_named(&self.alg)
    }
}

/// The algorithm an `alg` name denotes: jsonwebtoken's names, and `Ed25519` (RFC 9864 §2.2) for
/// EdDSA over Ed25519, the only EdDSA curve jsonwebtoken verifies. Case matters (RFC 7515 §4.1.1).
pub fn algorithm_named(name: &str) -> Option<Algorithm> {
    match name {
        "Ed25519" => Some(Algorithm::EdDSA),
        other => Algorithm::from_str(other).ok(),
    }
}

/// What a provider token's registered claims must say.
#[derive(Clone, Debug)]
pub struct Expected {
    /// `auth.oidc.issuer`: `iss` must equal it.
    pub issuer: String,
    /// `auth.oidc.audience`: `aud` must be it or hold it.
    pub audience: String,
    /// `auth.leeway_seconds`, for `exp` and `nbf`.
    pub leeway_seconds: u64,
}

/// Verifies `token`'s signature with `key` in `algorithm`, then its registered claims: the
/// claims object, or why not.
pub fn verify(token: &str, key: &DecodingKey, algorithm: Algorithm, expected: &Expected) -> Result<Value, Reason> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Reason::Malformed);
    };
    let message = &token[..header.len() + 1 + payload.len()];
    match jsonwebtoken::crypto::verify(signature, message.as_bytes(), key, algorithm) {
        Ok(true) => {}
        Ok(false) | Err(_) => return Err(Reason::Signature),
    }
    let claims: Value =
        base64url(payload).and_then(|bytes| serde_json::from_slice(&bytes).ok()).ok_or(Reason::Malformed)?;
    if !claims.is_object() {
        return Err(Reason::Malformed);
    }
    check_registered(&claims, expected, jsonwebtoken::get_current_timestamp())?;
    Ok(claims)
}

/// The registered-claim checks of [`verify`] at `now` (seconds since the epoch).
fn check_registered(claims: &Value, expected: &Expected, now: u64) -> Result<(), Reason> {
    let exp = claims.get("exp").ok_or(Reason::NoExpiry)?;
    let exp = numeric_date(exp).ok_or(Reason::NoExpiry)?;
    if exp.saturating_add(expected.leeway_seconds) < now {
        return Err(Reason::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = numeric_date(nbf).ok_or(Reason::NotYetValid)?;
        if nbf > now.saturating_add(expected.leeway_seconds) {
            return Err(Reason::NotYetValid);
        }
    }
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer.as_str()) {
        return Err(Reason::Issuer);
    }
    let audience_named = match claims.get("aud") {
        Some(Value::String(audience)) => *audience == expected.audience,
        Some(Value::Array(audiences)) => {
            audiences.iter().all(Value::is_string) && audiences.iter().any(|audience| *audience == *expected.audience)
        }
        _ => false,
    };
    if !audience_named {
        return Err(Reason::Audience);
    }
    Ok(())
}

/// A NumericDate (RFC 7519 §2): a non-negative JSON number, fractions rounded down.
fn numeric_date(value: &Value) -> Option<u64> {
    if let Some(seconds) = value.as_u64() {
        return Some(seconds);
    }
    let seconds = value.as_f64()?;
    // `as` saturates; a date past u64 seconds is as good as never.
    (seconds.is_finite() && seconds >= 0.0).then_some(seconds as u64)
}

/// Decodes base64url without padding (RFC 7515 §2), refusing anything else.
fn base64url(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn encoded(value: &Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    }

    #[test]
    fn the_header_is_read_as_written_and_anything_else_is_refused() {
        let header = TokenHeader::parse(&format!(
            "{}.e30.c2ln",
            encoded(&json!({"alg": "Ed25519", "kid": "k", "typ": "at+jwt"}))
        ));
        assert_eq!(
            header,
            Some(TokenHeader { alg: "Ed25519".into(), kid: Some("k".into()), typ: Some("at+jwt".into()) })
        );
        assert_eq!(header.unwrap().algorithm(), Some(Algorithm::EdDSA));
        for bad in [
            json!({"kid": "k"}),
            json!({"alg": 1}),
            json!({"alg": "RS256", "kid": 7}),
            json!({"alg": "RS256", "typ": ["JWT"]}),
            json!(["alg", "RS256"]),
        ] {
            assert_eq!(TokenHeader::parse(&format!("{}.e30.c2ln", encoded(&bad))), None, "{bad}");
        }
        assert_eq!(TokenHeader::parse("not base64!.e30.c2ln"), None);
        assert_eq!(TokenHeader::parse(""), None);
        let padded = format!("{}=.e30.c2ln", encoded(&json!({"alg": "RS256"})));
        assert_eq!(TokenHeader::parse(&padded), None, "base64url without padding only");
    }

    #[test]
    fn algorithm_names_are_jsonwebtokens_and_ed25519_exactly() {
        assert_eq!(algorithm_named("EdDSA"), Some(Algorithm::EdDSA));
        assert_eq!(algorithm_named("Ed25519"), Some(Algorithm::EdDSA));
        assert_eq!(algorithm_named("PS512"), Some(Algorithm::PS512));
        for unknown in ["ed25519", "Ed448", "none", "", "rs256"] {
            assert_eq!(algorithm_named(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn registered_claims_follow_rfc_7519() {
        let expected = Expected { issuer: "https://idp".into(), audience: "warrant".into(), leeway_seconds: 5 };
        let now = 1_000_000;
        let good = json!({"iss": "https://idp", "aud": "warrant", "exp": now + 60});
        let with = |field: &str, value: Value| {
            let mut claims = good.clone();
            if value.is_null() {
                claims.as_object_mut().unwrap().remove(field);
            } else {
                claims[field] = value;
            }
            check_registered(&claims, &expected, now)
        };
        assert_eq!(check_registered(&good, &expected, now), Ok(()));
        assert_eq!(with("exp", json!(now - 3)), Ok(()), "within the leeway");
        assert_eq!(with("exp", json!(now as f64 + 0.5)), Ok(()), "a fractional date");
        assert_eq!(with("exp", json!(now - 6)), Err(Reason::Expired));
        for bad in [Value::Null, json!("soon"), json!(-1), json!([now])] {
            assert_eq!(with("exp", bad.clone()), Err(Reason::NoExpiry), "{bad}");
        }
        assert_eq!(with("nbf", json!(now + 5)), Ok(()));
        assert_eq!(with("nbf", json!(now + 6)), Err(Reason::NotYetValid));
        assert_eq!(with("nbf", json!("later")), Err(Reason::NotYetValid));
        assert_eq!(with("iss", Value::Null), Err(Reason::Issuer));
        assert_eq!(with("iss", json!(["https://idp"])), Err(Reason::Issuer));
        assert_eq!(with("iss", json!("https://idp/")), Err(Reason::Issuer));
        assert_eq!(with("aud", json!(["other", "warrant"])), Ok(()));
        for bad in [Value::Null, json!("other"), json!([]), json!(["other"]), json!(["warrant", 1]), json!(7)] {
            assert_eq!(with("aud", bad.clone()), Err(Reason::Audience), "{bad}");
        }
    }
}
