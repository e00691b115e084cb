//! Providers: the seams to models (generators, support verifiers), each a trait with an
//! embedded default, an OpenAI-compatible HTTP implementation and deterministic test fakes.
//! They read the request types they are given and the `text` helpers, nothing of grounding.

pub mod extractive;
pub mod generator;
pub mod judge_verifier;
pub mod lexical_verifier;
pub mod openai;
pub mod verifier;
