//! Unit tests of `storage`.

use super::*;
use crate::domain::{ChunkingConfig, DocAcl, Document, Principal, chunk_document};

const EMBEDDER: &str = "hashed-test";
const DIMENSION: usize = 4;
const CACHE: usize = DEFAULT_CACHE_MB << 20;

fn upsert(acl: &AclStore, store: &Store, tenant: &str, doc_id: &str, version: u64, text: &str) -> DocOrdinal {
    let ordinal = acl.reserve_ordinals(1).unwrap().start;
    let document = Document {
        tenant: tenant.into(),
        doc_id: doc_id.into(),
        version,
        title: String::new(),
        text: text.into(),
        acl: DocAcl { groups: vec!["all".into()], users: vec![] },
        layout: None,
    };
    let chunks = chunk_document(&document, ordinal, &ChunkingConfig { max_tokens: 64, overlap_tokens: 8 });
    let vectors: Vec<Vec<f32>> = chunks.iter().map(|_| vec![0.5; DIMENSION]).collect();
    let items: Vec<(&Chunk, &[f32])> = chunks.iter().zip(&vectors).map(|(c, v)| (c, v.as_slice())).collect();
    store.stage(&[EncodedDocument::encode(ordinal, &items)]).unwrap();
    let prepared = acl
        .prepare(vec![AclMutation::Upsert {
            tenant: tenant.into(),
            doc_id: doc_id.into(),
            version,
            ordinal,
            title: String::new(),
            acl: document.acl.clone(),
        }])
        .unwrap();
    let removed = prepared.retired();
    store
        .commit(&Commit {
            changes: prepared.changes(),
            added: &[],
            removed: &removed,
            published: &RoaringBitmap::from_iter([ordinal]),
            next_ordinal: acl.next_ordinal(),
        })
        .unwrap();
    acl.publish(prepared).unwrap();
    ordinal
}

fn revoke(acl: &AclStore, store: &Store, tenant: &str, doc_id: &str) {
    let prepared = acl
        .prepare(vec![AclMutation::Revoke { tenant: tenant.into(), doc_id: doc_id.into(), groups: None, users: None }])
        .unwrap();
    let removed = prepared.retired();
    store
        .commit(&Commit {
            changes: prepared.changes(),
            added: &[],
            removed: &removed,
            published: &RoaringBitmap::new(),
            next_ordinal: acl.next_ordinal(),
        })
        .unwrap();
    acl.publish(prepared).unwrap();
}

fn reader() -> Principal {
    Principal::new("acme", "u", ["all"])
}

#[test]
fn what_was_committed_comes_back_after_reopening_with_the_same_lineage() {
    let directory = tempfile::tempdir().unwrap();
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(recovered.created);
    let acl = recovered.acl;
    let lineage = acl.lineage().to_owned();
    let first = upsert(&acl, &store, "acme", "a", 1, "alpha text about hotels");
    let second = upsert(&acl, &store, "acme", "a", 2, "alpha text about trains");
    upsert(&acl, &store, "acme", "b", 1, "beta text");
    revoke(&acl, &store, "acme", "b");
    drop(store);
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(!recovered.created);
    let snapshot = recovered.acl.load();
    assert_eq!(recovered.acl.lineage(), lineage);
    assert_eq!(snapshot.epoch(), acl.epoch());
    assert_eq!(recovered.acl.log(), acl.log());
    assert_eq!(recovered.acl.next_ordinal(), acl.next_ordinal());
    assert!(!snapshot.allows(&reader(), first), "superseded version stays unreadable");
    assert!(snapshot.allows(&reader(), second));
    assert_eq!(snapshot.entry("acme", "b").unwrap().acl, DocAcl::default(), "the revoke survived");
    // Only live versions keep rows: the superseded version's chunks were removed.
    assert!(recovered.chunks.iter().all(|chunk| chunk.doc_ordinal != first));
    assert!(recovered.chunks.iter().any(|chunk| chunk.doc_ordinal == second));
    // Vectors are read on demand, for the chunks that need indexing.
    let live: RoaringBitmap = [second].into_iter().collect();
    let vectors = store.vectors(&live).unwrap();
    assert_eq!(vectors.len(), recovered.chunks.iter().filter(|chunk| chunk.doc_ordinal == second).count());
    assert!(vectors.iter().all(|((ordinal, _), vector)| *ordinal == second && vector.len() == DIMENSION));
}

