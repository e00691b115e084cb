//! Unit tests of the engine's write path: a failed upsert publishes nothing and its indexed
//! chunks are purged; a new version retires and purges the old one.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Settings;
use crate::domain::{DocAcl, Principal};
use crate::embed::HashedEmbedder;
use crate::storage::WriteStep;

use super::{Engine, EngineParams, FaultHook};
use crate::retrieval::DocumentInput;

fn engine() -> Arc<Engine> {
    let mut settings = Settings::defaults();
    settings.embedder.dim = 64;
    settings.index.shards = 2;
    Engine::start(EngineParams::from_settings(&settings, 64), Arc::new(HashedEmbedder::new(64))).expect("engine")
}

fn document(doc_id: &str, text: &str) -> DocumentInput {
    DocumentInput {
        doc_id: doc_id.into(),
        title: doc_id.into(),
        text: text.into(),
        acl: DocAcl { groups: vec!["all".into()], users: vec![] },
        version: None,
        layout: None,
    }
}

fn lexical_documents(engine: &Engine) -> u64 {
    engine.stats().iter().map(|shard| shard.lexical_docs).sum()
}

/// Waits (bounded) for the background lexical purge to bring the count to `expected`.
async fn purged_to(engine: &Engine, expected: u64) -> u64 {
    for _ in 0..500 {
        if lexical_documents(engine) == expected {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    lexical_documents(engine)
}

async fn retrieved_docs(engine: &Engine, query: &str) -> Vec<String> {
    let scope = engine.scope(&Principal::new("acme", "carol", ["all"]));
    let retrieved = engine.retrieve(&scope, query).await.expect("retrieve");
    retrieved.candidates.iter().map(|candidate| candidate.chunk.doc_id.clone()).collect()
}

#[actix_rt::test]
async fn a_failed_upsert_publishes_nothing_and_its_indexed_chunks_are_purged() {
    for step in [WriteStep::Stage, WriteStep::Commit, WriteStep::Publish] {
        let engine = engine();
        engine.upsert("acme", vec![document("hotel", "Hotel stays cost 180 euros per night.")]).await.unwrap();
        let (epoch, indexed) = (engine.acl().epoch(), lexical_documents(&engine));
        let hook: FaultHook = Arc::new(move |at| at == step);
        engine.inject_faults(Some(hook));
        let failed =
            engine.upsert("acme", vec![document("zeppelin", "Zeppelin flights leave from hangar nine.")]).await;
        assert!(failed.is_err(), "{step:?}: the upsert failed");
        assert_eq!(engine.acl().epoch(), epoch, "{step:?}: no epoch was consumed");
        assert!(engine.acl().load().entry("acme", "zeppelin").is_none(), "{step:?}: no ACL entry");
        assert!(!retrieved_docs(&engine, "zeppelin hangar").await.contains(&"zeppelin".to_owned()), "{step:?}");
        assert_eq!(purged_to(&engine, indexed).await, indexed, "{step:?}: the indexed chunks were purged");
        // The failure left no lock held: the engine still writes.
        engine.inject_faults(None);
        engine.upsert("acme", vec![document("zeppelin", "Zeppelin flights leave from hangar nine.")]).await.unwrap();
        assert!(retrieved_docs(&engine, "zeppelin hangar").await.contains(&"zeppelin".to_owned()), "{step:?}");
    }
}

#[actix_rt::test]
async fn a_new_version_retires_and_purges_the_old_one() {
    let engine = engine();
    engine.upsert("acme", vec![document("hotel", "Hotel stays cost 180 euros per night.")]).await.unwrap();
    let indexed = lexical_documents(&engine);
    engine.upsert("acme", vec![document("hotel", "Hotel stays cost 210 euros per night.")]).await.unwrap();
    assert_eq!(purged_to(&engine, indexed).await, indexed, "the old version's lexical documents were purged");
    let scope = engine.scope(&Principal::new("acme", "carol", ["all"]));
    let retrieved = engine.retrieve(&scope, "hotel euros night").await.unwrap();
    let texts: Vec<&str> = retrieved.candidates.iter().map(|candidate| candidate.chunk.text.as_str()).collect();
    assert!(texts.iter().all(|text| !text.contains("180")), "{texts:?}");
    assert!(texts.iter().any(|text| text.contains("210")), "{texts:?}");
}
