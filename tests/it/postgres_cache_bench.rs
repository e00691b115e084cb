//! Measurements of the postgres backend's tenant cache (issue 58's goals; BENCHMARKS.md "Tenants
//! held in memory"), not checks: every test here is `#[ignore]`d and prints figures.
//!
//! - [`postgres_cache_bench_single_node`]: one tenant of `WARRANT_PG_BENCH_CHUNKS` (100,000)
//!   chunks on one PostgreSQL, read by the embedded engine (the same documents in memory), the
//!   postgres backend with the tenant cached, and the same node's SQL path, side by side in one
//!   run: latency one request at a time (p50, p99, CPU per request) and requests/s with
//!   concurrent clients, plus the tenant's cold load from the database and, after a restart,
//!   from the node's local index cache.
//! - [`postgres_cache_bench_citus_two_nodes`]: `WARRANT_PG_BENCH_TENANTS` (20) tenants of
//!   `WARRANT_PG_BENCH_TENANT_CHUNKS` (10,000) chunks on the Citus cluster, two warrant nodes whose
//!   caches each hold about half of them (tenant `i` has affinity to node `i % 2`): reads that hit
//!   the node's cache, reads that miss it (the node cannot cache the tenant: the epoch statement,
//!   then SQL), the SQL path for reference, and what a real miss starts (a load, an eviction).
//!
//! The corpora are the measurement corpus of `postgres.rs` (the same seeded generator; one seed
//! per tenant on Citus) in databases named `warrant_h3_*`, kept between runs: a database is
//! reused when it holds every tenant's chunks and its indexes, else it is dropped and loaded
//! again. The loader is the backend's own upsert (batches of 1,000 documents, several in flight,
//! no statement timeout) with the HNSW index of `chunks`, whose upkeep dominates a write, dropped
//! during the load and created again, with its definition as the migrations made it, before
//! anything is measured.
//!
//! CPU is read from `/proc` (utime + stime, at 100 ticks a second): warrant's is this test
//! process's; the database's is that of every `postgres` process serving the measured database
//! (its name is in the process title: client backends, Citus's connections to the workers,
//! autovacuum), and, as an upper bound, of every `postgres` process of the machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use warrant::embed::HashedEmbedder;
use warrant::embedded::{Engine, EngineParams};
use warrant::postgres::{CacheParams, DatabaseLimits, PostgresBackend};
use warrant::retrieval::{DocumentInput, Retrieved};

use crate::citus::{APP_ROLE, ensure_app_role, with_database, with_user};
use crate::postgres::{MEASUREMENT_SEED, as_superuser, measurement_texts, params, percentiles, plain_client};
use crate::support::{doc, principal};

/// The embedder's dimension of the measurement corpus.
const DIMENSION: usize = 384;
/// Documents per upsert of the loader.
const LOAD_BATCH: usize = 1_000;
/// The indexes of `chunks` dropped during a load and created again after it: the HNSW graph,
/// whose upkeep dominates a write (migration 0004 dropped the GIN index of `search`).
const DEFERRED_INDEXES: [&str; 1] = ["chunks_embedding_hnsw"];

/// A number from the environment, or `default`.
fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// Document `index` of a measurement corpus: readable by `all`, one of 10 groups, one of 100 and
/// one of 1,000 (as `postgres.rs` writes it).
fn corpus_document(index: usize, text: &str) -> DocumentInput {
    let mut input = doc(&format!("d{index}"), "", text, &[]);
    input.acl.groups =
        vec!["all".into(), format!("ten{}", index % 10), format!("pct{}", index % 100), format!("per{}", index % 1000)];
    input
}

/// The limits of the loader's connections: no statement timeout (an upsert of a tenant waits for
/// the tenant's lock while another batch of it commits).
fn loader_limits() -> DatabaseLimits {
    DatabaseLimits { statement_timeout: Duration::ZERO, ..DatabaseLimits::default() }
}

/// Where the measured database lives: one server, or a Citus coordinator and its workers.
struct Cluster {
    /// A superuser's URL of the server (the coordinator on Citus).
    server: String,
    /// The Citus workers (`host:port`); empty on one server.
    workers: Vec<String>,
}

