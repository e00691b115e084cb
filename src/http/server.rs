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

/// Runs the server on `settings.server.bind` until a shutdown signal. Refuses to start when the
/// settings may not be served ([`Settings::validate_for_serving`]).
pub async fn serve(settings: Arc<Settings>, providers: Providers) -> Result<(), StartError> {
    settings.validate_for_serving()?;
    super::console::DemoUsers::from_settings(&settings)
        .map_err(|reason| StartError::Demo { path: settings.demo.users.clone(), reason })?;
    let (state, fresh) = build_state_with(Arc::clone(&settings), providers).await?;
    if fresh && settings.demo.load {
        let count = load_corpus(state.writer.as_ref(), Path::new(&settings.demo.corpus)).await?;
        tracing::info!(documents = count, corpus = %settings.demo.corpus, "demo corpus loaded");
    }
    state.ready.store(true, Ordering::SeqCst);
    let bind = settings.server.bind.clone();
    let server_state = state.clone();
    let server = HttpServer::new(move || app(server_state.clone()))
        .workers(match settings.server.workers {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            workers => workers,
        })
        .shutdown_timeout(10)
        .bind(&bind)?;
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
    // Graceful shutdown: the next start loads the indexes instead of rebuilding them.
    if let Some(engine) = &state.engine {
        engine.write_indexes().await;
    }
    Ok(())
}
