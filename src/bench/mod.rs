//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search and
//! embedding throughput/latency.

pub mod embed;
pub mod filtered;