impl Cluster {
    /// A superuser's URL of `worker` for `database`.
    fn worker_url(&self, worker: &str, database: &str) -> String {
        let user = crate::citus::user_of(&self.server);
        format!("postgres://{user}@{worker}/{database}")
    }

    /// Drops `name` on the server and on every worker, where it exists.
    async fn drop_database(&self, name: &str) {
        let mut servers = vec![self.server.clone()];
        servers.extend(self.workers.iter().map(|worker| self.worker_url(worker, "postgres")));
        for server in servers {
            // Test-only DDL: the name is built by this file from numbers, never input.
            plain_client(&server)
                .await
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .expect("drop the incomplete database");
        }
    }

    /// The database `name` loaded with `tenants` (each a name and its texts), for [`APP_ROLE`]:
    /// reused when it holds every tenant's chunks and the deferred indexes, else made again.
    async fn loaded_database(&self, name: &str, tenants: &[(String, Vec<String>)], parallel: usize) -> String {
        ensure_app_role(&self.server, &self.workers).await;
        let server = plain_client(&self.server).await;
        let exists =
            server.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await.unwrap().is_some();
        let superuser_url = with_database(&self.server, name);
        if exists {
            let superuser = plain_client(&superuser_url).await;
            if chunks_complete(&superuser, tenants).await {
                if !indexes_present(&superuser).await {
                    // A run stopped between the load and the indexes: only they are made again.
                    eprintln!("{name} lacks its deferred indexes: creating them");
                    create_indexes(&superuser, &MIGRATION_DEFINITIONS.map(str::to_owned)).await;
                }
                eprintln!("reusing {name}");
                return with_user(&superuser_url, APP_ROLE);
            }
            eprintln!("{name} is incomplete: loading it again");
            self.drop_database(name).await;
        }
        // Test-only DDL: the name is built by this file from numbers, never input.
        server.batch_execute(&format!("CREATE DATABASE {name} OWNER {APP_ROLE}")).await.expect("create database");
        let url = if self.workers.is_empty() {
            plain_client(&superuser_url).await.batch_execute("CREATE EXTENSION vector").await.expect("pgvector");
            with_user(&superuser_url, APP_ROLE)
        } else {
            crate::citus::distributed_database(&self.server, name, &self.workers, DIMENSION).await
        };
        let loader =
            PostgresBackend::connect_limited(params(&url), loader_limits(), Arc::new(HashedEmbedder::new(DIMENSION)))
                .await
                .expect("the loader connects (and migrates)");
        let superuser = plain_client(&as_superuser(&url)).await;
        let definitions: Vec<String> = superuser
            .query(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'chunks'
                   AND indexname = ANY($1) ORDER BY indexname",
                &[&DEFERRED_INDEXES.to_vec()],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(definitions.len(), DEFERRED_INDEXES.len(), "the migrations made the deferred indexes");
        for index in DEFERRED_INDEXES {
            superuser.batch_execute(&format!("DROP INDEX {index}")).await.expect("drop a deferred index");
        }
        let started = Instant::now();
        // Batches taken from the tenants in turn: a tenant's writes wait for each other (its
        // epoch row's lock), so the batches in flight are of different tenants where there are.
        let most = tenants.iter().map(|(_, texts)| texts.len().div_ceil(LOAD_BATCH)).max().unwrap_or(0);
        let batches = (0..most).flat_map(|number| {
            tenants.iter().filter_map(move |(tenant, texts)| {
                let first = number * LOAD_BATCH;
                let batch = texts.get(first..texts.len().min(first + LOAD_BATCH)).filter(|batch| !batch.is_empty())?;
                let documents: Vec<DocumentInput> =
                    batch.iter().enumerate().map(|(offset, text)| corpus_document(first + offset, text)).collect();
                Some((tenant.clone(), documents))
            })
        });
        let loader = &loader;
        futures::stream::iter(batches)
            .map(|(tenant, documents)| async move { loader.upsert(&tenant, documents).await.expect("a batch loads") })
            .buffer_unordered(parallel.max(1))
            .collect::<Vec<_>>()
            .await;
        let written = started.elapsed();
        let indexing = Instant::now();
        create_indexes(&superuser, &definitions).await;
        let chunks: usize = tenants.iter().map(|(_, texts)| texts.len()).sum();
        eprintln!(
            "loaded {chunks} chunks in {} tenants: written in {:.1} s ({parallel} batches in flight), \
             indexes and VACUUM ANALYZE {:.1} s",
            tenants.len(),
            written.as_secs_f64(),
            indexing.elapsed().as_secs_f64()
        );
        assert!(
            chunks_complete(&superuser, tenants).await && indexes_present(&superuser).await,
            "the loaded database is complete"
        );
        url
    }
}

/// The deferred indexes as migration 0001 creates them (used when a run stopped after dropping
/// them: a fresh load reads their definitions from `pg_indexes` before it drops them).
const MIGRATION_DEFINITIONS: [&str; 1] =
    ["CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) \
     WITH (m = 16, ef_construction = 100)"];

/// Creates `definitions` (one statement each: Citus refuses several commands in one string it
/// propagates to the workers), then `VACUUM ANALYZE`.
async fn create_indexes(superuser: &tokio_postgres::Client, definitions: &[String]) {
    superuser.batch_execute("SET maintenance_work_mem = '1GB'").await.expect("maintenance_work_mem");
    for definition in definitions {
        superuser.batch_execute(definition).await.expect("create a deferred index again");
    }
    superuser.batch_execute("VACUUM ANALYZE").await.expect("vacuum");
}

/// Whether the database of `superuser` holds the deferred indexes.
async fn indexes_present(superuser: &tokio_postgres::Client) -> bool {
    let indexes = superuser
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'chunks'
               AND indexname = ANY($1)",
            &[&DEFERRED_INDEXES.to_vec()],
        )
        .await
        .map_or(0, |row| row.get::<_, i64>(0));
    indexes == DEFERRED_INDEXES.len() as i64
}

