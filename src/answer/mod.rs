//! The answer pipeline: labeled context, prompt, structured generation, citation validation,
//! one repair, abstention. Providers (generators, support verifiers) are traits here so that an
//! embedded default, OpenAI-compatible HTTP providers and deterministic fakes plug in alike.

pub mod extractive;
pub mod generator;
pub mod lexical_verifier;
mod text;
pub mod verifier;
