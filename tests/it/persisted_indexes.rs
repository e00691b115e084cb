//! Persisted indexes (snapshot format v2): a restore loads the vector graph and the lexical
//! index from their images and answers exactly like the engine it came from; deleted and
//! revoked documents stay invisible after it; writes after a load (and after a second load) are
//! indexed; a file that passes its checksum but does not decode is refused naming it; a data
//! directory reopened with another shard count rebuilds its shards instead of loading its set.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use warrant::acl::AclMutation;
use warrant::config::Settings;
use warrant::embed::{Embedder, HashedEmbedder};
use warrant::embedded::Engine;
use warrant::snapshot::{self, SnapshotError};

use super::snapshots::{demo_engine_with_history, principals, restore_error, retrieve_all, settings};
use super::support::{doc, principal};

/// One shard and no exact scan: every vector search walks the (loaded) graphs.
fn walking_settings() -> Settings {
    let mut settings = settings(1, 64);
    settings.index.exact_scan_threshold = 0;
    settings.index.exact_scan_max_fraction = 0.0;
    settings
}

async fn restore(settings: &Settings, directory: &Path) -> Arc<Engine> {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let (engine, manifest) = snapshot::start_engine(settings, embedder, directory, false).await.expect("restore");
    assert_eq!(manifest.format_version, snapshot::FORMAT_VERSION);
    engine
}

/// Rank order and score bits of every (principal, query) result.
pub(crate) fn bits(results: &[Vec<(String, String, f64)>]) -> Vec<Vec<(String, u64)>> {
    results.iter().map(|hits| hits.iter().map(|(chunk, _, score)| (chunk.clone(), score.to_bits())).collect()).collect()
}

fn visible_docs(results: &[Vec<(String, String, f64)>]) -> Vec<String> {
    results.iter().flatten().map(|(_, doc, _)| doc.clone()).collect()
}

#[actix_web::test]
async fn v2_restore_gives_the_same_hits_order_and_score_bits() {
    for settings in [walking_settings(), settings(3, 64)] {
        let original = demo_engine_with_history(&settings).await;
        let root = tempfile::tempdir().unwrap();
        let created = snapshot::create(&original, root.path(), 1).await.expect("create");
        let restored = restore(&settings, &created.path).await;
        let before = retrieve_all(&original, &principals()).await;
        assert!(before.iter().any(|hits| !hits.is_empty()));
        assert_eq!(bits(&before), bits(&retrieve_all(&restored, &principals()).await));
        if settings.index.shards == 1 {
            assert_eq!(restored.shards()[0].loaded_graphs(), 1, "the graph was loaded, not rebuilt");
        }
    }
}

#[actix_web::test]
async fn deleted_and_revoked_documents_stay_invisible_after_one_and_two_restores() {
    let settings = walking_settings();
    let original = demo_engine_with_history(&settings).await;
    original.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "q3-forecast".into() }).await.unwrap();
    let alice = principal("acme", "alice", &["everyone", "engineering"]);
    let root = tempfile::tempdir().unwrap();
    let first = snapshot::create(&original, root.path(), 4).await.expect("create");
    let once = restore(&settings, &first.path).await;
    // The restored engine answers what the engine it came from answered.
    assert_eq!(bits(&retrieve_all(&original, &principals()).await), bits(&retrieve_all(&once, &principals()).await));
    // Written after the load: inserted into the loaded graph, which takes inserts again.
    once.upsert(
        "acme",
        vec![doc("badge-policy", "Badge policy", "Visitor badges are returned at the desk.", &["everyone"])],
    )
    .await
    .unwrap();
    let second = snapshot::create(&once, root.path(), 4).await.expect("second create");
    let twice = restore(&settings, &second.path).await;
    assert_eq!(twice.shards()[0].loaded_graphs(), 1, "the graph grown after the first load was loaded again");
    assert_eq!(twice.shards()[0].sealed_graphs(), 0, "restores do not pile up graphs");
    twice
        .upsert("acme", vec![doc("parking", "Parking", "Parking spaces are booked a day ahead.", &["everyone"])])
        .await
        .unwrap();
    for engine in [&original, &once, &twice] {
        let everything = visible_docs(&retrieve_all(engine, &principals()).await);
        assert!(!everything.contains(&"q3-forecast".to_owned()), "a deleted document came back");
        for query in ["reorganisation plan", "reorg plan merges teams"] {
            let retrieved = engine.retrieve(&engine.scope(&alice), query).await.unwrap();
            assert!(
                retrieved.candidates.iter().all(|candidate| candidate.chunk.doc_id != "reorg-plan"),
                "a revoked document came back"
            );
        }
    }
    for (engine, doc_id, query) in [
        (&once, "badge-policy", "visitor badges"),
        (&twice, "badge-policy", "visitor badges"),
        (&twice, "parking", "parking spaces booked"),
    ] {
        let retrieved = engine.retrieve(&engine.scope(&alice), query).await.unwrap();
        assert_eq!(retrieved.candidates.first().map(|candidate| candidate.chunk.doc_id.as_str()), Some(doc_id));
    }
}