/// Whether the database of `superuser` holds every tenant's chunks.
async fn chunks_complete(superuser: &tokio_postgres::Client, tenants: &[(String, Vec<String>)]) -> bool {
    let Ok(rows) = superuser.query("SELECT tenant_id, count(*) FROM chunks GROUP BY tenant_id", &[]).await else {
        return false;
    };
    let counts: std::collections::BTreeMap<String, i64> =
        rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1))).collect();
    counts.len() == tenants.len()
        && tenants.iter().all(|(tenant, texts)| counts.get(tenant).copied() == Some(texts.len() as i64))
}

/// The machine's load averages (1, 5 and 15 minutes), as `/proc/loadavg` says them.
fn load_average() -> String {
    let read = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    read.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// CPU seconds used so far: this process; the `postgres` processes whose title names
/// `database`; every `postgres` process of the machine.
///
/// Reading them scans `/proc` (each process's `stat`, a postgres process's `cmdline`): with a
/// Citus cluster's hundreds of processes that is a few ms of this process's own CPU, so a
/// measured interval is opened by [`Cpu::before`] (the scan, then this process's counter) and
/// closed by [`Cpu::after`] (this process's counter, then the scan): neither scan falls inside
/// it (BENCHMARKS.md, the Citus section at 1,000,000 chunks, says what one scan inside cost).
#[derive(Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) warrant: f64,
    pub(crate) database: f64,
    pub(crate) all_postgres: f64,
}

/// This process's CPU seconds.
fn own_cpu() -> f64 {
    std::fs::read_to_string("/proc/self/stat").ok().and_then(|stat| process_cpu(&stat)).map_or(0.0, |(_, used)| used)
}

/// A process's name and CPU seconds (utime + stime, at 100 ticks a second) from its
/// `/proc/<pid>/stat` line.
fn process_cpu(stat: &str) -> Option<(String, f64)> {
    let (head, tail) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_owned();
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let used = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((name, used / 100.0))
}

impl Cpu {
    /// Opens a measured interval: the database's processes, then this process.
    pub(crate) fn before(database: &str) -> Self {
        let postgres = Self::postgres(database);
        Self { warrant: own_cpu(), ..postgres }
    }

    /// Closes a measured interval: this process, then the database's processes.
    pub(crate) fn after(database: &str) -> Self {
        let warrant = own_cpu();
        Self { warrant, ..Self::postgres(database) }
    }

