//! Process-wide telemetry: the Prometheus recorder (installed once per process) and tracing.
//!
//! Metric labels are fixed vocabularies (stage, status, reason, index, strategy, result): never
//! tenant, user, document ids or query text.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Histogram buckets for stage durations: 50 µs .. 30 s.
const STAGE_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder on first call and returns its handle.
pub fn metrics_handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), STAGE_BUCKETS)
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding the library); then our
            // handle renders nothing, which is acceptable for that embedding.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_histogram!(
        "warrant_stage_duration_seconds",
        metrics::Unit::Seconds,
        "duration of each answer pipeline stage"
    );
    metrics::describe_counter!("warrant_answers_total", "answers by status and abstention reason");
    metrics::describe_counter!("warrant_citations_rejected_total", "rejected citations and claims by reason");
    metrics::describe_counter!("warrant_filter_strategy_total", "filtered searches by index and strategy");
    metrics::describe_gauge!("warrant_acl_epoch", "current ACL epoch");
    metrics::describe_gauge!("warrant_in_flight_requests", "answer requests in flight");
    metrics::describe_gauge!("warrant_index_chunks", "chunks stored in all shards");
    metrics::describe_counter!("warrant_scope_violations_total", "index hits outside the scope (must stay 0)");
    metrics::describe_counter!(
        "warrant_replica_requests_total",
        "requests of configured replicas (auth.replica_subjects) by replica and endpoint"
    );
    metrics::describe_counter!(
        "warrant_replica_tokens_refused_total",
        "tokens with role replica whose subject is not in auth.replica_subjects (the role was ignored)"
    );
    metrics::describe_counter!(
        "warrant_jwks_fetches_total",
        "fetches of the identity provider's keys by outcome (ok, error) and trigger (start, schedule, request)"
    );
    metrics::describe_counter!(
        "warrant_jwks_refetches_refused_total",
        "tokens naming a key not held whose fetch auth.oidc.unknown_kid_refetch_seconds refused"
    );
    metrics::describe_counter!(
        "warrant_hosts_refused_total",
        "requests refused with 421 host_not_allowed (a Host header outside the allowed names)"
    );
    metrics::describe_counter!(
        "warrant_postgres_statements_cancelled_total",
        "postgres read statements cancelled because their caller stopped waiting"
    );
    metrics::describe_counter!(
        "warrant_postgres_lexical_searches_total",
        "postgres lexical searches with hits, by scoring (pruned: the selective terms' chunks alone; full)"
    );
    metrics::describe_counter!(
        "warrant_verifier_sentence_cache_total",
        "verifier sentence-vector cache lookups by result (hit, miss)"
    );
    metrics::describe_counter!(
        "warrant_verifier_judge_calls_total",
        "cited texts put to the verifier's language model by outcome (yes, no, below_floor, timeout, unreachable, status, unusable)"
    );
    // Make the contract's series visible before the first request.
    metrics::gauge!("warrant_acl_epoch").set(0.0);
    metrics::gauge!("warrant_in_flight_requests").set(0.0);
    metrics::counter!("warrant_scope_violations_total").absolute(0);
}

/// Initializes tracing to stderr, as text or JSON, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