/// Replaces `name` in the snapshot at `directory` with `bytes` and records its new size and
/// checksum in the manifest, so that only decoding can refuse it.
fn rewrite_checksummed(directory: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(directory.join(name), bytes).unwrap();
    let manifest_path = directory.join("manifest.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for file in manifest["files"].as_array_mut().unwrap() {
        if file["name"] == name {
            file["bytes"] = Value::from(bytes.len() as u64);
            file["sha256"] = Value::from(hex::encode(Sha256::digest(bytes)));
        }
    }
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

#[actix_web::test]
async fn a_checksummed_but_undecodable_index_file_is_refused_naming_it() {
    let settings = settings(3, 64);
    let engine = demo_engine_with_history(&settings).await;
    let root = tempfile::tempdir().unwrap();
    let created = snapshot::create(&engine, root.path(), 1).await.expect("create");
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 5] = [
        ("shard-0001.graph.bin", |bytes| bytes[8..12].copy_from_slice(&99u32.to_le_bytes())),
        ("shard-0001.graph.bin", |bytes| bytes.truncate(bytes.len() - 4)),
        ("shard-0002.graph.bin", |bytes| bytes.extend_from_slice(&[0; 4])),
        ("shard-0000.lexical.bin", |bytes| bytes.truncate(bytes.len() - 1)),
        ("shard-0000.lexical.bin", |bytes| {
            let at = bytes.len() - 10;
            bytes[at] ^= 0x5a;
        }),
    ];
    for (name, damage) in damages {
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(&created.path).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
        let mut bytes = std::fs::read(copy.path().join(name)).unwrap();
        damage(&mut bytes);
        rewrite_checksummed(copy.path(), name, &bytes);
        let error = restore_error(copy.path(), &settings, "hashed-64", 64);
        assert!(matches!(&error, SnapshotError::Invalid { file, .. } if file == name), "{name}: {error}");
        assert!(error.to_string().contains(name), "{error}");
        assert_eq!(error.code(), "snapshot_invalid");
    }
}

// ---- durable restart: index sets next to the store ----

pub(crate) async fn open_durable(settings: &Settings, directory: &Path) -> (Arc<Engine>, warrant::embedded::Recovery) {
    let embedder: Arc<dyn Embedder> = Arc::new(HashedEmbedder::new(settings.embedder.dim));
    let params = warrant::embedded::EngineParams::from_settings(settings, settings.embedder.dim);
    Engine::open(params, embedder, directory).await.expect("data directory opens")
}

pub(crate) fn index_sets(directory: &Path) -> Vec<std::path::PathBuf> {
    let mut sets: Vec<_> = std::fs::read_dir(directory.join(warrant::storage::indexes::INDEXES_DIR))
        .map(|entries| entries.map(|entry| entry.unwrap().path()).collect())
        .unwrap_or_default();
    sets.sort();
    sets
}

