//! The one integration test binary (modules per area keep link time low).

mod answer_fixtures;
mod answer_property;
mod answer_verifier_counts;
mod answers;
mod citus;
mod console;
mod durability;
mod eval;
mod fuzz;
mod http;
mod lexical_stats;
mod logs;
mod minilm;
mod oidc;
mod openapi;
mod persisted_indexes;
mod postgres;
mod providers;
mod recovery;
mod replication;
mod retrieval;
mod review;
mod scripted;
mod security;
mod snapshots;
mod support;
