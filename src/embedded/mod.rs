//! The embedded backend: one process holds the system of record (`crate::storage`, the redb
//! store), the ACL snapshots (`crate::acl`) and the shard actors (`crate::index`: HNSW and BM25
//! with roaring-bitmap scopes), behind the [`Engine`] facade that owns its write path (validate,
//! chunk, embed, index, commit, publish) and implements both backend sides
//! (`crate::retrieval::ReadSide`, `crate::retrieval::WriteSide`). The PostgreSQL backend's node
//! cache holds tenants as engines too (`crate::postgres::TenantCache`).
//!
//! Files: `engine.rs` (the engine, its start and recovery), `write.rs` (the write path and the
//! publish step replicas share), `batch.rs` (a batch's chunks, vectors and store rows), `read.rs` (the read side), `shards.rs` (the shards'
//! [`CandidateSearch`](crate::retrieval::CandidateSearch): two-phase BM25 statistics, concurrent
//! vector search).

mod batch;
mod engine;
mod read;
mod shards;
mod write;
#[cfg(test)]
mod write_tests;

pub use engine::{ChangeSink, Committed, Engine, EngineParams, Recovery, shard_of};
pub use shards::ShardSearch;
pub use write::FaultHook;
