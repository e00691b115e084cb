//! The PostgreSQL backend on a running Citus 13.2.2 cluster (issue 46): a coordinator and two
//! workers (`tests/citus.sh start` prints `WARRANT_TEST_CITUS_URL` and
//! `WARRANT_TEST_CITUS_WORKERS`). Each test database is distributed the way an operator does it:
//! created on every node with Citus and pgvector, the workers registered, warrant's migrations
//! applied by its own migrator, then `docs/citus.sql`. The tests skip with a loud message
//! without a cluster.
//!
//! - Routing: `EXPLAIN` of every statement of `src/postgres/sql/` with real parameters; every
//!   tenant statement must be one task on one worker (a single-shard router plan), never a
//!   fan-out to every worker per request.
//! - Row-level security (migration 0007) on every shard of every tenant table, whether the tables
//!   were distributed after the migration or before it.
//! - `.ci/run` also runs the scope-safety tests of `postgres.rs` on the cluster
//!   (`WARRANT_TEST_DATABASE_URL` pointed at the coordinator with the workers named: their
//!   `fresh_database` distributes each database through [`distributed_database`]).

use std::sync::Arc;

#[path = "citus_freeze.rs"]
mod freeze;
#[path = "citus_grow.rs"]
mod grow;

use tokio_postgres::types::{ToSql, Type};
use warrant::postgres::sql;

/// The coordinator's URL and the workers' `host:port`, or `None` (with a loud message).
fn cluster() -> Option<(String, Vec<String>)> {
    let (Ok(url), Ok(workers)) = (std::env::var("WARRANT_TEST_CITUS_URL"), std::env::var("WARRANT_TEST_CITUS_WORKERS"))
    else {
        let notice = "SKIPPED: citus test (tests/citus.sh start prints WARRANT_TEST_CITUS_URL and _WORKERS)\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        return None;
    };
    Some((url, workers.split(',').map(str::to_owned).collect()))
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("cluster node");
    tokio::spawn(connection);
    client
}

/// `url` with its database replaced by `database`.
pub(crate) fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("url ends with /database");
    format!("{base}/{database}")
}

/// The role of `url` (`postgres://role@host:port/database`).
pub(crate) fn user_of(url: &str) -> &str {
    url.split("://").nth(1).and_then(|rest| rest.split('@').next()).expect("postgres://role@host")
}

/// `url` with its role replaced by `role`.
pub(crate) fn with_user(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("postgres://role@host");
    let (_, address) = rest.split_once('@').expect("postgres://role@host");
    format!("{scheme}://{role}@{address}")
}

/// The role the backend connects as in the tests: neither a superuser nor BYPASSRLS, and the
/// owner of each test database and of warrant's tables in it (it runs the migrations), so the
/// row-level security of migration 0007 binds its statements as it binds a production node's
/// (the tables FORCE it on their owner; SECURITY.md). Set-up, distribution and the tests'
/// reference checks run as the server's superuser.
pub(crate) const APP_ROLE: &str = "warrant_app";

/// Creates [`APP_ROLE`] on the server of `url` and on `workers` (`host:port`) where it is missing,
/// once per server and test process. Roles are per server, and a role Citus did not create itself
/// is not propagated, so each node gets it here.
pub(crate) async fn ensure_app_role(url: &str, workers: &[String]) {
    static CREATED: tokio::sync::Mutex<std::collections::BTreeSet<String>> =
        tokio::sync::Mutex::const_new(std::collections::BTreeSet::new());
    let mut created = CREATED.lock().await;
    let user = user_of(url).to_owned();
    let mut servers = vec![url.to_owned()];
    servers.extend(workers.iter().map(|worker| format!("postgres://{user}@{worker}/postgres")));
    for server in servers {
        if created.contains(&server) {
            continue;
        }
        connect(&server)
            .await
            .batch_execute(&format!(
                "DO $$ BEGIN
                    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                        CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS;
                    END IF;
                END $$"
            ))
            .await
            .expect("application role");
        created.insert(server);
    }
}

