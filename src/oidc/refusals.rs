//! Why a provider token was refused, in more detail than the 401 tells the caller: the
//! operator's side of a refusal, and the rate limit of its log line ([`RefusalLog`]).
//!
//! Invariants: a reason names a check, never a value of the token; at most one line per reason
//! is let through per interval, whatever the number of refused tokens (a flood of forged tokens
//! costs the log one line per reason per interval), and the next line counts those held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// The header's `typ` is not `auth.oidc.require_typ`.
    Type,
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
    pub const ALL: [Reason; 13] = [
        Self::Malformed,
        Self::NoKid,
        Self::KeyNotHeld,
        Self::KeysUnavailable,
        Self::Algorithm,
        Self::Type,
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

    /// The metric label (snake_case).
    pub fn code(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NoKid => "no_kid",
            Self::KeyNotHeld => "key_not_held",
            Self::KeysUnavailable => "keys_unavailable",
            Self::Algorithm => "algorithm",
            Self::Type => "typ",
            Self::Signature => "signature",
            Self::NoExpiry => "no_expiry",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::Issuer => "issuer",
            Self::Audience => "audience",
            Self::MissingClaim => "missing_claim",
        }
    }

    /// A short lowercase phrase (the log line's `reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed token",
            Self::NoKid => "no kid",
            Self::KeyNotHeld => "key not held",
            Self::KeysUnavailable => "keys unavailable",
            Self::Algorithm => "algorithm not accepted by the key",
            Self::Type => "typ is not auth.oidc.require_typ",
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
            | Self::Type
            | Self::Signature
            | Self::NoExpiry
            | Self::NotYetValid
            | Self::Issuer
            | Self::Audience
            | Self::MissingClaim => Refusal::Invalid,
        }
    }
}

/// The rate limit of refusal log lines: per reason, the time of the last line let through (an
/// atomic, so verifying threads never wait on one another) and the lines held back since.
pub struct RefusalLog {
    started: Instant,
    interval_ms: u64,
    /// Milliseconds after `started` of the last line let through, plus one (0: none yet).
    last: [AtomicU64; Reason::ALL.len()],
    held_back: [AtomicU64; Reason::ALL.len()],
}

impl RefusalLog {
    /// At most one line per reason every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            started: Instant::now(),
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            last: std::array::from_fn(|_| AtomicU64::new(0)),
            held_back: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Whether a line for `reason` may be written now: `Some(lines held back since the last
    /// one)`, or `None`.
    pub fn admit(&self, reason: Reason) -> Option<u64> {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.admit_at(reason, now)
    }

    /// [`RefusalLog::admit`] at `now_ms` after the start.
    fn admit_at(&self, reason: Reason, now_ms: u64) -> Option<u64> {
        let slot = &self.last[reason.index()];
        let stamp = now_ms.saturating_add(1);
        let last = slot.load(Ordering::Acquire);
        let due = last == 0 || stamp.saturating_sub(last) >= self.interval_ms;
        // One thread wins the slot; the others of the same instant are held back.
        if due && slot.compare_exchange(last, stamp, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return Some(self.held_back[reason.index()].swap(0, Ordering::AcqRel));
        }
        self.held_back[reason.index()].fetch_add(1, Ordering::AcqRel);
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What `run` logs (every level down to debug, plain text), beside its result.
    pub(crate) fn captured_logs<R>(run: impl FnOnce() -> R) -> (R, String) {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl<'writer> tracing_subscriber::fmt::MakeWriter<'writer> for Buffer {
            type Writer = Buffer;
            fn make_writer(&'writer self) -> Self::Writer {
                self.clone()
            }
        }
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .finish();
        let result = tracing::subscriber::with_default(subscriber, run);
        let text = String::from_utf8_lossy(&buffer.0.lock().unwrap()).into_owned();
        (result, text)
    }

    #[test]
    fn one_line_per_reason_per_interval_and_the_next_counts_those_held_back() {
        let log = RefusalLog::new(Duration::from_secs(10));
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 0), Some(0));
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 1), None);
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 9_998), None);
        assert_eq!(log.admit_at(Reason::Signature, 5_000), Some(0), "each reason has its own limit");
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 10_000), Some(2));
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 10_001), None);
        assert_eq!(log.admit_at(Reason::KeyNotHeld, 30_000), Some(1));
        assert_eq!(log.admit_at(Reason::Signature, 14_999), None);
        assert_eq!(log.admit_at(Reason::Signature, 15_000), Some(1));
    }

    #[test]
    fn every_reason_sits_at_its_index() {
        for (position, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), position, "{reason:?}");
        }
    }
}
