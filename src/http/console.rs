//! The web console (`/console`): a small single-page client of this server's own API, served
//! from assets embedded in the binary (`assets/console/`, plain HTML, CSS and JavaScript; nothing
//! is fetched from anywhere else at run time), and demo sign-in.
//!
//! Invariants:
//! - every console asset is sent with a strict Content-Security-Policy ([`CONTENT_SECURITY_POLICY`]:
//!   scripts and styles only from this origin, no inline script or style, no `eval`, no plugins,
//!   no framing, requests only to this origin) and `X-Content-Type-Options: nosniff`; the
//!   console's script writes server data into the page only as text (`textContent`), never as
//!   HTML;
//! - demo tokens are minted only in demo mode ([`DemoUsers::from_settings`]): the demo corpus is
//!   configured to load, the token key is the published demo key (which `serve` accepts only on
//!   a loopback bind) and `server.bind` is loopback. Minting then grants nothing the published key
//!   does not already grant to anyone who reads `config/default.toml`. Outside demo mode the demo
//!   routes are not registered: any method and body gets the 404 of an unknown route; in demo
//!   mode only loopback host names are answered (`super::host`), so a DNS-rebinding page cannot
//!   mint a token;
//! - a token is minted only for a user listed in `demo.users`, with that entry's tenant, groups
//!   and roles; the file may list no role but `admin` (a tenant admin of its own tenant), so the
//!   console never mints `operator` or `replica` tokens, and nothing in the request can add a
//!   group, role or tenant (the body is `{"user"}` with unknown fields rejected).

use std::collections::BTreeSet;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::{DEMO_HS256_SECRET, Settings, is_loopback_bind};

use super::auth::{Claims, mint_hs256};
use super::error::{ApiError, ErrorBody, JsonBodyRejected};
use super::json;

/// The policy sent with every console asset: only this origin's script and style files (no
/// inline script or style attribute, no `eval`), only this origin for requests, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Lifetime of a demo token.
pub const DEMO_TOKEN_TTL_SECONDS: u64 = 3600;

const INDEX_HTML: &str = include_str!("../../assets/console/index.html");
const APP_JS: &str = include_str!("../../assets/console/app.js");
const APP_CSS: &str = include_str!("../../assets/console/app.css");

/// The console's assets: (path, content type, body). Served with GET only.
pub const ASSETS: &[(&str, &str, &str)] = &[
    ("/console", "text/html; charset=utf-8", INDEX_HTML),
    ("/console/", "text/html; charset=utf-8", INDEX_HTML),
    ("/console/app.js", "text/javascript; charset=utf-8", APP_JS),
    ("/console/app.css", "text/css; charset=utf-8", APP_CSS),
];

/// Roles a demo user may hold.
const DEMO_ROLES: &[&str] = &["admin"];

/// One user of the demo users file.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DemoUser {
    /// What the console calls the user (unique in the file).
    pub id: String,
    /// Tenant of the token.
    pub tenant: String,
    /// `sub` of the token.
    pub sub: String,
    /// Groups of the token.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Roles of the token (only `admin` may be listed).
    #[serde(default)]
    pub roles: Vec<String>,
    /// One line about the user.
    #[serde(default)]
    pub about: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DemoUsersFile {
    #[serde(default)]
    #[allow(dead_code)]
    about: String,
    users: Vec<DemoUser>,
}

/// The demo users of a server in demo mode.
#[derive(Debug)]
pub struct DemoUsers {
    users: Vec<DemoUser>,
    issuer: Option<String>,
    audience: Option<String>,
}

impl DemoUsers {
    /// Whether `settings` are a demo: the demo corpus is configured to load, `demo.users` names a
    /// file, HS256 is on with the published demo key, and `server.bind` is loopback.
    pub fn demo_mode(settings: &Settings) -> bool {
        settings.demo.load
            && !settings.demo.users.is_empty()
            && settings.auth.hs256_enabled()
            && settings.auth.hs256_secret == DEMO_HS256_SECRET
            && is_loopback_bind(&settings.server.bind)
    }

