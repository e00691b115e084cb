//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search,
//! snapshot create/restore versus re-ingestion, embedding throughput/latency, and the cost of
//! durable writes and restarts.

pub mod durability;
pub mod embed;
pub mod filtered;
pub mod recovery;
pub mod snapshot;
