//! Recovery in seconds (issue 50): a durable restart loads the last index set and applies its
//! shards' journals instead of indexing the chunks again. At random moments of an ingestion
//! with new versions, deletes, revokes and a checkpoint, a copy of the data directory (a crash
//! image: nothing in flight) opens into shards identical to the running ones (graph image bytes,
//! answers and score bits) without indexing a chunk again; a damaged journal is refused naming
//! its file, what it lacked is indexed from the rows and the next restart journals again; and a
//! real server killed with `kill -9` during ingestion comes back from its journal, answering
//! exactly like a node that ingested the same committed batches and never crashed.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use warrant::acl::AclMutation;
use warrant::config::Settings;
use warrant::embedded::Engine;
use warrant::index::shard::ChunkPositions;
use warrant::retrieval::DocumentInput;
use warrant::storage::indexes::IndexSetOutcome;

use super::persisted_indexes::{bits, open_durable};
use super::snapshots::{Process, call, command, principals, retrieve_all, settings, spawn_command, token};
use super::support::doc;

const WORDS: &[&str] = &[
    "hotel", "travel", "laptop", "budget", "policy", "badge", "parking", "expense", "visa", "flight", "meal", "train",
    "taxi", "office", "remote", "contract", "invoice", "salary", "bonus", "holiday", "training", "security", "audit",
    "vendor", "report", "forecast", "merger", "team", "desk", "printer",
];

/// Two shards, every vector search a graph walk (so answers depend on the graphs), a small
/// construction pool (debug builds).
fn walking() -> Settings {
    let mut settings = settings(2, 64);
    settings.index.exact_scan_threshold = 0;
    settings.index.exact_scan_max_fraction = 0.0;
    settings.index.hnsw_ef_construction = 40;
    settings
}

fn text(random: &mut rand::rngs::SmallRng, marker: &str) -> String {
    let words: Vec<&str> = (0..24).map(|_| WORDS[random.gen_range(0..WORDS.len())]).collect();
    format!("{marker} {}", words.join(" "))
}

/// `count` documents of batch `batch`; about one in ten is a new version of an earlier batch's.
fn batch(random: &mut rand::rngs::SmallRng, batch: usize, count: usize) -> Vec<DocumentInput> {
    let mut seen = BTreeSet::new();
    (0..count)
        .map(|number| {
            let earlier = format!("b{}d{}", random.gen_range(0..batch.max(1)), random.gen_range(0..count));
            let doc_id = if batch > 0 && random.gen_range(0..10) == 0 && seen.insert(earlier.clone()) {
                earlier
            } else {
                format!("b{batch}d{number}")
            };
            let groups: &[&str] = if random.gen_range(0..3) == 0 { &["engineering"] } else { &["everyone"] };
            doc(&doc_id, &format!("Doc {doc_id}"), &text(random, &format!("zq{batch}x{number}")), groups)
        })
        .collect()
}