    /// The `postgres` processes' CPU (this process's left 0).
    fn postgres(database: &str) -> Self {
        let mut cpu = Self::default();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some((name, used)) =
                std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|stat| process_cpu(&stat))
            else {
                continue;
            };
            if name != "postgres" {
                continue;
            }
            cpu.all_postgres += used;
            let title = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&title).split([' ', '\0']).any(|word| word == database) {
                cpu.database += used;
            }
        }
        cpu
    }

    pub(crate) fn since(self, before: Self) -> Self {
        Self {
            warrant: self.warrant - before.warrant,
            database: self.database - before.database,
            all_postgres: self.all_postgres - before.all_postgres,
        }
    }

    fn add(&mut self, other: Self) {
        self.warrant += other.warrant;
        self.database += other.database;
        self.all_postgres += other.all_postgres;
    }
}

/// One way of reading measured: its latencies, CPU, requests and failures.
#[derive(Default)]
struct Figures {
    latencies: Vec<Duration>,
    cpu: Cpu,
    failures: usize,
    /// Requests answered in the throughput rounds, and the rounds' seconds and CPU.
    rounds: Vec<(usize, f64, Cpu)>,
}

impl Figures {
    fn print(&self, name: &str) {
        let count = self.latencies.len().max(1) as f64;
        let (p50, p99, mean) = percentiles(self.latencies.clone());
        eprintln!(
            "{name:<28} p50 {p50:>8.2} ms  p99 {p99:>8.2} ms  mean {mean:>8.2} ms  CPU per request: warrant \
             {:>6.2} ms, database {:>6.2} ms (all postgres {:>6.2} ms)  failed {}",
            self.cpu.warrant * 1e3 / count,
            self.cpu.database * 1e3 / count,
            self.cpu.all_postgres * 1e3 / count,
            self.failures
        );
        if self.rounds.is_empty() {
            return;
        }
        let mut rates: Vec<f64> = self.rounds.iter().map(|(requests, seconds, _)| *requests as f64 / seconds).collect();
        rates.sort_by(f64::total_cmp);
        let (requests, cpu) = self.rounds.iter().fold((0, Cpu::default()), |(requests, mut cpu), round| {
            cpu.add(round.2);
            (requests + round.0, cpu)
        });
        let requests = requests.max(1) as f64;
        eprintln!(
            "{:<28} requests/s (median of {} rounds) {:>8.1} [{}]  CPU per request under load: warrant {:>6.2} ms, \
             database {:>6.2} ms (all postgres {:>6.2} ms)",
            "",
            rates.len(),
            rates[rates.len() / 2],
            rates.iter().map(|rate| format!("{rate:.1}")).collect::<Vec<_>>().join(", "),
            cpu.warrant * 1e3 / requests,
            cpu.database * 1e3 / requests,
            cpu.all_postgres * 1e3 / requests
        );
    }

    fn p50(&self) -> f64 {
        percentiles(self.latencies.clone()).0
    }

    /// CPU per request, warrant plus the measured database, milliseconds.
    fn cpu_per_request(&self) -> f64 {
        (self.cpu.warrant + self.cpu.database) * 1e3 / self.latencies.len().max(1) as f64
    }

