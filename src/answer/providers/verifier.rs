//! The [`SupportVerifier`] trait: does the cited text support a claim?
//!
//! Support is per citation: each cited text must support (part of) the claim on its own
//! ([`SourceSupport::supports`]), and the claim is supported when the texts that do, together,
//! support all of it ([`ClaimSupport::supported`]); a text that supports nothing is ignored for
//! the verdict, so an unrelated extra citation can neither help a claim pass nor ride along with
//! one (validation drops it). With a single cited text both questions are the same one.
//!
//! Verifiers are told which chunk each cited text belongs to ([`CitedText::chunk`]) so they can
//! keep per-chunk work (sentence vectors) across requests. A chunk id is derived from the tenant,
//! document, version, offsets and text (see [`ChunkId`]), so such work is never shared across
//! tenants; callers verify only citations the caller may read right now (see
//! `crate::answer::grounding::validate`), which is what makes a cross-request cache under chunk ids safe.

use async_trait::async_trait;

use crate::domain::{ChunkId, SentenceVectors};

/// One cited text and the chunk it was shown from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CitedText<'a> {
    /// The cited chunk. Verifiers may cache work under it, so it must be the id of the chunk
    /// `text` comes from (or, outside the server, an id reserved for that one text).
    pub chunk: ChunkId,
    /// The text shown for the chunk: its text, or a prefix of it when the prompt budget cut it.
    pub text: &'a str,
    /// The chunk's sentence vectors from ingestion, when it has them: a verifier may use the
    /// vector of any sentence of `text` found there (by the digest of its exact text) instead
    /// of embedding it.
    pub sentence_vectors: Option<&'a SentenceVectors>,
}

/// How one cited text relates to a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSupport {
    /// Whether this text on its own supports at least part of the claim (with a single cited
    /// text: the whole claim). Texts without it take no part in the verdict.
    pub supports: bool,
    /// Support score in `0..=1` contributed by this source alone.
    pub score: f32,
    /// Character range `[start, end)` inside the cited text of the best supporting span
    /// (e.g. the best sentence); becomes the citation's `quote`.
    pub quote: (usize, usize),
}

/// The verdict on one claim and all its cited texts.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSupport {
    /// Whether the cited texts that support part of the claim ([`SourceSupport::supports`])
    /// together support all of it; false when none does.
    pub supported: bool,
    /// Combined score in `0..=1` of those texts.
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
    /// Judges `claim` against `cited` (at least one text). Call it only for citations the
    /// caller is authorized to read at this moment (implementations may cache per chunk).
    async fn verify(&self, claim: &str, cited: &[CitedText<'_>]) -> ClaimSupport;
    /// Judges `answer`, the few words a claim made of its quotes states as its answer, against
    /// those quotes (`cited`): is it what they say? By default exactly as a claim
    /// ([`Self::verify`]); a verifier whose claim check compares meanings may check here that
    /// the answer's words are in the quotes instead, since a few words have no sentence meaning
    /// to compare.
    async fn verify_answer(&self, answer: &str, cited: &[CitedText<'_>]) -> ClaimSupport {
        self.verify(answer, cited).await
    }
}
