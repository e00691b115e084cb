//! The OpenAPI document (`GET /openapi.json`): generated from the handlers' `utoipa::path`
//! annotations and the schema derives of the wire types, then given this server's configured
//! limits. Clients are generated from it, so it must describe exactly what the server does.
//!
//! Invariants: the document lists exactly the routes served ([`super::served_routes`]: [`super::ROUTES`],
//! less the demo routes outside demo mode); every route that takes a token
//! declares `bearer` security and [`Unauthenticated`], every route that needs a role also
//! [`Forbidden`], every route that reads a JSON body [`JsonBodyRejected`]; every error response
//! is an [`ErrorBody`]; request schemas declare the constraints the handlers enforce (the patterns
//! come from [`super::contract::schema`]). `tests/it/openapi.rs` checks these against the running
//! app, and `tests/schemathesis.sh` (CI) holds a real server to the whole document.

use utoipa::openapi::{OpenApi as Document, RefOr, Schema};
use utoipa::{IntoResponses, OpenApi};

use crate::config::Settings;

use super::contract::schema::trimmed_length_pattern;
use super::error::ErrorBody;

/// 401: the route needs a bearer token (listed by every route with `security(("bearer" = []))`).
#[derive(IntoResponses)]
pub enum Unauthenticated {
    /// `missing_token`, `invalid_token` or `token_expired`: no valid bearer token; with an
    /// identity provider (`[auth.oidc]`) also `missing_claim` (a provider token lacks a claim of
    /// `[auth.claims]`) and `keys_unavailable` (no usable key of the provider).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
}

/// 403: the route needs a role the token lacks (listed after [`Unauthenticated`]).
#[derive(IntoResponses)]
pub enum Forbidden {
    /// `forbidden`: a valid token without the role this route needs.
    #[response(status = 403)]
    Forbidden(ErrorBody),
}

/// 400, 413, 415: what any route reading a JSON body answers to a body it cannot take.
#[derive(IntoResponses)]
pub enum JsonBodyRejected {
    /// `invalid_json`, `invalid_body` (a wrong type, an unknown or a missing field), or a field
    /// outside its declared constraints (the code names it, e.g. `empty_question`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `payload_too_large`: the body is over `server.max_body_bytes`.
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody),
    /// `unsupported_media_type`: the body is not `application/json`.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
}

/// 500, 502, 503: the engine behind a route that embeds or searches cannot serve the request.
#[derive(IntoResponses)]
pub enum EngineUnavailable {
    /// An internal failure (`internal error`; details are only logged).
    #[response(status = 500)]
    Internal(ErrorBody),
    /// `embedder_error`: the embedding provider failed.
    #[response(status = 502)]
    BadGateway(ErrorBody),
    /// `overloaded` (with `Retry-After`), `replica_stale` (a replica that cannot confirm its ACL
    /// state is fresh), `storage_unavailable` (the database failed: a read changed nothing, a
    /// write was not applied; with `Retry-After`), `storage_timeout` (a database statement ran
    /// past its deadline, rolled back whole; with `Retry-After`), or the embedder or an index is
    /// unavailable.
    #[response(status = 503, headers(("Retry-After" = u64, description = "seconds to wait (with `overloaded`)")))]
    Unavailable(ErrorBody),
}

/// 503: an admin write that could not be made durable, or beyond the tenant's admission bound.
#[derive(IntoResponses)]
pub enum WriteUnavailable {
    /// `storage_unavailable` (the change could not be made durable and was not applied; reads go
    /// on), `storage_timeout` (a statement ran past its deadline and the change was rolled back
    /// whole) or `overloaded` (the tenant's admission bound for admin writes), with `Retry-After`.
    #[response(status = 503, headers(("Retry-After" = u64, description = "seconds to wait")))]
    Unavailable(ErrorBody),
}

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
        super::ops::healthz, super::ops::readyz, super::ops::metrics, super::ops::openapi,
        super::mcp::origin_metadata, super::mcp::mcp_metadata,
        super::console::demo_users, super::console::demo_token
    ),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

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