/// Distributes the database `name`, already created on the coordinator at `url` (a superuser's)
/// and owned by [`APP_ROLE`], over `workers`: the database (owned by the same role), Citus and
/// pgvector on every worker, Citus and pgvector on the coordinator, the workers registered,
/// warrant's migrations (its own migrator, `dimension`, as [`APP_ROLE`]), then `docs/citus.sql`
/// (as the superuser). Returns the database's URL for [`APP_ROLE`].
pub(crate) async fn distributed_database(url: &str, name: &str, workers: &[String], dimension: usize) -> String {
    // One at a time: registering the workers syncs cluster-wide objects (roles) to them, and two
    // databases doing it at once fail with "tuple concurrently updated" on a worker.
    static SETUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = SETUP.lock().await;
    ensure_app_role(url, workers).await;
    let user = user_of(url);
    for worker in workers {
        let worker_url = format!("postgres://{user}@{worker}/postgres");
        // Test-only DDL: the name is generated by the test, never input.
        connect(&worker_url)
            .await
            .batch_execute(&format!("CREATE DATABASE {name} OWNER {APP_ROLE}"))
            .await
            .expect("worker database");
        let database = connect(&with_database(&worker_url, name)).await;
        database.batch_execute("CREATE EXTENSION citus; CREATE EXTENSION vector;").await.expect("worker extensions");
    }
    let database_url = with_database(url, name);
    let coordinator = connect(&database_url).await;
    coordinator
        .batch_execute("CREATE EXTENSION citus; CREATE EXTENSION vector;")
        .await
        .expect("coordinator extensions");
    let host_port = |address: &str| {
        let (host, port) = address.rsplit_once(':').expect("host:port");
        (host.to_owned(), port.parse::<i32>().expect("port"))
    };
    let coordinator_address = url.split('@').nth(1).and_then(|rest| rest.split('/').next()).expect("host:port");
    let (host, port) = host_port(coordinator_address);
    coordinator.query_one("SELECT citus_set_coordinator_host($1, $2)", &[&host, &port]).await.expect("coordinator");
    for worker in workers {
        let (host, port) = host_port(worker);
        coordinator.query_one("SELECT citus_add_node($1, $2)", &[&host, &port]).await.expect("worker registered");
    }
    let application_url = with_user(&database_url, APP_ROLE);
    let params = crate::postgres::params(&application_url);
    warrant::postgres::migrate_database(&params, dimension).await.expect("migrations");
    let distribute = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/citus.sql")).unwrap();
    coordinator.batch_execute(&distribute).await.expect("docs/citus.sql");
    application_url
}

