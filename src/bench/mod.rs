//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search and
//! snapshot create/restore versus re-ingestion.

pub mod filtered;
pub mod snapshot;
