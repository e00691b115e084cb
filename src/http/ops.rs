//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.

use std::sync::atomic::Ordering;

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::OpenApi;

use super::{AppState, json};

/// `/readyz` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready` or `starting`.
    pub status: &'static str,
    /// Active embedder.
    pub embedder: String,
    /// Active generator.
    pub generator: String,
    /// Current ACL epoch.
    pub acl_epoch: u64,
    /// Lineage of the epoch (epochs are comparable only within one lineage).
    pub lineage: String,
    /// Replica freshness (absent on a primary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::snapshot::replica::ReplicaReport>,
}

/// Process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "process up")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// Indexes are loaded.
#[utoipa::path(get, path = "/readyz", responses((status = 200, body = Readiness), (status = 503, body = Readiness)))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let replica = state.replica.as_ref().map(|status| status.report());
    let stale = replica.as_ref().is_some_and(|report| !report.fresh);
    let ready = state.ready.load(Ordering::SeqCst) && !stale;
    let engine = state.pipeline.engine();
    let body = Readiness {
        status: if stale {
            "replica_stale"
        } else if ready {
            "ready"
        } else {
            "starting"
        },
        embedder: engine.embedder().name().to_owned(),
        generator: state.pipeline.generator().name().to_owned(),
        acl_epoch: engine.acl().epoch(),
        lineage: engine.acl().lineage().to_owned(),
        replica,
    };
    if ready { json(&body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "prometheus text")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let engine = state.pipeline.engine();
    let stats = engine.stats();
    metrics::gauge!("warrant_index_chunks").set(stats.iter().map(|shard| shard.chunks).sum::<usize>() as f64);
    metrics::gauge!("warrant_index_vectors").set(stats.iter().map(|shard| shard.vectors).sum::<usize>() as f64);
    metrics::gauge!("warrant_index_lexical_docs").set(stats.iter().map(|shard| shard.lexical_docs).sum::<u64>() as f64);
    metrics::gauge!("warrant_acl_epoch").set(engine.acl().epoch() as f64);
    metrics::gauge!("warrant_live_documents").set(engine.acl().load().live_documents() as f64);
    if let Some(status) = &state.replica {
        status.report();
    }
    state.metrics.run_upkeep();
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(state.metrics.render())
}

/// The OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "openapi 3 document")))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// The OpenAPI document of the service, generated from the handler annotations.
#[derive(OpenApi)]
#[openapi(
    info(title = "warrant", description = "Citation-first, access-controlled hybrid RAG answer server"),
    paths(
        super::answer::answer, super::answer::retrieve,
        super::admin::upsert_documents, super::admin::delete_document, super::admin::revoke, super::admin::grant,
        super::admin::changes, super::admin::create_snapshot, super::replica::manifest, super::replica::file,
        healthz, readyz, metrics, openapi
    ),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;
