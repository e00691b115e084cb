//! Why a provider token was refused, in more detail than the 401 tells the caller: the
//! operator's side of a refusal.
//!
//! Invariant: a reason names a check, never a value of the token.

use super::Refusal;

/// The check a provider token failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Not three base64url parts, or a header or payload that is not a JSON object.
    Malformed,
    /// The header names no key (`kid`).
    NoKid,
    /// The key it names is not among the keys held.
    KeyNotHeld,
    /// No key is usable (none fetched yet, or aged out).
    KeysUnavailable,
    /// The header's `alg` is not an algorithm the key verifies.
    Algorithm,
    /// The signature does not verify with the key.
    Signature,
    /// `exp` is missing or not a number.
    NoExpiry,
    /// `exp` passed (beyond the leeway).
    Expired,
    /// `nbf` is in the future (beyond the leeway), or not a number.
    NotYetValid,
    /// `iss` is not `auth.oidc.issuer`.
    Issuer,
    /// `aud` does not name `auth.oidc.audience`.
    Audience,
    /// A claim `[auth.claims]` reads is missing.
    MissingClaim,
}

impl Reason {
    /// Every reason, in declaration order ([`Reason::index`]).
    pub const ALL: [Reason; 12] = [
        Self::Malformed,
        Self::NoKid,
        Self::KeyNotHeld,
        Self::KeysUnavailable,
        Self::Algorithm,
        Self::Signature,
        Self::NoExpiry,
        Self::Expired,
        Self::NotYetValid,
        Self::Issuer,
        Self::Audience,
        Self::MissingClaim,
    ];

    /// Its position in [`Reason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short lowercase label (log field and metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed token",
            Self::NoKid => "no kid",
            Self::KeyNotHeld => "key not held",
            Self::KeysUnavailable => "keys unavailable",
            Self::Algorithm => "algorithm not accepted by the key",
            Self::Signature => "signature does not verify",
            Self::NoExpiry => "exp missing or not a number",
            Self::Expired => "expired",
            Self::NotYetValid => "not yet valid (nbf)",
            Self::Issuer => "iss is not auth.oidc.issuer",
            Self::Audience => "aud does not name auth.oidc.audience",
            Self::MissingClaim => "a claim of auth.claims is missing",
        }
    }

    /// The refusal the caller sees (a missing claim carries its own: see
    /// [`Refusal::MissingClaim`]).
    pub fn refusal(self) -> Refusal {
        match self {
            Self::KeyNotHeld => Refusal::UnknownKey,
            Self::KeysUnavailable => Refusal::KeysUnavailable,
            Self::Expired => Refusal::Expired,
            Self::Malformed
            | Self::NoKid
            | Self::Algorithm
            | Self::Signature
            | Self::NoExpiry
            | Self::NotYetValid
            | Self::Issuer
            | Self::Audience
            | Self::MissingClaim => Refusal::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_sits_at_its_index() {
        for (position, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), position, "{reason:?}");
        }
    }
}