/// Every statement of `sql/`, and whether it is a tenant statement (must route to one shard)
/// or database-wide by design (and why).
const STATEMENTS: &[(&str, &str, Option<&str>)] = &[
    ("CREATE_MIGRATIONS", sql::CREATE_MIGRATIONS, Some("migrations: DDL, run once per database")),
    ("LOCK_MIGRATIONS", sql::LOCK_MIGRATIONS, Some("migrations: an advisory lock on the coordinator")),
    ("APPLIED_MIGRATIONS", sql::APPLIED_MIGRATIONS, Some("migrations: a reference table")),
    ("RECORD_MIGRATION", sql::RECORD_MIGRATION, Some("migrations: a reference table")),
    ("META_GET", sql::META_GET, Some("start-up: warrant_meta, a reference table")),
    ("META_SET", sql::META_SET, Some("start-up: warrant_meta, a reference table")),
    ("SESSION_SETTINGS", sql::SESSION_SETTINGS, Some("per connection: reads no table")),
    ("ENTER_TENANT", sql::ENTER_TENANT, Some("per transaction: SET LOCAL on the coordinator, replayed to the workers")),
    (
        "ENTER_DATABASE",
        sql::ENTER_DATABASE,
        Some("per transaction: SET LOCAL on the coordinator, replayed to the workers"),
    ),
    ("ROLE_BYPASSES_ROW_SECURITY", sql::ROLE_BYPASSES_ROW_SECURITY, Some("start-up: pg_roles, a catalog")),
    ("VECTOR_SEARCH", sql::VECTOR_SEARCH, None),
    ("VECTOR_SEARCH_EXACT", sql::VECTOR_SEARCH_EXACT, None),
    ("LEXICAL_SEARCH", sql::LEXICAL_SEARCH, None),
    ("LEXICAL_SEARCH_EXHAUSTIVE", sql::LEXICAL_SEARCH_EXHAUSTIVE, None),
    ("READABLE_VERSIONS", sql::READABLE_VERSIONS, None),
    ("DOCUMENT_READ", sql::DOCUMENT_READ, None),
    ("HIGHEST_EPOCH", sql::HIGHEST_EPOCH, Some("/readyz on a single server only (postgres::health: never on Citus)")),
    ("ANY_TENANT", sql::ANY_TENANT, Some("start-up: whether the demo corpus may be loaded")),
    ("TENANT_ENSURE", sql::TENANT_ENSURE, None),
    ("TENANT_LOCK", sql::TENANT_LOCK, None),
    ("TENANT_EPOCH", sql::TENANT_EPOCH, None),
    ("TENANT_SET_EPOCH", sql::TENANT_SET_EPOCH, None),
    ("READER_COUNTS_ADD", sql::READER_COUNTS_ADD, None),
    ("LEXEME_COUNTS_ADD", sql::LEXEME_COUNTS_ADD, None),
    ("DOCUMENT_HEAD", sql::DOCUMENT_HEAD, None),
    ("DOCUMENT_UPSERT_HEAD", sql::DOCUMENT_UPSERT_HEAD, None),
    ("DOCUMENT_DELETE_HEAD", sql::DOCUMENT_DELETE_HEAD, None),
    ("NEXT_DOC_ORDINAL", sql::NEXT_DOC_ORDINAL, Some("a sequence on the coordinator")),
    ("VERSION_INSERT", sql::VERSION_INSERT, None),
    ("POSTINGS_DELETE", sql::POSTINGS_DELETE, None),
    ("CHUNKS_DELETE", sql::CHUNKS_DELETE, None),
    ("CHUNK_INSERT", sql::CHUNK_INSERT, None),
    ("POSTINGS_INSERT", sql::POSTINGS_INSERT, None),
    ("POSTINGS_CHECK", sql::POSTINGS_CHECK, None),
    ("LEXICAL_TOTALS", sql::LEXICAL_TOTALS, None),
    ("LEXICAL_TOTALS_RECOUNTED", sql::LEXICAL_TOTALS_RECOUNTED, None),
    ("READERS_DELETE_ALL", sql::READERS_DELETE_ALL, None),
    ("READERS_DELETE", sql::READERS_DELETE, None),
    ("READERS_INSERT", sql::READERS_INSERT, None),
    ("READERS_COUNT", sql::READERS_COUNT, None),
    ("COUNTS_CHECK", sql::COUNTS_CHECK, None),
    ("CHANGE_INSERT", sql::CHANGE_INSERT, None),
    ("REVIEW_LIVE_VERSIONS", sql::REVIEW_LIVE_VERSIONS, None),
    ("REVIEW_NEXT_SEQ", sql::REVIEW_NEXT_SEQ, None),
    ("REVIEW_INSERT", sql::REVIEW_INSERT, None),
    ("REVIEW_SOURCE_INSERT", sql::REVIEW_SOURCE_INSERT, None),
    ("REVIEW_EVICT", sql::REVIEW_EVICT, None),
    ("REVIEW_COUNT_OUT", sql::REVIEW_COUNT_OUT, None),
    ("REVIEW_PAGE", sql::REVIEW_PAGE, None),
    ("REVIEW_GET", sql::REVIEW_GET, None),
    ("REVIEW_GET_SOURCES", sql::REVIEW_GET_SOURCES, None),
    ("REVIEW_GET_VERDICTS", sql::REVIEW_GET_VERDICTS, None),
    ("REVIEW_MARK_REVIEWED", sql::REVIEW_MARK_REVIEWED, None),
    ("REVIEW_LAST_VERDICT", sql::REVIEW_LAST_VERDICT, None),
    ("REVIEW_VERDICT_INSERT", sql::REVIEW_VERDICT_INSERT, None),
    ("REVIEW_PURGE", sql::REVIEW_PURGE, None),
    ("REVIEW_SWEEP", sql::REVIEW_SWEEP, None),
    ("REVIEW_DROP_GENERATED", sql::REVIEW_DROP_GENERATED, None),
    ("REVIEW_EXPIRE", sql::REVIEW_EXPIRE, None),
    ("REVIEW_TENANTS", sql::REVIEW_TENANTS, Some("the retention sweep: the tenants holding review items")),
];

