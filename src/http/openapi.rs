//! The OpenAPI document (`GET /openapi.json`): generated from the handlers' `utoipa::path`
//! annotations and the schema derives of the wire types, then given this server's configured
//! limits. Clients are generated from it, so it must describe exactly what the server does.
//!
//! Invariants: the document lists exactly the routes served ([`super::served_routes`]: [`super::ROUTES`],
//! less the demo routes outside demo mode); every route that takes a token
//! declares `bearer` security and [`Unauthenticated`](super::error::Unauthenticated), every route
//! that needs a role also [`Forbidden`](super::error::Forbidden), every route that reads a JSON
//! body [`JsonBodyRejected`](super::error::JsonBodyRejected); every error response
//! is an [`ErrorBody`]; request schemas declare the constraints the handlers enforce (the patterns
//! come from [`super::contract::schema`]). `tests/it/openapi.rs` checks these against the running
//! app, and `tests/schemathesis.sh` (CI) holds a real server to the whole document.
//!
//! This file imports every handler (their annotations make the document) and no handler imports
//! it: the shared error responses they name live in [`super::error`], and the document's own
//! route, [`openapi`], is served from here.

use actix_web::{HttpResponse, web};
use utoipa::OpenApi;
use utoipa::openapi::{OpenApi as Document, RefOr, Schema};

use crate::config::Settings;

use super::contract::schema::trimmed_length_pattern;
use super::error::ErrorBody;
use super::{AppState, json};

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// The document as the annotations give it, before [`document`] applies the configured limits.
#[derive(OpenApi)]
#[openapi(
    info(title = "warrant", description = "Citation-first, access-controlled hybrid RAG answer server"),
    paths(
        super::answer::answer, super::answer::retrieve, super::documents::document,
        super::admin::upsert_documents, super::admin::delete_document, super::files::upload_files, super::admin::revoke, super::admin::grant,
        super::admin::changes, super::admin::create_snapshot, super::replica::manifest, super::replica::file,
        super::replica::stream, super::replica::lease,
        super::reviews::page, super::reviews::item, super::reviews::verdict,
        super::ops::livez, super::ops::healthz, super::ops::readyz, super::ops::metrics, openapi,
        super::mcp::origin_metadata, super::mcp::mcp_metadata,
        super::console::demo_users, super::console::demo_token
    ),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// The OpenAPI document of this server (its configured limits included).
// Tagged as utoipa tags the handlers of `ops.rs`, where it was: the document groups it with the
// other operations endpoints.
#[utoipa::path(get, path = "/openapi.json", tag = "super::ops",
    responses((status = 200, description = "openapi 3.1 document", body = Object, content_type = "application/json")))]
pub async fn openapi(state: web::Data<AppState>) -> HttpResponse {
    json(&document(&state.settings))
}

/// The OpenAPI document of a server running with `settings`: the annotated document with the
/// limits that come from configuration (question and query length, upsert batch size).
pub fn document(settings: &Settings) -> Document {
    let mut document = ApiDoc::openapi();
    let server = &settings.server;
    for (schema, property) in [("AnswerBodyIn", "question"), ("RetrieveBodyIn", "query")] {
        let applied = match property_mut(&mut document, schema, property) {
            Some(RefOr::T(Schema::Object(text))) => {
                text.pattern = Some(trimmed_length_pattern(server.max_question_chars));
                true
            }
            _ => false,
        };
        debug_assert!(applied, "{schema}.{property} is not a string property");
    }
    let applied = match property_mut(&mut document, "UpsertBody", "documents") {
        Some(RefOr::T(Schema::Array(documents))) => {
            documents.max_items = Some(server.max_batch_documents);
            true
        }
        _ => false,
    };
    debug_assert!(applied, "UpsertBody.documents is not an array property");
    let applied = match property_mut(&mut document, "VerdictBody", "note") {
        Some(RefOr::T(Schema::Object(note))) => {
            note.max_length = Some(settings.review.max_note_chars);
            true
        }
        _ => false,
    };
    debug_assert!(applied, "VerdictBody.note is not a string property");
    either_text_or_file(&mut document);
    // Outside demo mode the demo routes do not exist: documenting them would promise a 405 for
    // other methods where the server answers the 404 of an unknown route.
    if !super::console::DemoUsers::demo_mode(settings) {
        for path in super::DEMO_ROUTES {
            document.paths.paths.remove(*path);
        }
    }
    document
}

/// A document gives its `text`, or a file (`content` and `content_type`): a rule of the object
/// as a whole, stated as `allOf: [the fields, oneOf: [required text, required content and
/// content_type]]` (giving both matches both branches, which `oneOf` refuses).
fn either_text_or_file(document: &mut Document) {
    use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, OneOfBuilder, Type};
    let Some(components) = document.components.as_mut() else { return };
    let Some(RefOr::T(fields)) = components.schemas.remove("DocumentInput") else {
        debug_assert!(false, "DocumentInput is not an inline schema");
        return;
    };
    let text = ObjectBuilder::new().schema_type(Type::Object).required("text").build();
    let file = ObjectBuilder::new().schema_type(Type::Object).required("content").required("content_type").build();
    let either = OneOfBuilder::new().item(text).item(file).build();
    let schema = AllOfBuilder::new().item(fields).item(Schema::OneOf(either)).build();
    components.schemas.insert("DocumentInput".to_owned(), RefOr::T(Schema::AllOf(schema)));
}

fn property_mut<'a>(document: &'a mut Document, schema: &str, property: &str) -> Option<&'a mut RefOr<Schema>> {
    match document.components.as_mut()?.schemas.get_mut(schema)? {
        RefOr::T(Schema::Object(object)) => object.properties.get_mut(property),
        _ => None,
    }
}
