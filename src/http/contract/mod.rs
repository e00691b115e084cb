//! The HTTP contract types: the wire shapes of the values other layers produce, with their
//! OpenAPI schema (`utoipa` derives). The OpenAPI document is this layer's concern, so the
//! answer types and the replica's freshness carry no schema; handlers convert them to these with
//! `From`.
//!
//! Invariants: a mirror type serializes exactly as the layer type it mirrors, with the same field
//! names, order and serde attributes, and keeps the same Rust name, which is its schema name in
//! the document; every conversion destructures its source without `..` and matches enums without
//! `_`, so a field or variant added to a layer type fails to compile until the contract follows.

pub mod answer;
pub mod replica;
