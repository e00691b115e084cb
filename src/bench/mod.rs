//! Benchmarks kept in the library so tests and drivers can run them: filtered vector search.

pub mod filtered;