/// A real value of `kind` for parameter `index` (the first is the tenant).
fn value(index: usize, kind: &Type, dimension: usize) -> Box<dyn ToSql + Sync + Send> {
    match *kind {
        Type::TEXT | Type::VARCHAR if index == 0 => Box::new("acme".to_owned()),
        // Text that every text parameter accepts, even one cast to uuid (a lineage).
        Type::TEXT | Type::VARCHAR => Box::new("6f1c2a4e-0d3b-4c5a-9e8f-7a6b5c4d3e2f".to_owned()),
        Type::TEXT_ARRAY => Box::new(vec!["everyone".to_owned()]),
        Type::INT8 => Box::new(1_i64),
        Type::INT4 => Box::new(1_i32),
        Type::INT2 => Box::new(1_i16),
        Type::CHAR => Box::new(b'g' as i8),
        Type::BOOL => Box::new(true),
        Type::FLOAT4 => Box::new(0.5_f32),
        Type::FLOAT8 => Box::new(0.5_f64),
        Type::BYTEA => Box::new(vec![0_u8]),
        Type::INT4_ARRAY => Box::new(vec![1_i32]),
        Type::INT8_ARRAY => Box::new(vec![1_i64]),
        Type::INT2_ARRAY => Box::new(vec![1_i16]),
        Type::CHAR_ARRAY => Box::new(vec![b'g' as i8]),
        Type::FLOAT4_ARRAY => Box::new(vec![0.5_f32]),
        Type::BYTEA_ARRAY => Box::new(vec![vec![0_u8]]),
        _ if kind.name() == "vector" => Box::new(pgvector::Vector::from(vec![0.1_f32; dimension])),
        _ => panic!("no test value for parameter ${} of type {}", index + 1, kind.name()),
    }
}

/// The database's own message of `error` (tokio-postgres' display says only "db error").
fn described(error: &tokio_postgres::Error) -> String {
    error.as_db_error().map_or_else(|| error.to_string(), |db| format!("{}: {}", db.code().code(), db.message()))
}

#[tokio::test]
async fn citus_every_tenant_statement_is_a_single_shard_router_plan() {
    let Some((url, workers)) = cluster() else { return };
    let database = fresh_distributed_database(&url, &workers).await;
    // As the backend runs them: its role, in a transaction that entered a tenant, so the plans are
    // those of statements under row-level security (the shards' policies apply on the workers).
    let client = Arc::new(connect(&database).await);
    let mut fanned_out = Vec::new();
    for (statement_name, statement, database_wide) in STATEMENTS {
        if database_wide.is_some() {
            continue;
        }
        client.batch_execute("BEGIN").await.expect("begin");
        client.query_one(sql::ENTER_TENANT, &[&"acme"]).await.expect("enter the tenant");
        let explain = format!("EXPLAIN {statement}");
        let prepared =
            client.prepare(&explain).await.unwrap_or_else(|error| panic!("{statement_name}: {}", described(&error)));
        let values: Vec<Box<dyn ToSql + Sync + Send>> =
            prepared.params().iter().enumerate().map(|(index, kind)| value(index, kind, 64)).collect();
        let arguments: Vec<&(dyn ToSql + Sync)> = values.iter().map(|value| value.as_ref() as _).collect();
        let plan: Vec<String> = client
            .query(&prepared, &arguments)
            .await
            .unwrap_or_else(|error| panic!("{statement_name}: {}", described(&error)))
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect();
        let tasks: Vec<&str> = plan.iter().filter_map(|line| line.trim().strip_prefix("Task Count: ")).collect();
        let routed = !tasks.is_empty()
            && tasks.iter().all(|count| *count == "1")
            && !plan.iter().any(|line| line.contains("pull to coordinator") || line.contains("repartition"));
        if !routed {
            fanned_out.push(format!("{statement_name}:\n{}", plan.join("\n")));
        }
        client.batch_execute("COMMIT").await.expect("commit");
    }
    assert!(
        fanned_out.is_empty(),
        "tenant statements that are not single-shard router plans:\n{}",
        fanned_out.join("\n\n")
    );
}

/// A new database on the cluster at `url`, owned by [`APP_ROLE`], distributed; its URL for
/// [`APP_ROLE`].
async fn fresh_distributed_database(url: &str, workers: &[String]) -> String {
    ensure_app_role(url, workers).await;
    let name = format!("warrant_citus_{}", uuid::Uuid::new_v4().simple());
    // Test-only DDL: the name is generated here, never input.
    connect(url).await.batch_execute(&format!("CREATE DATABASE {name} OWNER {APP_ROLE}")).await.expect("database");
    distributed_database(url, &name, workers, 64).await
}

