//! Growing a Citus cluster while warrant serves (issue 46, item 3), the CI-sized version of
//! `benches/citus_grow.sh`: two backend nodes (two pools on the coordinator, as two warrant
//! processes hold) answer scoped retrievals and acknowledge revokes without pause while a third
//! worker joins (`citus_add_node`), the shards are rebalanced (`citus_rebalance_start`) and the
//! largest tenant is moved to shards of its own (`isolate_tenant_to_new_shard`, CASCADE: every
//! co-located table).
//!
//! Both move shards with `shard_transfer_mode => 'block_writes'`: reads go on, and a write to
//! the shard group being copied waits for the copy, up to `storage.postgres.statement_timeout_ms`
//! (past it the write is rolled back and answered 503 `storage_timeout`; issue 59's 2 s default
//! was shorter than this copy on the 2-core CI machine, so the nodes here run with 60 s, as an
//! operator moving shards in this mode would). The logical-replication mode (`auto`) cannot
//! move warrant's shards on PostgreSQL 15: row-level security is FORCEd on every tenant table
//! (migration 0007), and the apply worker of Citus' shard-move subscription then refuses every
//! row ("user citus_shard_move_subscription_role_… cannot replicate into relation with
//! row-level security enabled"), so the move waits for ever (seen here; SECURITY.md).
//!
//! Checked throughout: no retrieval fails, none returns a chunk of another tenant or of a
//! document the reader may not read, and every revoke, once acknowledged, is enforced by both
//! nodes at once (each asked right after the acknowledgement).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use warrant::acl::AclMutation;
use warrant::embed::HashedEmbedder;
use warrant::postgres::{DatabaseLimits, PostgresBackend};

use crate::support::{doc, principal};

const DIMENSION: usize = 64;

/// What the load saw.
#[derive(Default)]
struct Seen {
    retrievals: AtomicUsize,
    errors: AtomicUsize,
    leaks: AtomicUsize,
    revokes: AtomicUsize,
    revokes_not_enforced: AtomicUsize,
}

