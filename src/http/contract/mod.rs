//! The HTTP contract types: the wire shapes of the values other layers produce or consume (answer
//! and retrieve responses, document inputs, a replica's freshness), with their OpenAPI schema
//! (`utoipa` derives), and the JSON Schema fragments of the input rules ([`schema`]). The OpenAPI
//! document is this layer's concern, so the answer, retrieval, domain and replica types carry no
//! schema; handlers convert between them and these with `From`. Bodies that exist only on the
//! wire (`AnswerBodyIn`, `UpsertBody`, `EpochOut`…) stay beside their handlers.
//!
//! Invariants: a mirror type serializes (or deserializes) exactly as the layer type it mirrors,
//! with the same field names, order and serde attributes, and keeps the same Rust name, which is
//! its schema name in the document; every conversion destructures its source and builds its
//! target without `..` and matches enums without `_`, so a field or variant added to a layer type
//! fails to compile until the contract follows.

pub mod admin;
pub mod answer;
pub mod replica;
pub mod schema;