/// The tables whose rows belong to a tenant (they have a `tenant_id` column), from the catalog
/// of the database `client` is connected to (on a worker: the shards, `chunks_102008`).
pub(crate) async fn tenant_tables(client: &tokio_postgres::Client) -> Vec<(String, bool, bool, i64)> {
    client
        .query(
            "SELECT c.relname::text, c.relrowsecurity, c.relforcerowsecurity,
                (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_rows')
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
               AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id')
             ORDER BY 1",
            &[],
        )
        .await
        .expect("pg_class")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// Every shard, on every worker, of every tenant table of `database` FORCEs row-level security
/// with the tenant policy (what binds a statement on Citus: the coordinator sends the workers
/// each statement without its policies). `superuser`: the cluster's URL, whose role reads the
/// catalogs.
async fn assert_every_shard_forces_row_level_security(superuser: &str, database: &str, workers: &[String]) {
    let user = user_of(superuser);
    let coordinator = connect(&with_user(database, user)).await;
    let tables: Vec<String> = tenant_tables(&coordinator).await.into_iter().map(|(name, ..)| name).collect();
    assert_eq!(tables.len(), 13, "{tables:?}");
    let name = database.rsplit('/').next().expect("database name");
    let mut shards_per_table = std::collections::BTreeMap::<String, usize>::new();
    for worker in workers {
        let worker_database = connect(&format!("postgres://{user}@{worker}/{name}")).await;
        // Citus hides the shards from the catalog of a worker unless asked.
        worker_database.batch_execute("SET citus.override_table_visibility = off").await.expect("shards visible");
        for (shard, enabled, forced, policies) in tenant_tables(&worker_database).await {
            let shard_of = shard.rsplit_once('_').filter(|(table, number)| {
                tables.iter().any(|name| name == table) && number.chars().all(|digit| digit.is_ascii_digit())
            });
            let Some((table, _)) = shard_of else { continue };
            assert!(enabled && forced && policies == 1, "{worker}: shard {shard} ({enabled}, {forced}, {policies})");
            *shards_per_table.entry(table.to_owned()).or_default() += 1;
        }
    }
    for table in &tables {
        assert!(shards_per_table.get(table).copied().unwrap_or(0) > 0, "no shard of {table} checked");
    }
}

/// The migrations' order: the policies exist before `docs/citus.sql` distributes the tables.
#[tokio::test]
async fn citus_every_shard_of_a_tenant_table_forces_row_level_security() {
    let Some((url, workers)) = cluster() else { return };
    let database = fresh_distributed_database(&url, &workers).await;
    assert_every_shard_forces_row_level_security(&url, &database, &workers).await;
}

/// A cluster distributed at schema version 6 migrates forward: migration 0007 on distributed
/// tables reaches every shard (Citus propagates ENABLE / FORCE ROW LEVEL SECURITY and CREATE
/// POLICY), and a statement without a tenant predicate then reads its own tenant alone.
#[actix_web::test]
async fn citus_row_level_security_reaches_the_shards_of_tables_distributed_before_it() {
    let Some((url, workers)) = cluster() else { return };
    let database = fresh_distributed_database(&url, &workers).await;
    let backend = crate::postgres::node_with_dimension(&database, 64).await;
    crate::postgres::two_tenants(&backend).await;
    // Back to schema version 6, distributed, with the rows in place (test-only DDL, as the
    // tables' owner: Citus propagates it to the shards).
    // One statement at a time: Citus sends each to the workers as its own command.
    let owner = connect(&database).await;
    for statement in crate::postgres::UNDO_0007.split(';').map(str::trim).filter(|statement| !statement.is_empty()) {
        owner.batch_execute(statement).await.unwrap_or_else(|error| panic!("{statement}: {}", described(&error)));
    }
    let everything = connect(&database).await.query_one("SELECT count(DISTINCT tenant_id) FROM chunks", &[]).await;
    assert_eq!(everything.expect("count").get::<_, i64>(0), 2, "without row-level security the owner reads all");

    let applied = warrant::postgres::migrate_database(&crate::postgres::params(&database), 64).await.unwrap();
    assert_eq!(applied, vec![7]);
    assert_every_shard_forces_row_level_security(&url, &database, &workers).await;
    let backend = crate::postgres::node_with_dimension(&database, 64).await;
    let tenants = backend.read_as_tenant("acme", "SELECT DISTINCT tenant_id FROM chunks", &[]).await.unwrap();
    assert_eq!(tenants.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>(), ["acme"]);
    let nothing = connect(&database).await.query_one("SELECT count(*) FROM chunks", &[]).await.unwrap();
    assert_eq!(nothing.get::<_, i64>(0), 0, "no tenant entered: nothing");
}