/// Four shards per table and a small corpus: ~20 s on the 2-core CI machine.
#[actix_web::test]
async fn citus_grow_the_cluster_and_isolate_a_tenant_while_two_nodes_serve() {
    let Some((url, workers)) = super::cluster() else { return };
    let Ok(spare) = std::env::var("WARRANT_TEST_CITUS_SPARE") else {
        let notice = "SKIPPED: citus grow test (tests/citus.sh start prints WARRANT_TEST_CITUS_SPARE)\n";
        let _ = std::io::Write::write_all(&mut std::io::stderr(), notice.as_bytes());
        return;
    };
    let name = format!("warrant_grow_{}", uuid::Uuid::new_v4().simple());
    // Four shards per table (Citus' default is 32): the rebalance then moves one shard group,
    // which on a 2-core CI machine takes seconds instead of minutes; the mechanism is the same.
    let admin = super::connect(&url).await;
    super::ensure_app_role(&url, &workers).await;
    admin.batch_execute(&format!("CREATE DATABASE {name} OWNER {}", super::APP_ROLE)).await.expect("database");
    admin.batch_execute(&format!("ALTER DATABASE {name} SET citus.shard_count = 4")).await.expect("shard count");
    let database = super::distributed_database(&url, &name, &workers, DIMENSION).await;
    let connect = || async {
        let limits = DatabaseLimits { statement_timeout: Duration::from_secs(60), ..DatabaseLimits::default() };
        let embedder = Arc::new(HashedEmbedder::new(DIMENSION));
        PostgresBackend::connect_limited(crate::postgres::params(&database), limits, embedder)
            .await
            .expect("node connects")
    };
    let (one, two) = (connect().await, connect().await);
    // "big": the tenant that gets shards of its own; "small": its neighbours.
    for (tenant, documents) in [("big", 120), ("small", 30)] {
        let batch = (0..documents)
            .map(|index| {
                let groups: &[&str] = if index % 3 == 0 { &["exec"] } else { &["all"] };
                doc(&format!("d{index}"), "", &format!("quarterly report {tenant} topic{} figures", index % 7), groups)
            })
            .collect();
        one.upsert(tenant, batch).await.expect("corpus");
    }
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for (reader, node) in [(0, &one), (1, &two), (2, &one), (3, &two)] {
        let (node, seen, stop) = (Arc::clone(node), Arc::clone(&seen), Arc::clone(&stop));
        let tenant = if reader % 2 == 0 { "big" } else { "small" };
        load.push(actix_rt::spawn(async move {
            let asking = principal(tenant, "reader", &["all"]);
            while !stop.load(Ordering::SeqCst) {
                seen.retrievals.fetch_add(1, Ordering::SeqCst);
                match node.retrieve(&asking, "quarterly report figures topic3").await {
                    Err(error) => {
                        eprintln!("retrieval failed: {error}");
                        seen.errors.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(retrieved) => {
                        let leaked = retrieved.candidates.iter().filter(|candidate| {
                            let index: usize = candidate.chunk.doc_id[1..].parse().unwrap_or(0);
                            candidate.chunk.tenant != tenant
                                || (candidate.chunk.doc_id.starts_with('d') && index.is_multiple_of(3))
                        });
                        seen.leaks.fetch_add(leaked.count(), Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    // Revokes on both tenants: grant a fresh document, see it, revoke it, and right after the
    // acknowledgement ask both nodes.
    let revoker = {
        let (one, two, seen, stop) = (Arc::clone(&one), Arc::clone(&two), Arc::clone(&seen), Arc::clone(&stop));
        actix_rt::spawn(async move {
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                let tenant = if round % 2 == 0 { "big" } else { "small" };
                let doc_id = format!("r{round}");
                let text = format!("unique revocable memo number{round} zebra");
                if let Err(error) = one.upsert(tenant, vec![doc(&doc_id, "", &text, &["all"])]).await {
                    eprintln!("upsert failed: {error}");
                    seen.errors.fetch_add(1, Ordering::SeqCst);
                }
                let revoke =
                    AclMutation::Revoke { tenant: tenant.into(), doc_id: doc_id.clone(), groups: None, users: None };
                match two.mutate(revoke).await {
                    Err(error) => {
                        eprintln!("revoke failed: {error}");
                        seen.errors.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {
                        seen.revokes.fetch_add(1, Ordering::SeqCst);
                        let asking = principal(tenant, "reader", &["all"]);
                        for node in [&one, &two] {
                            let retrieved = node.retrieve(&asking, &text).await;
                            let still = retrieved.map(|retrieved| {
                                retrieved.candidates.iter().any(|candidate| candidate.chunk.doc_id == doc_id)
                            });
                            if !matches!(still, Ok(false)) {
                                seen.revokes_not_enforced.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
                round += 1;
            }
        })
    };

    // The third worker joins this database, the shards are rebalanced online, then "big" moves
    // to shards of its own.
    let user = super::user_of(&url);
    let spare_url = format!("postgres://{user}@{spare}/postgres");
    let spare_server = super::connect(&spare_url).await;
    // Test-only DDL: the names are constants and generated, never input.
    spare_server
        .batch_execute(&format!(
            "DO $$ BEGIN
                IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                    CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
                END IF;
            END $$",
            role = super::APP_ROLE
        ))
        .await
        .expect("spare role");
    // Alone: CREATE DATABASE cannot run in the implicit transaction of several statements.
    spare_server
        .batch_execute(&format!("CREATE DATABASE {name} OWNER {}", super::APP_ROLE))
        .await
        .expect("spare database");
    super::connect(&super::with_database(&spare_url, &name))
        .await
        .batch_execute("CREATE EXTENSION citus; CREATE EXTENSION vector;")
        .await
        .expect("spare extensions");
    // Adding a node, rebalancing and isolating a tenant are a superuser's.
    let coordinator = super::connect(&super::with_database(&url, &name)).await;
    let (host, port) = spare.rsplit_once(':').expect("host:port");
    let port: i32 = port.parse().expect("port");
    tokio::time::sleep(Duration::from_millis(300)).await;
    coordinator.query_one("SELECT citus_add_node($1, $2)", &[&host, &port]).await.expect("worker added");
    // Two statements, two transactions: the background job the first creates must be committed
    // before its workers (and the wait) can see it.
    coordinator
        .batch_execute("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
        .await
        .expect("rebalance started");
    coordinator.batch_execute("SELECT citus_rebalance_wait()").await.expect("rebalance finished");
    let on_spare: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM pg_dist_shard_placement WHERE nodename = $1 AND nodeport = $2",
            &[&host, &port],
        )
        .await
        .expect("placements")
        .get(0);
    let isolated: i64 = coordinator
        .query_one(
            "SELECT isolate_tenant_to_new_shard('chunks', 'big', 'CASCADE', shard_transfer_mode => 'block_writes')",
            &[],
        )
        .await
        .expect("tenant isolated")
        .get(0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("load task");
    }
    revoker.await.expect("revoker");

    // "big" alone on its shard of chunks (and, CASCADE, of every co-located table).
    let shard_of = |tenant: &'static str| {
        let coordinator = &coordinator;
        async move {
            let row = coordinator
                .query_one("SELECT get_shard_id_for_distribution_column('chunks', $1::text)", &[&tenant])
                .await
                .expect("shard of a tenant");
            row.get::<_, i64>(0)
        }
    };
    let (shard_of_big, shard_of_small) = (shard_of("big").await, shard_of("small").await);
    let neighbours: i64 = coordinator
        .query_one(
            "SELECT count(*) FROM chunks WHERE tenant_id <> 'big' \
             AND get_shard_id_for_distribution_column('chunks', tenant_id) = $1",
            &[&shard_of_big],
        )
        .await
        .expect("neighbours")
        .get(0);
    let count = |counter: &AtomicUsize| counter.load(Ordering::SeqCst);
    eprintln!(
        "grow: {} retrievals, {} revokes acknowledged, {on_spare} placements on the new worker, big on shard {shard_of_big}",
        count(&seen.retrievals),
        count(&seen.revokes),
    );
    assert_eq!(count(&seen.errors), 0, "errors seen by clients");
    assert_eq!(count(&seen.leaks), 0, "chunks outside the reader's scope");
    assert_eq!(count(&seen.revokes_not_enforced), 0, "acknowledged revokes not enforced by both nodes");
    assert!(count(&seen.revokes) > 0 && count(&seen.retrievals) > 10, "the load ran");
    assert!(on_spare > 0, "the rebalancer moved nothing to the new worker");
    assert_eq!(shard_of_big, isolated, "big is on the shard isolated for it");
    assert_ne!(shard_of_big, shard_of_small, "small does not share big's shard");
    assert_eq!(neighbours, 0, "another tenant on big's shard");
}