/// A batch whose rows were staged but whose commit never happened (a crash in between):
/// reopening deletes the rows instead of refusing the file or serving them.
#[test]
fn rows_staged_but_never_published_are_deleted_on_reopening() {
    let directory = tempfile::tempdir().unwrap();
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    let acl = recovered.acl;
    let live = upsert(&acl, &store, "acme", "a", 1, "alpha text");
    let abandoned = acl.reserve_ordinals(1).unwrap().start;
    let document = Document {
        tenant: "acme".into(),
        doc_id: "b".into(),
        version: 1,
        title: String::new(),
        text: "beta text".into(),
        acl: DocAcl { groups: vec!["all".into()], users: vec![] },
        layout: None,
    };
    let chunks = chunk_document(&document, abandoned, &ChunkingConfig { max_tokens: 64, overlap_tokens: 8 });
    let vector = vec![0.25; DIMENSION];
    let items: Vec<(&Chunk, &[f32])> = chunks.iter().map(|chunk| (chunk, vector.as_slice())).collect();
    store.stage(&[EncodedDocument::encode(abandoned, &items)]).unwrap();
    drop(store);
    for _ in 0..2 {
        let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
        assert_eq!(recovered.acl.epoch(), acl.epoch());
        assert!(recovered.chunks.iter().all(|chunk| chunk.doc_ordinal == live));
        assert!(!recovered.chunks.is_empty());
        let txn = store.database().unwrap().begin_read().unwrap();
        assert!(txn.open_table(CHUNKS).unwrap().get(abandoned).unwrap().is_none(), "the staged rows were deleted");
        assert!(txn.open_table(STAGED).unwrap().is_empty().unwrap());
    }
}

#[test]
fn a_checkpoint_compacts_the_log_and_recovery_replays_what_follows_it() {
    let directory = tempfile::tempdir().unwrap();
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    let acl = recovered.acl;
    upsert(&acl, &store, "acme", "a", 1, "alpha");
    upsert(&acl, &store, "acme", "b", 1, "beta");
    store.checkpoint(&acl.load(), 1).unwrap();
    acl.compact(1);
    revoke(&acl, &store, "acme", "a");
    assert_eq!(store.change_batches().unwrap(), 2, "epoch 1 compacted, 2 and 3 kept");
    drop(store);
    let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert_eq!(recovered.checkpoint_epoch, 2);
    assert_eq!(recovered.replayed, 1);
    assert_eq!(recovered.acl.epoch(), 3);
    assert_eq!(recovered.acl.log_floor(), 1);
    assert!(recovered.acl.changes_since(0).is_err(), "compacted changes are not served");
    assert_eq!(recovered.acl.changes_since(1).unwrap(), acl.changes_since(1).unwrap());
    assert_eq!(recovered.acl.load().entry("acme", "a").unwrap().acl, DocAcl::default());
}

#[test]
fn another_embedder_is_refused_naming_the_file() {
    let directory = tempfile::tempdir().unwrap();
    drop(Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap());
    let error = Store::open(directory.path(), "minilm", 384, CACHE).err().unwrap();
    assert!(matches!(error, StorageError::Embedder { .. }), "{error}");
    assert!(error.to_string().contains(STORE_FILE), "{error}");
}

#[test]
fn a_corrupted_or_truncated_file_is_refused_naming_the_file_never_opened_with_less() {
    let directory = tempfile::tempdir().unwrap();
    {
        let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
        for index in 0..40 {
            upsert(&recovered.acl, &store, "acme", &format!("d{index}"), 1, &"words of text ".repeat(50));
        }
    }
    let (epoch, chunks) = {
        let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
        (recovered.acl.epoch(), recovered.chunks.len())
    };
    let path = directory.path().join(STORE_FILE);
    let original = std::fs::read(&path).unwrap();
    // Flip bytes at tenths of the file (a page no committed tree uses may change freely),
    // and truncate to half: each is refused naming the file, or opens with everything.
    let mut damaged: Vec<Vec<u8>> = (1..10)
        .map(|tenth| {
            let mut flipped = original.clone();
            let at = flipped.len() * tenth / 10;
            for byte in &mut flipped[at..at + 64] {
                *byte ^= 0xA5;
            }
            flipped
        })
        .collect();
    damaged.push(original[..original.len() / 2].to_vec());
    let mut refused = 0;
    for (case, bytes) in damaged.iter().enumerate() {
        std::fs::write(&path, bytes).unwrap();
        match Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE) {
            Ok((_store, recovered)) => {
                assert_ne!(case, 9, "a truncated file is refused");
                assert_eq!((recovered.acl.epoch(), recovered.chunks.len()), (epoch, chunks), "case {case}");
            }
            Err(error) => {
                refused += 1;
                assert!(matches!(error, StorageError::Corrupted { .. }), "{error}");
                assert!(error.to_string().contains(STORE_FILE), "{error}");
            }
        }
    }
    assert!(refused >= 2, "damage on live pages is refused, not only truncation: {refused} of 10");
}