    /// The demo users when `settings` are a demo ([`DemoUsers::demo_mode`]), `None` otherwise;
    /// an error names what is wrong with the users file.
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>, String> {
        if !Self::demo_mode(settings) {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&settings.demo.users).map_err(|error| error.to_string())?;
        let users = parse_users(&text)?;
        let optional = |value: &str| (!value.is_empty()).then(|| value.to_owned());
        Ok(Some(Self { users, issuer: optional(&settings.auth.issuer), audience: optional(&settings.auth.audience) }))
    }

    /// The users, in file order.
    pub fn users(&self) -> &[DemoUser] {
        &self.users
    }

    /// A token for the user `id`, or `None` when no such user is listed.
    fn mint(&self, id: &str) -> Option<Result<(String, u64, &DemoUser), ApiError>> {
        let user = self.users.iter().find(|user| user.id == id)?;
        let expires_at = jsonwebtoken::get_current_timestamp() + DEMO_TOKEN_TTL_SECONDS;
        let claims = Claims {
            sub: user.sub.clone(),
            tenant: user.tenant.clone(),
            groups: user.groups.clone(),
            roles: user.roles.clone(),
            exp: expires_at,
            iss: self.issuer.clone(),
            aud: self.audience.clone(),
        };
        Some(mint_hs256(DEMO_HS256_SECRET, &claims).map(|token| (token, expires_at, user)).map_err(|error| {
            tracing::error!(%error, "demo token signing failed");
            ApiError::internal("internal")
        }))
    }
}

/// Parses and checks a demo users file: ids unique, tenant and sub not blank, no role but
/// `admin`.
pub fn parse_users(text: &str) -> Result<Vec<DemoUser>, String> {
    let file: DemoUsersFile = serde_json::from_str(text).map_err(|error| error.to_string())?;
    let mut ids = BTreeSet::new();
    for user in &file.users {
        if user.id.trim().is_empty() || user.tenant.trim().is_empty() || user.sub.trim().is_empty() {
            return Err(format!("demo user {:?}: id, tenant and sub must not be blank", user.id));
        }
        if !ids.insert(user.id.as_str()) {
            return Err(format!("demo user {:?} is listed twice", user.id));
        }
        if let Some(role) = user.roles.iter().find(|role| !DEMO_ROLES.contains(&role.as_str())) {
            return Err(format!("demo user {:?}: role {role:?} is never minted by the console (only admin)", user.id));
        }
    }
    Ok(file.users)
}

/// Demo mode of one app: the users when it is a demo, `None` otherwise.
pub struct DemoMode(Option<DemoUsers>);

