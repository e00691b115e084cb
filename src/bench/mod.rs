//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search and
//! snapshot create/restore versus re-ingestion.
//! embedding throughput/latency.

pub mod embed;
pub mod filtered;
pub mod snapshot;
