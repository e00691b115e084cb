//! The HTTP servers: the actix-web application factory ([`app`]) and the small server that holds
//! the port while the state loads ([`loading_server`]). [`crate::app::serve`] runs them.

use std::sync::Arc;

use actix_web::{App, HttpServer, middleware, web};

use super::AppState;

/// The actix-web application factory for a state (used by `serve` and by tests).
pub fn app(
    state: web::Data<AppState>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let settings = Arc::clone(&state.settings);
    App::new()
        .app_data(state)
        .app_data(web::Data::new(super::host::HostPolicy::from_settings(&settings)))
        .wrap(middleware::from_fn(super::host::check_host))
        .wrap(middleware::from_fn(super::request_id))
        .wrap(middleware::from_fn(super::ops::count_responses))
        .configure(super::mcp::configure(&settings))
        .configure(super::configure(&settings))
}

/// The server that holds the port while the state loads: `/healthz`, `/readyz` with the
/// progress of opening the data directory, and 503 `starting` for every other path. It does not
/// handle signals (a stop during the load ends the process; nothing was acknowledged yet).
pub fn loading_server(
    listener: std::net::TcpListener,
    names: super::ops::Names,
) -> std::io::Result<actix_web::dev::Server> {
    let names = web::Data::new(names);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(names.clone())
            .route("/healthz", web::get().to(super::ops::healthz))
            .route("/readyz", web::get().to(super::ops::loading))
            .default_service(web::to(super::ops::not_yet))
    })
    .workers(1)
    .disable_signals()
    // No connection outlives the loading server: each answer closes its connection, and the
    // stop lets answers in progress finish, so a client never sees a reset at the handover.
    .keep_alive(actix_web::http::KeepAlive::Disabled)
    .shutdown_timeout(1)
    .listen(listener)?
    .run())
}
