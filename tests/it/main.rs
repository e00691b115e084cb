//! The one integration test binary (modules per area keep link time low).

mod retrieval;
mod support;