/// Registers the console's assets and demo routes.
pub(super) fn configure(settings: &Settings) -> impl FnOnce(&mut web::ServiceConfig) + use<> {
    let demo = DemoUsers::from_settings(settings).unwrap_or_else(|reason| {
        tracing::error!(file = %settings.demo.users, %reason, "demo users unusable; demo sign-in is off");
        None
    });
    let demo_routes = demo.is_some();
    let demo = web::Data::new(DemoMode(demo));
    move |config: &mut web::ServiceConfig| {
        config.app_data(demo);
        for &(path, content_type, body) in ASSETS {
            config.service(
                web::resource(path)
                    .route(web::get().to(move || async move { asset(content_type, body) }))
                    .default_service(web::to(asset_method_not_allowed)),
            );
        }
        // Outside demo mode the routes do not exist, so every method and body gets the 404 of
        // an unknown route (a 400, 405 or 415 would tell a prober they are there).
        if demo_routes {
            config
                .service(super::resource("/console/demo-users", web::get().to(demo_users)))
                .service(super::resource("/console/demo-token", web::post().to(demo_token)));
        }
    }
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

async fn asset_method_not_allowed() -> HttpResponse {
    actix_web::ResponseError::error_response(&ApiError::method_not_allowed("GET"))
}

fn off() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

fn no_store(mut response: HttpResponse) -> HttpResponse {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /console/demo-users` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct DemoUsersOut {
    /// The users the console may sign in as.
    pub users: Vec<DemoUser>,
}

/// Body of `POST /console/demo-token`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DemoTokenBody {
    /// The `id` of a demo user.
    #[schema(example = "alice")]
    pub user: String,
}

/// `POST /console/demo-token` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct DemoTokenOut {
    /// A bearer token (HS256, the demo key) for the user.
    pub token: String,
    /// Expiry (seconds since the epoch).
    pub expires_at: u64,
    /// Whom the token names.
    pub user: DemoUser,
}

/// The demo users (demo mode only; otherwise 404 like any unknown route).
#[utoipa::path(get, path = "/console/demo-users",
    responses((status = 200, description = "demo mode: the users the console may sign in as", body = DemoUsersOut),
              (status = 404, description = "`not_found`: not in demo mode (demo corpus, published demo key, loopback bind)", body = ErrorBody)))]
pub async fn demo_users(demo: web::Data<DemoMode>) -> Result<HttpResponse, ApiError> {
    let users = demo.0.as_ref().ok_or_else(off)?;
    Ok(no_store(json(&DemoUsersOut { users: users.users().to_vec() })))
}

/// A token for a demo user (demo mode only; otherwise 404 like any unknown route). Never mints
/// for a user the demo users file does not list, and never a role but `admin`.
#[utoipa::path(post, path = "/console/demo-token", request_body = DemoTokenBody,
    responses((status = 200, description = "demo mode: a token for the user", body = DemoTokenOut),
              JsonBodyRejected,
              (status = 404, description = "`not_found`: not in demo mode; `unknown_demo_user`: no such demo user", body = ErrorBody),
              (status = 500, description = "the token could not be signed", body = ErrorBody)))]
pub async fn demo_token(demo: web::Data<DemoMode>, body: web::Json<DemoTokenBody>) -> Result<HttpResponse, ApiError> {
    let users = demo.0.as_ref().ok_or_else(off)?;
    let (token, expires_at, user) =
        users.mint(&body.user).ok_or_else(|| ApiError::not_found("unknown_demo_user", "no such demo user"))??;
    tracing::info!(tenant = %user.tenant, "demo token minted");
    Ok(no_store(json(&DemoTokenOut { token, expires_at, user: user.clone() })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_demo_users_parse_and_name_no_operator_or_replica() {
        let text = include_str!("../../fixtures/demo/users.json");
        let users = parse_users(text).unwrap();
        assert!(users.iter().any(|user| user.roles.is_empty()));
        assert!(users.iter().flat_map(|user| &user.roles).all(|role| role == "admin"));
    }

    #[test]
    fn a_users_file_naming_another_role_or_a_duplicate_is_refused() {
        let user = |id: &str, roles: &str| {
            format!(r#"{{"id": "{id}", "tenant": "t", "sub": "{id}", "groups": [], "roles": {roles}}}"#)
        };
        for (users, expected) in [
            (vec![user("a", r#"["operator"]"#)], "operator"),
            (vec![user("a", r#"["replica"]"#)], "replica"),
            (vec![user("a", "[]"), user("a", "[]")], "twice"),
            (vec![user(" ", "[]")], "blank"),
        ] {
            let text = format!(r#"{{"users": [{}]}}"#, users.join(","));
            let error = parse_users(&text).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        assert!(parse_users(r#"{"users": [], "tenant": "x"}"#).is_err(), "unknown fields are refused");
    }

    #[test]
    fn demo_mode_needs_the_corpus_the_published_key_and_loopback() {
        let mut settings = Settings::defaults();
        assert!(DemoUsers::demo_mode(&settings));
        settings.server.bind = "0.0.0.0:8080".into();
        assert!(!DemoUsers::demo_mode(&settings));
        let mut settings = Settings::defaults();
        settings.auth.hs256_secret = "a-private-secret".into();
        assert!(!DemoUsers::demo_mode(&settings));
        let mut settings = Settings::defaults();
        settings.demo.load = false;
        assert!(!DemoUsers::demo_mode(&settings));
        let mut settings = Settings::defaults();
        settings.demo.users.clear();
        assert!(!DemoUsers::demo_mode(&settings));
    }
}
