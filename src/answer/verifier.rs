//! The [`SupportVerifier`] trait: does the cited text support a claim?

use async_trait::async_trait;

/// How one cited text relates to a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSupport {
    /// Support score in `0..=1` contributed by this source alone.
    pub score: f32,
    /// Character range `[start, end)` inside the cited text of the best supporting span
    /// (e.g. the best sentence); becomes the citation's `quote`.
    pub quote: (usize, usize),
}

/// The verdict on one claim and all its cited texts.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSupport {
    /// Whether the cited texts together support the claim.
    pub supported: bool,
    /// Combined score in `0..=1`.
    pub score: f32,
    /// One entry per cited text, in the order given.
    pub sources: Vec<SourceSupport>,
}

/// Decides whether cited texts support a claim. The embedded default is a calibrated
/// lexical/semantic check; an external NLI model can implement the same trait.
#[async_trait]
pub trait SupportVerifier: Send + Sync {
    /// Name reported in logs.
    fn name(&self) -> &str;
    /// Judges `claim` against `cited` (at least one text).
    async fn verify(&self, claim: &str, cited: &[&str]) -> ClaimSupport;
}