/// A durable restart loads the index set written at the checkpoint, indexes the writes after
/// it, keeps deleted and revoked documents invisible, and answers like the engine before it;
/// with a damaged set it rebuilds (logged) and still answers the same.
#[actix_web::test]
async fn a_durable_restart_reads_the_index_set_indexes_later_writes_and_falls_back_on_damage() {
    let settings = walking_settings();
    let directory = tempfile::tempdir().unwrap();
    let (engine, recovery) = open_durable(&settings, directory.path()).await;
    assert!(matches!(recovery.indexes, warrant::storage::indexes::IndexSetOutcome::Rebuilt { .. }));
    warrant::app::load_corpus(engine.as_ref(), &super::snapshots::demo_corpus()).await.expect("demo corpus");
    engine.checkpoint(engine.acl().epoch()).await.expect("checkpoint");
    assert!(!index_sets(directory.path()).is_empty(), "the checkpoint wrote an index set");
    // After the set: a new version, a delete, a revoke and a new document.
    engine
        .upsert("acme", vec![doc("laptop-faq", "Laptop FAQ", "Laptops are replaced every four years.", &["everyone"])])
        .await
        .unwrap();
    engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "q3-forecast".into() }).await.unwrap();
    engine
        .mutate(AclMutation::Revoke {
            tenant: "acme".into(),
            doc_id: "reorg-plan".into(),
            groups: None,
            users: Some(vec!["alice".into()]),
        })
        .await
        .unwrap();
    engine
        .upsert(
            "acme",
            vec![doc("badge-policy", "Badge policy", "Visitor badges are returned at the desk.", &["everyone"])],
        )
        .await
        .unwrap();
    let before = retrieve_all(&engine, &principals()).await;
    drop(engine);

    let (engine, recovery) = open_durable(&settings, directory.path()).await;
    match &recovery.indexes {
        warrant::storage::indexes::IndexSetOutcome::Loaded { indexed_after, journaled, journal_stopped, .. } => {
            assert!(*journaled >= 2, "the new version and the new document come from the journal: {journaled}");
            assert_eq!(*indexed_after, 0, "nothing the journal holds is indexed again");
            assert!(journal_stopped.is_empty(), "{journal_stopped:?}");
        }
        other => panic!("the index set was not used: {other:?}"),
    }
    assert_eq!(engine.shards()[0].loaded_graphs(), 1);
    let after = retrieve_all(&engine, &principals()).await;
    assert_eq!(
        after.iter().map(|hits| hits.iter().map(|hit| hit.0.clone()).collect::<Vec<_>>()).collect::<Vec<_>>(),
        before.iter().map(|hits| hits.iter().map(|hit| hit.0.clone()).collect::<Vec<_>>()).collect::<Vec<_>>()
    );
    let everything = visible_docs(&after);
    assert!(!everything.contains(&"q3-forecast".to_owned()), "a deleted document came back");
    let alice = principal("acme", "alice", &["everyone", "engineering"]);
    let reorg = engine.retrieve(&engine.scope(&alice), "reorganisation plan").await.unwrap();
    assert!(
        reorg.candidates.iter().all(|candidate| candidate.chunk.doc_id != "reorg-plan"),
        "a revoked document came back"
    );
    let badges = engine.retrieve(&engine.scope(&alice), "visitor badges").await.unwrap();
    assert_eq!(badges.candidates.first().map(|candidate| candidate.chunk.doc_id.as_str()), Some("badge-policy"));
    drop(engine);

    // A damaged graph file: the set is refused and the indexes are rebuilt, same answers.
    let set = index_sets(directory.path()).pop().unwrap();
    let graph = set.join("shard-0000.graph.bin");
    let mut bytes = std::fs::read(&graph).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&graph, bytes).unwrap();
    let (engine, recovery) = open_durable(&settings, directory.path()).await;
    assert!(
        matches!(recovery.indexes, warrant::storage::indexes::IndexSetOutcome::Rebuilt { .. }),
        "{:?}",
        recovery.indexes
    );
    let rebuilt = retrieve_all(&engine, &principals()).await;
    assert_eq!(visible_docs(&rebuilt), visible_docs(&after));
}

/// A data directory reopened with another `index.shards` (the default went from 4 to 2) does not
/// use its index set: the shards are rebuilt from the stored rows in the new count, answer as
/// before, and the next index set is written in that count and loaded on the following start.
#[actix_web::test]
async fn a_store_reopened_with_another_shard_count_rebuilds_its_shards_and_answers_the_same() {
    let chunk_ids = |results: &[Vec<(String, String, f64)>]| -> Vec<Vec<String>> {
        results.iter().map(|hits| hits.iter().map(|hit| hit.0.clone()).collect()).collect()
    };
    let directory = tempfile::tempdir().unwrap();
    let four = settings(4, 64);
    let (engine, _) = open_durable(&four, directory.path()).await;
    warrant::app::load_corpus(engine.as_ref(), &super::snapshots::demo_corpus()).await.expect("demo corpus");
    engine.checkpoint(engine.acl().epoch()).await.expect("checkpoint");
    let before = retrieve_all(&engine, &principals()).await;
    assert!(before.iter().any(|hits| !hits.is_empty()));
    drop(engine);

    let two = settings(2, 64);
    let (engine, recovery) = open_durable(&two, directory.path()).await;
    match &recovery.indexes {
        warrant::storage::indexes::IndexSetOutcome::Rebuilt { reason } => {
            assert!(reason.contains("shard count"), "{reason}");
        }
        other => panic!("an index set of 4 shards was used by a 2-shard engine: {other:?}"),
    }
    assert_eq!(engine.shards().len(), 2);
    assert_eq!(chunk_ids(&retrieve_all(&engine, &principals()).await), chunk_ids(&before));
    engine.checkpoint(engine.acl().epoch()).await.expect("checkpoint");
    drop(engine);

    let (engine, recovery) = open_durable(&two, directory.path()).await;
    assert!(
        matches!(recovery.indexes, warrant::storage::indexes::IndexSetOutcome::Loaded { .. }),
        "{:?}",
        recovery.indexes
    );
    assert_eq!(chunk_ids(&retrieve_all(&engine, &principals()).await), chunk_ids(&before));
}