fn copy_directory(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_directory(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Each shard's graph image, chunk positions recorded for the live documents' slots only (a
/// running engine still holds the chunks of superseded versions until it restarts).
fn graph_images(engine: &Engine) -> Vec<Vec<u8>> {
    let snapshot = engine.acl().load();
    let live: BTreeSet<u32> =
        snapshot.tenant_names().flat_map(|tenant| snapshot.entries(tenant).map(|entry| entry.ordinal)).collect();
    engine
        .shards()
        .iter()
        .map(|shard| shard.export_image(|ordinal| live.contains(&ordinal), ChunkPositions::InDocument).unwrap().graph)
        .collect()
}

/// Where two shards' images first differ, if they do (the images are too long to print).
fn first_difference(left: &[Vec<u8>], right: &[Vec<u8>]) -> Option<(usize, usize, usize, usize)> {
    left.iter().zip(right).enumerate().find_map(|(shard, (left, right))| {
        let at = left.iter().zip(right).position(|(a, b)| a != b);
        (at.is_some() || left.len() != right.len())
            .then(|| (shard, at.unwrap_or(left.len().min(right.len())), left.len(), right.len()))
    })
}

/// The journal's outcome: (journaled slots, chunks indexed again, refusals).
fn journal_outcome(indexes: &IndexSetOutcome) -> (usize, usize, Vec<String>) {
    match indexes {
        IndexSetOutcome::Loaded { journaled, indexed_after, journal_stopped, .. } => {
            (*journaled, *indexed_after, journal_stopped.clone())
        }
        IndexSetOutcome::Rebuilt { reason } => panic!("the index set was not used: {reason}"),
    }
}

#[actix_web::test]
async fn a_crash_image_at_random_moments_reopens_into_identical_shards_without_indexing_again() {
    let settings = walking();
    let directory = tempfile::tempdir().unwrap();
    let (engine, _) = open_durable(&settings, directory.path()).await;
    engine.write_indexes().await;
    let mut random = rand::rngs::SmallRng::seed_from_u64(0x50);
    const BATCHES: usize = 9;
    // Past 1,024 nodes per shard the graph inserts in parallel groups: journaled too.
    const DOCUMENTS: usize = 400;
    let mut moments: BTreeSet<usize> = BTreeSet::new();
    while moments.len() < 3 {
        moments.insert(random.gen_range(1..BATCHES));
    }
    let mut compared = 0;
    for number in 0..BATCHES {
        if number == 5 {
            // The shards journal on into the new set's journal from here.
            engine.checkpoint(engine.acl().epoch()).await.unwrap();
        }
        let documents = batch(&mut random, number, DOCUMENTS);
        engine.upsert("acme", documents).await.unwrap();
        if number % 3 == 2 {
            let doc_id = format!("b{}d{}", random.gen_range(0..number), random.gen_range(0..DOCUMENTS));
            let _ = engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id }).await;
            let doc_id = format!("b{}d{}", random.gen_range(0..number), random.gen_range(0..DOCUMENTS));
            let revoke = AclMutation::Revoke {
                tenant: "acme".into(),
                doc_id,
                groups: Some(vec!["everyone".into()]),
                users: None,
            };
            let _ = engine.mutate(revoke).await;
        }
        if !moments.contains(&number) {
            continue;
        }
        // Purges run after the acknowledgement; let them land (a torn purge record would only
        // leave dead chunks in the lexical index, outside every scope).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let image = tempfile::tempdir().unwrap();
        copy_directory(directory.path(), image.path());
        let (restarted, recovery) = open_durable(&settings, image.path()).await;
        let (journaled, indexed_again, _) = journal_outcome(&recovery.indexes);
        assert_eq!(indexed_again, 0, "after batch {number}: chunks the journal holds were indexed again");
        assert!(journaled >= DOCUMENTS, "after batch {number}: {journaled} chunks came from the journal");
        let difference = first_difference(&graph_images(&restarted), &graph_images(&engine));
        assert_eq!(
            difference, None,
            "after batch {number}: (shard, first differing byte, lengths) of the graph images"
        );
        assert_eq!(
            bits(&retrieve_all(&restarted, &principals()).await),
            bits(&retrieve_all(&engine, &principals()).await),
            "after batch {number}: the answers differ"
        );
        compared += 1;
    }
    assert_eq!(compared, moments.len());
}

#[actix_web::test]
async fn a_damaged_journal_is_refused_naming_its_file_and_the_next_restart_journals_again() {
    // Exact scans: answers do not depend on the graph, which is rebuilt differently here.
    let settings = settings(2, 64);
    let directory = tempfile::tempdir().unwrap();
    let (engine, _) = open_durable(&settings, directory.path()).await;
    engine.write_indexes().await;
    let mut random = rand::rngs::SmallRng::seed_from_u64(0x51);
    for number in 0..4 {
        engine.upsert("acme", batch(&mut random, number, 100)).await.unwrap();
    }
    let before = retrieve_all(&engine, &principals()).await;
    assert!(before.iter().any(|hits| !hits.is_empty()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let image = tempfile::tempdir().unwrap();
    copy_directory(directory.path(), image.path());
    let journals = image.path().join(warrant::storage::journal::JOURNAL_DIR);
    let newest = std::fs::read_dir(&journals).unwrap().map(|entry| entry.unwrap().path()).max().unwrap();
    let damaged = newest.join("shard-0001.delta");
    let mut bytes = std::fs::read(&damaged).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&damaged, bytes).unwrap();

    let (restarted, recovery) = open_durable(&settings, image.path()).await;
    let (_, indexed_again, refused) = journal_outcome(&recovery.indexes);
    assert!(
        refused.len() == 1 && refused[0].contains("shard-0001.delta"),
        "the refusal names the damaged file: {refused:?}"
    );
    assert!(indexed_again > 0, "what the damaged journal lacked was indexed from the rows");
    assert_eq!(bits(&retrieve_all(&restarted, &principals()).await), bits(&before));
    drop(restarted);
    // The journal was cut after its last good record and took the chunks indexed on top.
    let (again, recovery) = open_durable(&settings, image.path()).await;
    let (_, indexed_again, refused) = journal_outcome(&recovery.indexes);
    assert_eq!((indexed_again, refused.len()), (0, 0), "{:?}", recovery.indexes);
    assert_eq!(bits(&retrieve_all(&again, &principals()).await), bits(&before));
}

/// A graceful stop ([`Engine::close`]) leaves the next open the least to do: an ACL checkpoint
/// (nothing replayed, the change log still whole for replicas), an index set (no journal
/// record) and a sealed store (redb's page check skipped). A write after the close fails and
/// changes nothing.
#[actix_web::test]
async fn a_graceful_close_leaves_nothing_to_replay_and_a_sealed_store() {
    let settings = settings(2, 64);
    let directory = tempfile::tempdir().unwrap();
    let (engine, _) = open_durable(&settings, directory.path()).await;
    engine.write_indexes().await;
    let mut random = rand::rngs::SmallRng::seed_from_u64(0x52);
    for number in 0..3 {
        engine.upsert("acme", batch(&mut random, number, 60)).await.unwrap();
    }
    let before = retrieve_all(&engine, &principals()).await;
    let feed = engine.acl().changes_since(0).unwrap();
    engine.close().await;
    assert!(engine.upsert("acme", batch(&mut random, 9, 5)).await.is_err(), "a closed engine takes no write");
    drop(engine);

    let (reopened, recovery) = open_durable(&settings, directory.path()).await;
    assert!(recovery.sealed, "the store closed at the stop is trusted by its seal");
    assert_eq!((recovery.checkpoint_epoch, recovery.replayed), (3, 0), "the checkpoint is the last epoch");
    assert_eq!(journal_outcome(&recovery.indexes), (0, 0, Vec::new()), "the index set holds everything");
    assert_eq!(reopened.acl().changes_since(0).unwrap(), feed, "the change log is kept whole for replicas");
    assert_eq!(bits(&retrieve_all(&reopened, &principals()).await), bits(&before));
}

// ---- a real server killed during ingestion ----

fn server(data: &Path, snapshots: &Path) -> Process {
    let mut command = command(snapshots, &[]);
    command
        .env("WARRANT__STORAGE__DIR", data)
        .env("WARRANT__DEMO__LOAD", "false")
        // No checkpoint during the test: everything after the first index set is journaled.
        .env("WARRANT__STORAGE__CHECKPOINT_INTERVAL_SECONDS", "3600")
        .env("WARRANT__STORAGE__CHECKPOINT_CHANGES", "1000000")
        .env("WARRANT__SERVER__ADMIN_DOCUMENT_BATCHES_PER_TENANT", "64");
    spawn_command(command)
}

fn batch_body(seed: u64, number: usize) -> Value {
    let mut random = rand::rngs::SmallRng::seed_from_u64(seed ^ number as u64);
    let documents: Vec<Value> = (0..100)
        .map(|index| {
            json!({"doc_id": format!("k{number}d{index}"), "text": text(&mut random, &format!("zq{number}x{index}")),
                   "acl": {"groups": ["all"]}})
        })
        .collect();
    json!({"documents": documents})
}

/// Every (query, rank): doc id and score, as `/v1/retrieve` answers the reader.
async fn answers(http: &reqwest::Client, base: &str) -> Vec<Vec<(String, String)>> {
    let reader = token("acme", "reader", &["all"], "");
    let mut all = Vec::new();
    for query in ["hotel budget", "laptop security audit", "zq3x7 train", "vendor invoice forecast", "remote desk"] {
        let (status, body) =
            call(http, base, reqwest::Method::POST, "/v1/retrieve", &reader, Some(json!({"query": query, "k": 10})))
                .await;
        assert_eq!(status, 200, "{body}");
        all.push(
            body["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|chunk| (chunk["doc_id"].as_str().unwrap().to_owned(), chunk["score"].to_string()))
                .collect(),
        );
    }
    all
}

/// The doc id of the first chunk the reader retrieves for `query` (empty when none).
async fn retrieved_first(http: &reqwest::Client, base: &str, query: &str) -> String {
    let reader = token("acme", "reader", &["all"], "");
    let (status, body) =
        call(http, base, reqwest::Method::POST, "/v1/retrieve", &reader, Some(json!({"query": query}))).await;
    assert_eq!(status, 200, "{body}");
    body["chunks"][0]["doc_id"].as_str().unwrap_or_default().to_owned()
}

async fn recovery_report(http: &reqwest::Client, base: &str) -> Value {
    let response = http.get(format!("{base}/readyz")).send().await.unwrap();
    let body: Value = response.json().await.unwrap();
    body["recovery"].clone()
}

#[actix_web::test]
async fn kill_9_during_ingestion_comes_back_from_the_journal_like_a_node_that_never_crashed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::tempdir().unwrap();
    let (data, snapshots) = (root.path().join("data"), root.path().join("snapshots"));
    let http = reqwest::Client::new();
    let admin = token("acme", "root", &[], "admin");
    let seed = 0x5eed_0050;
    let mut random = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut next = 0;
    let mut committed: Vec<usize> = Vec::new();
    for iteration in 0..3 {
        let mut node = server(&data, &snapshots);
        if iteration > 0 {
            let recovery = recovery_report(&http, &node.base).await;
            assert_eq!(recovery["indexes"], "index_set", "iteration {iteration}: {recovery}");
            assert_eq!(recovery["reindexed_chunks"], 0, "iteration {iteration}: chunks indexed again: {recovery}");
            assert_eq!(recovery["store_check"], "pages", "iteration {iteration}: after kill -9: {recovery}");
            assert!(recovery["journaled_chunks"].as_u64().unwrap() >= 100, "iteration {iteration}: {recovery}");
        }
        // The first start writes the index set the journal starts from, in the background.
        let deadline = Instant::now() + Duration::from_secs(30);
        while super::persisted_indexes::index_sets(&data).is_empty() {
            assert!(Instant::now() < deadline, "no index set was written");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Sequential batches; the kill lands after a seeded number of them, inside the next.
        let kill_after = random.gen_range(2..6);
        let then = Duration::from_millis(random.gen_range(0..150));
        let done = Arc::new(AtomicUsize::new(0));
        let (base, http_load, admin_load, counter) = (node.base.clone(), http.clone(), admin.clone(), done.clone());
        let first = next;
        let load = actix_rt::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut number = first;
            loop {
                let body = Some(batch_body(seed, number));
                let (status, _) =
                    call(&http_load, &base, reqwest::Method::PUT, "/v1/admin/documents", &admin_load, body).await;
                if status != 200 {
                    return (acknowledged, number);
                }
                acknowledged.push(number);
                counter.fetch_add(1, Ordering::SeqCst);
                number += 1;
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::SeqCst) < kill_after && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(then).await;
        node.child.kill().unwrap(); // SIGKILL: no shutdown path runs
        node.child.wait().unwrap();
        let (acknowledged, in_flight) = load.await.unwrap();
        assert!(acknowledged.len() >= kill_after, "iteration {iteration}: {} batches acknowledged", acknowledged.len());
        committed.extend(acknowledged);
        // The batch in flight at the kill committed whole or not at all: its marker says which.
        let node = server(&data, &snapshots);
        if retrieved_first(&http, &node.base, &format!("zq{in_flight}x0")).await == format!("k{in_flight}d0") {
            committed.push(in_flight);
        }
        next = in_flight + 1;
        drop(node);
    }
    // The crashed node, restarted, against a node that ingested the same batches and never
    // crashed: the same answers, to the score.
    let crashed = server(&data, &snapshots);
    let recovery = recovery_report(&http, &crashed.base).await;
    assert_eq!(recovery["reindexed_chunks"], 0, "{recovery}");
    let mut reference = command(&root.path().join("reference-snapshots"), &[]);
    reference.env("WARRANT__DEMO__LOAD", "false");
    let reference = spawn_command(reference);
    for number in &committed {
        let (status, body) = call(
            &http,
            &reference.base,
            reqwest::Method::PUT,
            "/v1/admin/documents",
            &admin,
            Some(batch_body(seed, *number)),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let expected = answers(&http, &reference.base).await;
    assert!(expected.iter().all(|hits| !hits.is_empty()));
    assert_eq!(answers(&http, &crashed.base).await, expected);
    // A graceful stop (SIGTERM) of the same node: the next start trusts its sealed store and
    // loads an index set with nothing journaled after it, answering the same.
    let mut crashed = crashed;
    let sent = std::process::Command::new("kill").args(["-TERM", &crashed.child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    assert!(crashed.child.wait().unwrap().success(), "a graceful stop exits 0");
    let restarted = server(&data, &snapshots);
    let recovery = recovery_report(&http, &restarted.base).await;
    assert_eq!(recovery["store_check"], "sealed", "{recovery}");
    assert_eq!((&recovery["journaled_chunks"], &recovery["reindexed_chunks"]), (&json!(0), &json!(0)), "{recovery}");
    assert_eq!(answers(&http, &restarted.base).await, expected);
}

/// While a server opens its data directory, its port already answers: `/readyz` 503 `starting`
/// with the load's phase, any other path 503 `starting` with `Retry-After`; then 200 with how
/// the indexes came back.
#[actix_web::test]
async fn readyz_reports_the_progress_of_the_load_before_the_server_is_ready() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    {
        // Rows without an index set: the server indexes them all at start, which takes a while.
        let (engine, _) = open_durable(&settings(2, 64), &data).await;
        let mut random = rand::rngs::SmallRng::seed_from_u64(0x52);
        for number in 0..6 {
            engine.upsert("acme", batch(&mut random, number, 600)).await.unwrap();
        }
    }
    std::fs::remove_dir_all(data.join(warrant::storage::indexes::INDEXES_DIR)).unwrap();
    std::fs::remove_dir_all(data.join(warrant::storage::journal::JOURNAL_DIR)).unwrap();
    let mut command = command(&root.path().join("snapshots"), &[]);
    command.env("WARRANT__STORAGE__DIR", &data).env("WARRANT__DEMO__LOAD", "false");
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line.strip_prefix("warrant loading on ") {
                let _ = sender.send(address.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
    });
    let node = Process { child, base: receiver.recv_timeout(Duration::from_secs(60)).unwrap() };
    let http = reqwest::Client::new();
    let reader = token("acme", "reader", &["everyone"], "");
    let (mut starting, mut refused) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    let ready = loop {
        assert!(Instant::now() < deadline, "never ready");
        // A request racing the handover from the loading server may see its connection closed,
        // as a request before the bind would have seen it refused: the poll retries.
        let Ok(response) = http.get(format!("{}/readyz", node.base)).send().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let status = response.status().as_u16();
        let Ok(body) = response.json::<Value>().await else { continue };
        if status == 200 {
            break body;
        }
        assert_eq!((status, body["status"].as_str()), (503, Some("starting")), "{body}");
        starting.get_or_insert(body);
        if refused.is_none() {
            let sent = http
                .post(format!("{}/v1/retrieve", node.base))
                .bearer_auth(&reader)
                .json(&json!({"query": "hotel"}))
                .send()
                .await;
            let Ok(response) = sent else { continue };
            if response.status() == 200 {
                continue; // ready meanwhile: asked again while loading only
            }
            let retry = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
            refused = Some((response.status().as_u16(), retry, response.json::<Value>().await.unwrap()));
        }
    };
    let starting = starting.expect("the port answered before the server was ready");
    let phase = starting["loading"]["phase"].as_str().unwrap();
    assert!(["starting", "store", "index_set", "indexing"].contains(&phase), "{starting}");
    let (status, retry, body) = refused.unwrap();
    assert_eq!((status, retry.as_deref(), body["code"].as_str()), (503, Some("1"), Some("starting")), "{body}");
    assert_eq!(ready["recovery"]["indexes"], "rebuilt", "{ready}");
    assert!(ready["recovery"]["chunks"].as_u64().unwrap() > 3000, "{ready}");
    assert!(ready.get("loading").is_none(), "{ready}");
}

/// `storage.index_journal_max_mb` bounds the journal: once the journals since the last index
/// set reach it, a new set is written in the background (here at every batch). With
/// `storage.index_journal = false` nothing is journaled and a restart indexes again what the set
/// lacks, as before the journal.
#[actix_web::test]
async fn large_journals_make_a_new_index_set_and_the_journal_can_be_turned_off() {
    let mut settings = settings(2, 64);
    settings.storage.index_journal_max_mb = 0;
    let directory = tempfile::tempdir().unwrap();
    let (engine, _) = open_durable(&settings, directory.path()).await;
    let mut random = rand::rngs::SmallRng::seed_from_u64(0x53);
    for number in 0..3 {
        engine.upsert("acme", batch(&mut random, number, 50)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let sets = super::persisted_indexes::index_sets(directory.path());
    let newest = sets.last().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    assert!(!newest.starts_with("000000000000-"), "no set was written after the first batches: {sets:?}");
    drop(engine);

    settings.storage.index_journal = false;
    let directory = tempfile::tempdir().unwrap();
    let (engine, _) = open_durable(&settings, directory.path()).await;
    engine.upsert("acme", batch(&mut random, 0, 50)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let journals = directory.path().join(warrant::storage::journal::JOURNAL_DIR);
    let files = std::fs::read_dir(&journals).map(|entries| entries.count()).unwrap_or(0);
    assert_eq!(files, 0, "a journal was written with storage.index_journal = false");
    drop(engine);
    let (_, recovery) = open_durable(&settings, directory.path()).await;
    let (journaled, indexed_again, _) = journal_outcome(&recovery.indexes);
    assert_eq!((journaled, indexed_again), (0, 50));
}
