//! The one integration test binary (modules per area keep link time low).

mod answer_fixtures;
mod eval;
mod http;
mod minilm;
mod providers;
mod retrieval;
mod support;