#[test]
fn a_closed_store_is_sealed_and_reopens_without_the_page_check_once() {
    let directory = tempfile::tempdir().unwrap();
    let seal = directory.path().join(super::seal::SEAL_FILE);
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(!recovered.sealed, "a new store has no seal");
    upsert(&recovered.acl, &store, "acme", "a", 1, "alpha");
    store.close().unwrap();
    assert!(seal.exists(), "a closed store is sealed");
    let error = store.checkpoint(&recovered.acl.load(), 0).err().unwrap();
    assert!(error.to_string().contains("closed"), "{error}");
    store.close().unwrap();
    drop(store);

    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(recovered.sealed, "the sealed file opens without redb's page check");
    assert!(!seal.exists(), "the open takes the seal away before redb writes to the file");
    assert_eq!(recovered.acl.epoch(), 1);
    upsert(&recovered.acl, &store, "acme", "b", 1, "beta");
    drop(store); // no close: as a crash
    let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(!recovered.sealed, "after a crash every page is checked");
    assert_eq!(recovered.acl.epoch(), 2);
}

#[test]
fn a_file_changed_after_its_seal_gets_the_page_check_and_damage_is_refused() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(STORE_FILE);
    let seal = directory.path().join(super::seal::SEAL_FILE);
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    for index in 0..40 {
        upsert(&recovered.acl, &store, "acme", &format!("d{index}"), 1, &"words of text ".repeat(50));
    }
    store.close().unwrap();
    drop(store);
    let (sealed_file, sealed_seal) = (std::fs::read(&path).unwrap(), std::fs::read(&seal).unwrap());

    // A stale seal: the file was written after it (a later open and a crash). It does not
    // vouch for the file, which opens whole after the page check.
    let (store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    upsert(&recovered.acl, &store, "acme", "later", 1, "written after the seal");
    drop(store);
    std::fs::write(&seal, &sealed_seal).unwrap();
    let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(!recovered.sealed);
    assert_eq!(recovered.acl.epoch(), 41, "the write after the seal is there");
    drop(_store);

    // Damage after the close, the seal left in place: never trusted. Each case is refused
    // naming the file, or opens with everything after checking every page.
    std::fs::write(&path, &sealed_file).unwrap();
    let (epoch, chunks) = {
        let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
        (recovered.acl.epoch(), recovered.chunks.len())
    };
    assert_eq!(epoch, 40);
    let mut refused = 0;
    for tenth in 1..10 {
        let mut flipped = sealed_file.clone();
        let at = flipped.len() * tenth / 10;
        for byte in &mut flipped[at..at + 64] {
            *byte ^= 0xA5;
        }
        std::fs::write(&path, &flipped).unwrap();
        std::fs::write(&seal, &sealed_seal).unwrap();
        match Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE) {
            Ok((_store, recovered)) => {
                assert!(!recovered.sealed, "case {tenth}: a changed file was trusted by its seal");
                assert_eq!((recovered.acl.epoch(), recovered.chunks.len()), (epoch, chunks), "case {tenth}");
            }
            Err(error) => {
                refused += 1;
                assert!(matches!(error, StorageError::Corrupted { .. }), "{error}");
                assert!(error.to_string().contains(STORE_FILE), "{error}");
            }
        }
        assert!(!seal.exists(), "case {tenth}: the seal was taken away");
    }
    assert!(refused >= 2, "damage on live pages is refused: {refused} of 9");
    // The file as sealed, with a damaged seal: checked, and whole.
    std::fs::write(&path, &sealed_file).unwrap();
    std::fs::write(&seal, b"WRNTSEAL but not a seal").unwrap();
    let (_store, recovered) = Store::open(directory.path(), EMBEDDER, DIMENSION, CACHE).unwrap();
    assert!(!recovered.sealed);
    assert_eq!((recovered.acl.epoch(), recovered.chunks.len()), (epoch, chunks));
}
