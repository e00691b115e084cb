//! The three tools `/mcp` offers and their list (`tools/list`), whose input and output schemas
//! are derived from the same wire types as the OpenAPI document.

use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::{ReadDocumentIn, ReadDocumentOut};
use crate::config::Settings;
use crate::http::answer::{AnswerBodyIn, RetrieveBodyIn};
use crate::http::contract::answer::{AnswerResponse, RetrieveResponse};

/// The three tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tool {
    Answer,
    Retrieve,
    ReadDocument,
}

impl Tool {
    pub(super) const ALL: [Tool; 3] = [Tool::Answer, Tool::Retrieve, Tool::ReadDocument];

    pub(super) fn name(self) -> &'static str {
        match self {
            Tool::Answer => "answer",
            Tool::Retrieve => "retrieve",
            Tool::ReadDocument => "read_document",
        }
    }

    pub(super) fn parse(name: &str) -> Option<Tool> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn title(self) -> &'static str {
        match self {
            Tool::Answer => "Answer with citations",
            Tool::Retrieve => "Retrieve authorized passages",
            Tool::ReadDocument => "Read a document or a cited span",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Tool::Answer => {
                "Answers a question from the documents the caller may read. Each claim carries citations \
                 (document id, title, version, quote, character offsets, page and section) that were checked \
                 against the sources; when the evidence does not support an answer the result is a typed \
                 abstention (status 'abstained' with a reason) instead of a guess."
            }
            Tool::Retrieve => {
                "Returns the passages the caller may read that best match a query, best first, each with its \
                 document id, title, version, character offsets, page and section, and score."
            }
            Tool::ReadDocument => {
                "Reads a document the caller may read: its whole text, or the span [start, end) of a citation, \
                 with the chunks that overlap it. A document the caller may not read does not exist."
            }
        }
    }
}

/// The tool list, built once per app from the wire types' schemas.
pub struct Tools {
    pub(super) list: Value,
}

impl Tools {
    /// The tools of a server running with `settings` (input schemas carry its question limit,
    /// as the OpenAPI document does).
    pub fn new(settings: &Settings) -> Self {
        let document = crate::http::openapi::document(settings);
        let component = |name: &str| {
            document
                .components
                .as_ref()
                .and_then(|components| components.schemas.get(name))
                .and_then(|schema| serde_json::to_value(schema).ok())
        };
        let input = |tool: Tool| match tool {
            Tool::Answer => component("AnswerBodyIn").unwrap_or_else(schema_of::<AnswerBodyIn>),
            Tool::Retrieve => component("RetrieveBodyIn").unwrap_or_else(schema_of::<RetrieveBodyIn>),
            Tool::ReadDocument => schema_of::<ReadDocumentIn>(),
        };
        let output = |tool: Tool| match tool {
            Tool::Answer => schema_of::<AnswerResponse>(),
            Tool::Retrieve => schema_of::<RetrieveResponse>(),
            Tool::ReadDocument => schema_of::<ReadDocumentOut>(),
        };
        let tools: Vec<Value> = Tool::ALL
            .into_iter()
            .map(|tool| {
                json!({
                    "name": tool.name(),
                    "title": tool.title(),
                    "description": tool.description(),
                    "inputSchema": input(tool),
                    "outputSchema": output(tool),
                    "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false},
                })
            })
            .collect();
        Self { list: json!({ "tools": tools }) }
    }
}

/// A self-contained JSON Schema of `T`: its schema with every schema it names under `$defs`
/// (OpenAPI's `#/components/schemas/` references rewritten to `#/$defs/`).
fn schema_of<T: ToSchema>() -> Value {
    let mut dependencies = Vec::new();
    T::schemas(&mut dependencies);
    let mut definitions = Map::new();
    for (name, schema) in dependencies {
        definitions.insert(name, serde_json::to_value(schema).unwrap_or(Value::Null));
    }
    let mut root = serde_json::to_value(T::schema()).unwrap_or_else(|_| json!({"type": "object"}));
    if let Value::Object(object) = &mut root
        && !definitions.is_empty()
    {
        object.insert("$defs".to_owned(), Value::Object(definitions));
    }
    rewrite_references(&mut root);
    root
}

fn rewrite_references(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, member) in object.iter_mut() {
                match member {
                    Value::String(target) if key == "$ref" => {
                        if let Some(name) = target.strip_prefix("#/components/schemas/") {
                            *target = format!("#/$defs/{name}");
                        }
                    }
                    other => rewrite_references(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_references),
        _ => {}
    }
}
