//! The OAuth protected resource metadata (RFC 9728) that tells an MCP client where to get a token
//! for `/mcp`, and the origin this server names itself by in it and in `WWW-Authenticate`.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::{MCP_METADATA_PATH, PATH};
use crate::http::AppState;

/// Body of the protected resource metadata (RFC 9728 §2).
#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceMetadata {
    /// The protected resource's identifier: this server's origin, or its `/mcp` URL.
    pub resource: String,
    /// Issuers of the authorization servers whose tokens are accepted: `auth.oidc.issuer` when an
    /// OpenID provider is configured; absent otherwise (tokens are then minted by the operator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization_servers: Option<Vec<String>>,
    /// How the token is sent: in the `Authorization` header only.
    pub bearer_methods_supported: Vec<String>,
    /// A human-readable name of the resource.
    pub resource_name: String,
}

/// This server's origin as the request names it: the scheme (`X-Forwarded-Proto` and
/// `Forwarded` honored, `http` or `https` only) and the `Host` header (the names the host check
/// let through), or the configured server name when the header is missing or odd.
pub(super) fn origin(request: &HttpRequest) -> String {
    let is_host = |host: &&str| {
        !host.is_empty()
            && host.len() <= 255
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
    };
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .filter(is_host)
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(ToString::to_string).filter(|host| is_host(&host.as_str())))
        .unwrap_or_else(|| request.app_config().host().to_owned());
    let scheme = match request.connection_info().scheme() {
        "https" => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// The URL of `/mcp`'s protected resource metadata, as `WWW-Authenticate` names it.
pub fn metadata_url(request: &HttpRequest) -> String {
    format!("{}{MCP_METADATA_PATH}", origin(request))
}

fn metadata(state: &AppState, resource: String) -> HttpResponse {
    let issuer = &state.settings.auth.oidc.issuer;
    HttpResponse::Ok().json(ResourceMetadata {
        resource,
        authorization_servers: (!issuer.is_empty()).then(|| vec![issuer.clone()]),
        bearer_methods_supported: vec!["header".to_owned()],
        resource_name: "warrant".to_owned(),
    })
}

/// The origin's protected resource metadata (RFC 9728): its resource is this server's origin.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource",
    responses((status = 200, description = "protected resource metadata (RFC 9728); `authorization_servers` names \
                `auth.oidc.issuer` when an OpenID provider is configured", body = ResourceMetadata)))]
pub async fn origin_metadata(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    metadata(&state, origin(&request))
}

/// `/mcp`'s protected resource metadata (RFC 9728 §3.1), which MCP clients read after a 401.
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource/mcp",
    responses((status = 200, description = "protected resource metadata (RFC 9728) of the MCP endpoint `/mcp`; \
                `authorization_servers` names `auth.oidc.issuer` when an OpenID provider is configured", body = ResourceMetadata)))]
pub async fn mcp_metadata(state: web::Data<AppState>, request: HttpRequest) -> HttpResponse {
    metadata(&state, format!("{}{PATH}", origin(&request)))
}
