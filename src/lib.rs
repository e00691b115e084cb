//! warrant: a citation-first, access-controlled hybrid RAG answer server.
//!
//! Data flows one way through the modules: `http` → `answer` → `retrieval` → `index` / `acl` →
//! `domain`. See ARCHITECTURE.md for one section per module.

#![warn(missing_docs)]

pub mod acl;
pub mod answer;
pub mod app;
pub mod bench;
pub mod config;
pub mod documents;
pub mod domain;
pub mod embed;
pub mod embedded;
pub mod eval;
pub mod extract;
pub mod http;
pub mod index;
pub mod ingest;
pub mod oidc;
mod outbound;
pub mod postgres;
pub mod providers;
pub mod replication;
pub mod retrieval;
pub mod review;
pub mod snapshot;
pub mod storage;
pub mod telemetry;
