//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search,
//! snapshot create/restore versus re-ingestion, embedding throughput/latency, and the cost of
//! durable writes and restarts, and extraction throughput per file format.

pub mod durability;
pub mod embed;
pub mod extract;
pub mod filtered;
pub mod recovery;
pub mod snapshot;
