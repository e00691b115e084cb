//! Grounding: what the model is shown of the final context and how its output is held to it.
//! [`source::Source`] is built once per source when the context is grounded; the prompt, the
//! schema, quote location, validation and repair all read it.

pub mod normalize;
pub mod prompt;
pub mod quote;
pub mod repair;
pub mod schema;
pub mod source;
mod strict_json;
pub mod validate;
