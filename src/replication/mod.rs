//! Replication, both sides in one folder: a primary keeps every committed change with the content
//! it adds in a byte-bounded log ([`primary`]) and sends it over one long-lived HTTP stream per
//! replica (`GET /v1/replica/stream`, framed as [`wire`] says, served by the thin handlers of
//! `crate::http::replica`); each replica follows that stream from the epoch it has and applies
//! every change in order ([`follower`]), renews a lease and acknowledges what it applied
//! (`POST /v1/replica/lease`), and serves only while its [`status`] says it is fresh. A change
//! that can remove access is acknowledged to its writer only once every replica holding a live
//! lease applied it, or that lease ran out ([`leases`]).
//!
//! Data flow: writer → [`primary::ReplicationLog`] (a `ChangeSink`, fed under the engine's
//! writer lock) → `crate::http::replica::stream` → [`follower`] → `Engine::apply_replicated`
//! → [`status::ReplicaStatus`] (freshness, generation) → the HTTP read handlers.
//!
//! Invariants of each side are in its file: the log's bound and order in [`primary`], the
//! lease rules in [`leases`], freshness and the generation in [`status`].

pub mod follower;
pub mod leases;
pub mod primary;
pub mod removals;
pub mod status;
pub mod wire;

#[cfg(test)]
mod tests;