    fn median_rate(&self) -> f64 {
        let mut rates: Vec<f64> = self.rounds.iter().map(|(requests, seconds, _)| *requests as f64 / seconds).collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Whether a read answered with candidates (a read that failed or found nothing is a failure).
fn answered(result: &warrant::retrieval::RetrievalResult<Retrieved>) -> bool {
    result.as_ref().is_ok_and(|retrieved| !retrieved.candidates.is_empty())
}

/// Measurement (`--ignored`; BENCHMARKS.md "Tenants held in memory"): one tenant of
/// `WARRANT_PG_BENCH_CHUNKS` (100,000) chunks on one PostgreSQL (`WARRANT_TEST_DATABASE_URL`,
/// database `warrant_h3_single_<chunks>`), one principal reading every document, the 100
/// queries asked `WARRANT_PG_BENCH_PASSES` (2) times in turn of the embedded engine, the cached
/// tenant and the SQL path; then `WARRANT_PG_BENCH_ROUNDS` (3) rounds of
/// `WARRANT_PG_BENCH_SECONDS` (10) s per way with `WARRANT_PG_BENCH_CLIENTS` (4) concurrent
/// clients, the ways in turn. The cache's budget is `WARRANT_PG_BENCH_CACHE_MB` (2,048).
#[actix_web::test]
#[ignore = "measurement; run with --ignored against WARRANT_TEST_DATABASE_URL"]
async fn postgres_cache_bench_single_node() {
    let Ok(server) = std::env::var("WARRANT_TEST_DATABASE_URL") else {
        eprintln!("SKIPPED: set WARRANT_TEST_DATABASE_URL (tests/postgres.sh start prints it)");
        return;
    };
    let chunks = setting("WARRANT_PG_BENCH_CHUNKS", 100_000);
    let (texts, queries) = measurement_texts(chunks, MEASUREMENT_SEED);
    let name = format!("warrant_h3_single_{chunks}");
    let cluster = Cluster { server, workers: Vec::new() };
    let url = cluster
        .loaded_database(&name, &[("acme".to_owned(), texts.clone())], setting("WARRANT_PG_BENCH_LOAD_PARALLEL", 2))
        .await;

    eprintln!("load average before the measurement: {}", load_average());
    let settings = warrant::config::Settings::defaults();
    let embedder = Arc::new(HashedEmbedder::new(DIMENSION));
    let cache = CacheParams::with_budget_mb(setting("WARRANT_PG_BENCH_CACHE_MB", 2_048));
    let node = PostgresBackend::connect_cached(params(&url), DatabaseLimits::default(), cache, embedder.clone())
        .await
        .unwrap();
    let reader = principal("acme", "nobody", &["all"]);

    // The cold load: the first read is served by SQL and starts it.
    let before = Cpu::before(&name);
    let started = Instant::now();
    let first = node.retrieve(&reader, &queries[0]).await;
    let first_read = started.elapsed();
    assert!(answered(&first), "the read that started the load was answered (by SQL)");
    assert!(node.tenant_cache().settled("acme", Duration::from_secs(1_200)).await, "cached");
    let loaded = started.elapsed();
    let load_cpu = Cpu::after(&name).since(before);
    eprintln!(
        "cold load from the database: {:.2} s ({} MiB estimated; CPU warrant {:.1} s, database {:.1} s); \
         the read that started it: {:.1} ms by SQL",
        loaded.as_secs_f64(),
        node.tenant_cache().bytes_held() >> 20,
        load_cpu.warrant,
        load_cpu.database,
        first_read.as_secs_f64() * 1e3
    );

    // The same documents in an embedded engine (in memory).
    let engine = Engine::start(EngineParams::from_settings(&settings, DIMENSION), embedder.clone()).unwrap();
    let indexing = Instant::now();
    for (number, batch) in texts.chunks(LOAD_BATCH).enumerate() {
        let documents = batch
            .iter()
            .enumerate()
            .map(|(offset, text)| corpus_document(number * LOAD_BATCH + offset, text))
            .collect();
        engine.upsert("acme", documents).await.unwrap();
    }
    assert_eq!(engine.scope(&reader).len(), chunks as u64, "every document readable");
    eprintln!("embedded engine indexed {chunks} chunks in {:.1} s", indexing.elapsed().as_secs_f64());

    let ways = ["embedded", "postgres, tenant cached", "postgres, SQL path"];
    let ask = |way: usize, query: String| {
        let (node, engine, reader) = (&node, &engine, &reader);
        async move {
            match way {
                0 => engine.read_path().retrieve(&engine.scope(reader), &query, None).await,
                1 => node.retrieve(reader, &query).await,
                _ => node.retrieve_sql(reader, &query).await,
            }
        }
    };
    let mut figures: [Figures; 3] = Default::default();
    for pass in 0..setting("WARRANT_PG_BENCH_PASSES", 2) {
        for (index, query) in queries.iter().enumerate() {
            for way in (0..3).map(|turn| (index + pass + turn) % 3) {
                let before = Cpu::before(&name);
                let begun = Instant::now();
                let result = ask(way, query.clone()).await;
                figures[way].latencies.push(begun.elapsed());
                figures[way].cpu.add(Cpu::after(&name).since(before));
                if !answered(&result) {
                    figures[way].failures += 1;
                }
            }
        }
    }
    assert!(node.tenant_cache().holds("acme"), "the tenant stayed cached");

    let clients = setting("WARRANT_PG_BENCH_CLIENTS", 4);
    let seconds = Duration::from_secs(setting("WARRANT_PG_BENCH_SECONDS", 10) as u64);
    for round in 0..setting("WARRANT_PG_BENCH_ROUNDS", 3) {
        for way in (0..3).map(|turn| (round + turn) % 3) {
            let before = Cpu::before(&name);
            let begun = Instant::now();
            let counts = futures::future::join_all((0..clients).map(|client| {
                let ask = &ask;
                let queries = &queries;
                async move {
                    let (mut answered_count, mut failed, mut next) = (0, 0, client * 7);
                    while begun.elapsed() < seconds {
                        let result = ask(way, queries[next % queries.len()].clone()).await;
                        next += 1;
                        if answered(&result) { answered_count += 1 } else { failed += 1 }
                    }
                    (answered_count, failed)
                }
            }))
            .await;
            let elapsed = begun.elapsed().as_secs_f64();
            let cpu = Cpu::after(&name).since(before);
            let requests: usize = counts.iter().map(|(done, _)| done).sum();
            figures[way].failures += counts.iter().map(|(_, failed)| failed).sum::<usize>();
            figures[way].rounds.push((requests, elapsed, cpu));
        }
    }
    assert!(node.tenant_cache().holds("acme"), "the tenant stayed cached");

    eprintln!("load average after the measurement: {}", load_average());
    eprintln!(
        "{chunks} chunks, {} queries x {} passes one at a time; {clients} clients for {} s per way and round",
        queries.len(),
        setting("WARRANT_PG_BENCH_PASSES", 2),
        seconds.as_secs()
    );
    for (way, name) in ways.iter().enumerate() {
        figures[way].print(name);
    }
    let [embedded, cached, sql] = &figures;
    eprintln!(
        "cached / embedded: p50 {:.2}x, CPU {:.2}x, requests/s {:.2}x; SQL / cached: p50 {:.1}x, CPU {:.1}x, \
         requests/s {:.1}x fewer",
        cached.p50() / embedded.p50(),
        cached.cpu_per_request() / embedded.cpu_per_request().max(1e-9),
        cached.median_rate() / embedded.median_rate().max(1e-9),
        sql.p50() / cached.p50(),
        sql.cpu_per_request() / cached.cpu_per_request().max(1e-9),
        cached.median_rate() / sql.median_rate().max(1e-9)
    );
    drop(node);

    // The cold load from the node's local index cache (`storage.postgres.cache_dir`): a node
    // loads the tenant from the database and writes its set; a restarted node loads that set.
    let directory = tempfile::tempdir().unwrap();
    let with_local = || CacheParams {
        local_dir: Some(directory.path().to_owned()),
        ..CacheParams::with_budget_mb(setting("WARRANT_PG_BENCH_CACHE_MB", 2_048))
    };
    let writer =
        PostgresBackend::connect_cached(params(&url), DatabaseLimits::default(), with_local(), embedder.clone())
            .await
            .unwrap();
    assert!(answered(&writer.retrieve(&reader, &queries[0]).await), "read by SQL while loading");
    assert!(writer.tenant_cache().settled("acme", Duration::from_secs(1_200)).await, "cached");
    let epoch = writer.tenant_cache().cached_epoch("acme").expect("cached");
    let writing = Instant::now();
    while writer.tenant_cache().local_set_epoch("acme") != Some(epoch) {
        assert!(writing.elapsed() < Duration::from_secs(600), "the local set is written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let set_bytes: u64 = warrant::snapshot::directory_bytes(directory.path());
    eprintln!(
        "local index set written {:.2} s after the load ({} MiB on disk)",
        writing.elapsed().as_secs_f64(),
        set_bytes >> 20
    );
    drop(writer);
    let restarted =
        PostgresBackend::connect_cached(params(&url), DatabaseLimits::default(), with_local(), embedder.clone())
            .await
            .unwrap();
    let before = Cpu::before(&name);
    let started = Instant::now();
    assert!(answered(&restarted.retrieve(&reader, &queries[0]).await), "read by SQL while loading");
    assert!(restarted.tenant_cache().settled("acme", Duration::from_secs(1_200)).await, "cached");
    let load_cpu = Cpu::after(&name).since(before);
    assert_eq!(restarted.tenant_cache().loads_by_source().local, 1, "loaded from the local set");
    eprintln!(
        "cold load from the local index cache: {:.2} s (CPU warrant {:.1} s, database {:.1} s)",
        started.elapsed().as_secs_f64(),
        load_cpu.warrant,
        load_cpu.database
    );
}

/// Measurement (`--ignored`; BENCHMARKS.md "Tenants held in memory"): on the Citus cluster
/// (`WARRANT_TEST_CITUS_URL`, `WARRANT_TEST_CITUS_WORKERS`; database
/// `warrant_h3_citus_<tenants>x<chunks>`), `WARRANT_PG_BENCH_TENANTS` (20) tenants of
/// `WARRANT_PG_BENCH_TENANT_CHUNKS` (10,000) chunks, two warrant nodes whose caches hold about
/// half of them each (the budget: one tenant's estimate times half the tenants, plus half a
/// tenant), tenant `i` warmed on node `i % 2`. Then, `WARRANT_PG_BENCH_PASSES` (2) passes of 100
/// queries, each query of one tenant in turn, in turn: a hit (the tenant's node), a miss (a node
/// that cannot cache it: budget below one tenant, so the read is the epoch statement, then SQL)
/// and the SQL path. Last, the first read of a tenant on the other node (a real miss): its
/// latency, the load it starts and the eviction that follows.
#[actix_web::test]
#[ignore = "measurement; run with --ignored against WARRANT_TEST_CITUS_URL"]
async fn postgres_cache_bench_citus_two_nodes() {
    let (Ok(server), Ok(workers)) =
        (std::env::var("WARRANT_TEST_CITUS_URL"), std::env::var("WARRANT_TEST_CITUS_WORKERS"))
    else {
        eprintln!("SKIPPED: set WARRANT_TEST_CITUS_URL and _WORKERS (tests/citus.sh start prints them)");
        return;
    };
    let tenant_count = setting("WARRANT_PG_BENCH_TENANTS", 20).max(2);
    let chunks = setting("WARRANT_PG_BENCH_TENANT_CHUNKS", 10_000);
    let tenants: Vec<(String, Vec<String>, Vec<String>)> = (0..tenant_count)
        .map(|number| {
            let (texts, queries) =
                measurement_texts(chunks, MEASUREMENT_SEED ^ (number as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            (format!("t{number:02}"), texts, queries)
        })
        .collect();
    let name = format!("warrant_h3_citus_{tenant_count}x{chunks}");
    let cluster = Cluster { server, workers: workers.split(',').map(str::to_owned).collect() };
    let loading: Vec<(String, Vec<String>)> =
        tenants.iter().map(|(tenant, texts, _)| (tenant.clone(), texts.clone())).collect();
    let url = cluster.loaded_database(&name, &loading, setting("WARRANT_PG_BENCH_LOAD_PARALLEL", 4)).await;
    drop(loading);

    eprintln!("load average before the measurement: {}", load_average());
    let embedder = Arc::new(HashedEmbedder::new(DIMENSION));
    let connect = |budget_bytes: u64| {
        let (url, embedder) = (url.clone(), embedder.clone());
        async move {
            let cache = CacheParams { budget_bytes, ..CacheParams::with_budget_mb(1) };
            PostgresBackend::connect_cached(params(&url), DatabaseLimits::default(), cache, embedder).await.unwrap()
        }
    };
    let reader = |tenant: &str| principal(tenant, "nobody", &["all"]);

    // One tenant's estimate, from a probe node that holds it alone; that load is the cold load.
    let probe = connect(64 << 30).await;
    let before = Cpu::before(&name);
    let started = Instant::now();
    assert!(answered(&probe.retrieve(&reader(&tenants[0].0), &tenants[0].2[0]).await), "read by SQL while loading");
    assert!(probe.tenant_cache().settled(&tenants[0].0, Duration::from_secs(600)).await, "cached");
    let load_cpu = Cpu::after(&name).since(before);
    let per_tenant = probe.tenant_cache().bytes_held();
    eprintln!(
        "cold load of one tenant ({chunks} chunks) from the cluster: {:.2} s, {} MiB estimated (CPU warrant {:.1} s, \
         database {:.1} s)",
        started.elapsed().as_secs_f64(),
        per_tenant >> 20,
        load_cpu.warrant,
        load_cpu.database
    );
    drop(probe);

    let budget = per_tenant * (tenant_count as u64 / 2) + per_tenant / 2;
    let nodes = [connect(budget).await, connect(budget).await];
    // Budget below one tenant: every read of any tenant is a miss (the epoch, then SQL).
    let missing = connect(per_tenant / 2).await;
    let warming = Instant::now();
    for (number, (tenant, _, queries)) in tenants.iter().enumerate() {
        let node = &nodes[number % 2];
        assert!(answered(&node.retrieve(&reader(tenant), &queries[0]).await), "read by SQL while loading");
        assert!(node.tenant_cache().settled(tenant, Duration::from_secs(600)).await, "{tenant} cached");
        assert!(answered(&missing.retrieve(&reader(tenant), &queries[0]).await), "read by SQL");
    }
    for (number, node) in nodes.iter().enumerate() {
        let held: Vec<&str> = tenants
            .iter()
            .map(|(tenant, _, _)| tenant.as_str())
            .filter(|tenant| node.tenant_cache().holds(tenant))
            .collect();
        eprintln!(
            "node {number}: {} tenants cached, {} MiB of a {} MiB budget: {}",
            held.len(),
            node.tenant_cache().bytes_held() >> 20,
            budget >> 20,
            held.join(" ")
        );
    }
    eprintln!("both nodes warmed in {:.1} s", warming.elapsed().as_secs_f64());

    let ways = ["hit (the tenant's node)", "miss (epoch, then SQL)", "SQL path"];
    let mut figures: [Figures; 3] = Default::default();
    for pass in 0..setting("WARRANT_PG_BENCH_PASSES", 2) {
        for index in 0..100 {
            let (tenant, _, queries) = &tenants[(index + pass) % tenant_count];
            let number = (index + pass) % tenant_count;
            let asking = reader(tenant);
            for way in (0..3).map(|turn| (index + pass + turn) % 3) {
                let query = &queries[index % queries.len()];
                let before = Cpu::before(&name);
                let begun = Instant::now();
                let result = match way {
                    0 => nodes[number % 2].retrieve(&asking, query).await,
                    1 => missing.retrieve(&asking, query).await,
                    _ => nodes[number % 2].retrieve_sql(&asking, query).await,
                };
                figures[way].latencies.push(begun.elapsed());
                figures[way].cpu.add(Cpu::after(&name).since(before));
                if !answered(&result) {
                    figures[way].failures += 1;
                }
            }
        }
    }
    for (number, (tenant, _, _)) in tenants.iter().enumerate() {
        assert!(nodes[number % 2].tenant_cache().holds(tenant), "{tenant} stayed cached on its node");
    }
    eprintln!("load average after the measurement: {}", load_average());
    eprintln!(
        "{tenant_count} tenants x {chunks} chunks ({} in all), two nodes; {} reads per way",
        tenant_count * chunks,
        figures[0].latencies.len()
    );
    for (way, name) in ways.iter().enumerate() {
        figures[way].print(name);
    }
    let [hit, miss, sql] = &figures;
    eprintln!(
        "miss / hit: p50 {:.1}x, CPU {:.1}x; SQL / hit: p50 {:.1}x, CPU {:.1}x",
        miss.p50() / hit.p50(),
        miss.cpu_per_request() / hit.cpu_per_request().max(1e-9),
        sql.p50() / hit.p50(),
        sql.cpu_per_request() / hit.cpu_per_request().max(1e-9)
    );

    // A real miss: node 0 reads tenant 1 (node 1's); SQL answers while the load runs, then the
    // least recently used of node 0's tenants is evicted to make room.
    let (tenant, _, queries) = &tenants[1];
    let held_before = nodes[0].tenant_cache().cached_tenants();
    let started = Instant::now();
    let first = nodes[0].retrieve(&reader(tenant), &queries[0]).await;
    let first_read = started.elapsed();
    assert!(answered(&first), "a miss is answered by SQL");
    assert!(nodes[0].tenant_cache().settled(tenant, Duration::from_secs(600)).await, "loaded on a miss");
    eprintln!(
        "a miss on the other node: the read {:.1} ms (SQL), the tenant ready {:.2} s later; node 0 held {held_before} \
         tenants before, {} after (the least recently used evicted)",
        first_read.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64(),
        nodes[0].tenant_cache().cached_tenants()
    );
}
