//! The HTTP server: the actix-web application factory and `serve`, which runs it on
//! `server.bind` until SIGTERM/SIGINT (graceful shutdown is actix-web's: in-flight requests
//! finish, new connections are refused). What it serves is composed by [`crate::app`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix_web::{App, HttpServer, middleware, web};

use crate::app::{StartError, build_state_with, load_corpus};
use crate::config::Settings;
use crate::providers::Providers;

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
        .configure(super::configure(&settings))
}

/// The server that holds the port while the state loads: `/healthz`, `/readyz` with the
/// progress of opening the data directory, and 503 `starting` for every other path. It does not
/// handle signals (a stop during the load ends the process; nothing was acknowledged yet).
fn loading_server(
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

/// Runs the server on `settings.server.bind` until a shutdown signal. Refuses to start when the
/// settings may not be served ([`Settings::validate_for_serving`]).
pub async fn serve(settings: Arc<Settings>, providers: Providers) -> Result<(), StartError> {
    settings.validate_for_serving()?;
    super::console::DemoUsers::from_settings(&settings)
        .map_err(|reason| StartError::Demo { path: settings.demo.users.clone(), reason })?;
    // The port is bound once: while the state loads, a small server on it answers `/healthz`
    // and `/readyz` (503 with the load's progress) and 503 `starting` to anything else.
    let listener = std::net::TcpListener::bind(&settings.server.bind)?;
    let names = super::ops::Names {
        embedder: providers.embedder.name().to_owned(),
        generator: providers.generator.name().to_owned(),
    };
    let loading = loading_server(listener.try_clone()?, names)?;
    let loading_handle = loading.handle();
    actix_rt::spawn(loading);
    if let Ok(address) = listener.local_addr() {
        eprintln!("warrant loading on http://{address} (/readyz reports the progress)");
    }
    let built = build_state_with(Arc::clone(&settings), providers).await;
    loading_handle.stop(true).await;
    let (state, fresh) = built?;
    if fresh && settings.demo.load {
        let count = load_corpus(state.writer.as_ref(), Path::new(&settings.demo.corpus)).await?;
        tracing::info!(documents = count, corpus = %settings.demo.corpus, "demo corpus loaded");
    }
    state.ready.store(true, Ordering::SeqCst);
    let server_state = state.clone();
    let server = HttpServer::new(move || app(server_state.clone()))
        .workers(match settings.server.workers {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            workers => workers,
        })
        .shutdown_timeout(10)
        .listen(listener)?;
    for address in server.addrs() {
        eprintln!("warrant listening on http://{address}");
    }
    eprintln!("embedder: {}", state.reader.embedder_name());
    if settings.demo.load {
        eprintln!(
            "try:\n  TOKEN=$(cargo run -q --release -- token --tenant acme --sub alice --groups everyone,engineering)\n  \
             curl -s {}/v1/answer -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n    \
             -d '{{\"question\": \"How much are hotel stays reimbursed per night in London?\"}}'",
            server.addrs().first().map(|address| format!("http://{address}")).unwrap_or_default()
        );
    }
    server.run().await?;
    // Graceful shutdown: the next start loads the indexes instead of rebuilding them, replays
    // no ACL change and trusts the sealed store without checking every page.
    if let Some(engine) = &state.engine {
        engine.close().await;
    }
    Ok(())
}
