//! Offline evaluation against labeled data that lives outside the repository (see
//! `../shared/data`): retrieval quality per retriever (`retrieval`), the shared dataset loader
//! and ingestion (`dataset`), an on-disk embedding cache for repeated runs (`cache`), bootstrap
//! confidence intervals (`stats`) and the support verifier calibration (`verifier`), and answer quality through the answer pipeline (`answers`). Nothing here runs on the request path.

pub mod answers;
pub mod cache;
pub mod dataset;
pub mod retrieval;
pub mod stats;
pub mod verifier;
