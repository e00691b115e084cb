//! BM25 statistics are computed inside the caller's scope, end to end through the engine: another
//! tenant's documents, documents the caller may not read and revoked or deleted documents change
//! neither the order nor the value of the caller's lexical scores.

use std::collections::BTreeMap;

use warrant::acl::AclMutation;
use warrant::embedded::Engine;

use crate::support::{doc, engine, principal, settings};

const QUERY: &str = "expense report deadline";

/// `(doc_id, chunk ordinal) -> (lexical rank, score bits)` of what an acme user in `groups` gets.
async fn lexical_scores(engine: &Engine, groups: &[&str]) -> BTreeMap<(String, u32), (u32, u32)> {
    let scope = engine.scope(&principal("acme", "bob", groups));
    let retrieved = engine.retrieve(&scope, QUERY).await.unwrap();
    retrieved
        .candidates
        .iter()
        .filter_map(|candidate| {
            let placement = candidate.lexical?;
            Some((
                (candidate.chunk.doc_id.clone(), candidate.chunk.ordinal),
                (placement.rank, placement.score.to_bits()),
            ))
        })
        .collect()
}

fn first_chunk(doc_id: &str) -> (String, u32) {
    (doc_id.to_owned(), 0)
}

/// acme's documents, readable by staff (three of them match [`QUERY`]).
fn acme_documents() -> Vec<warrant::retrieval::DocumentInput> {
    vec![
        doc(
            "policy",
            "Expenses",
            "Expense reports are due at month end. Late expense reports need approval.",
            &["staff"],
        ),
        doc("annual", "Annual report", "The deadline for the annual report is in March.", &["staff"]),
        doc("travel", "Travel", "Book trips through the portal and keep a receipt for every expense.", &["staff"]),
        doc("lunch", "Canteen", "Lunch is served at noon.", &["staff"]),
    ]
}

/// One shard, so every document below shares the tantivy index acme's are searched in.
async fn acme_engine() -> std::sync::Arc<Engine> {
    let engine = engine(&settings(1));
    engine.upsert("acme", acme_documents()).await.unwrap();
    engine
}

/// A document packed with the query's terms, readable by `groups`.
fn packed(doc_id: &str, groups: &[&str]) -> warrant::retrieval::DocumentInput {
    doc(doc_id, "Expense report deadline", &"Expense report deadline. ".repeat(30), groups)
}

#[actix_web::test]
async fn another_tenants_documents_do_not_change_lexical_scores() {
    let engine = acme_engine().await;
    let before = lexical_scores(&engine, &["staff"]).await;
    assert_eq!(before.len(), 3, "{before:?}");
    let flood: Vec<_> = (0..20).map(|index| packed(&format!("flood{index}"), &["staff"])).collect();
    engine.upsert("globex", flood).await.unwrap();
    assert_eq!(lexical_scores(&engine, &["staff"]).await, before);
}

#[actix_web::test]
async fn an_unreadable_document_of_the_same_tenant_does_not_change_lexical_scores() {
    let engine = acme_engine().await;
    let before = lexical_scores(&engine, &["staff"]).await;
    engine.upsert("acme", vec![packed("board", &["exec"])]).await.unwrap();
    assert_eq!(lexical_scores(&engine, &["staff"]).await, before);
    // It is indexed next to them: a reader of it finds it.
    assert!(lexical_scores(&engine, &["staff", "exec"]).await.keys().any(|(doc_id, _)| doc_id == "board"));
}

#[actix_web::test]
async fn a_revoked_document_stops_shaping_lexical_scores_at_once() {
    let engine = acme_engine().await;
    let before = lexical_scores(&engine, &["staff"]).await;
    engine.upsert("acme", vec![packed("draft", &["staff"])]).await.unwrap();
    let readable = lexical_scores(&engine, &["staff"]).await;
    assert!(readable.keys().any(|(doc_id, _)| doc_id == "draft"));
    assert_ne!(readable[&first_chunk("policy")], before[&first_chunk("policy")], "readable, it shapes scores");
    let indexed = engine.stats()[0].lexical_docs;
    let revoke = AclMutation::Revoke { tenant: "acme".into(), doc_id: "draft".into(), groups: None, users: None };
    engine.mutate(revoke).await.unwrap();
    // Still in the shard (a revocation tombstones nothing), but outside every scope.
    assert_eq!(engine.stats()[0].lexical_docs, indexed);
    assert_eq!(lexical_scores(&engine, &["staff"]).await, before);
}

#[actix_web::test]
async fn a_deleted_document_stops_shaping_lexical_scores_at_once() {
    let without_draft = acme_engine().await;
    let before = lexical_scores(&without_draft, &["staff"]).await;
    // Indexed in the same batch, so the deleted chunk stays in a segment with live ones (a segment
    // left with no live doc is dropped at once): its postings remain until a merge.
    let engine = engine(&settings(1));
    let mut documents = acme_documents();
    documents.push(packed("draft", &["staff"]));
    engine.upsert("acme", documents).await.unwrap();
    let readable = lexical_scores(&engine, &["staff"]).await;
    assert_ne!(readable[&first_chunk("policy")], before[&first_chunk("policy")], "readable, it shapes scores");
    engine.mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "draft".into() }).await.unwrap();
    assert_eq!(lexical_scores(&engine, &["staff"]).await, before);
}

/// `(doc_id, chunk ordinal, lexical score)` of what an acme staff member gets for `query`, in
/// lexical rank order.
async fn lexical_ranking(engine: &Engine, query: &str) -> Vec<(String, u32, f32)> {
    let scope = engine.scope(&principal("acme", "bob", &["staff"]));
    let retrieved = engine.retrieve(&scope, query).await.unwrap();
    let mut ranked: Vec<(u32, (String, u32, f32))> = retrieved
        .candidates
        .iter()
        .filter_map(|candidate| {
            let placement = candidate.lexical?;
            Some((placement.rank, (candidate.chunk.doc_id.clone(), candidate.chunk.ordinal, placement.score)))
        })
        .collect();
    ranked.sort_by_key(|(rank, _)| *rank);
    ranked.into_iter().map(|(_, entry)| entry).collect()
}

/// An engine on `shards` shards holding acme's documents, more of them, one acme staff may not
/// read and another tenant's flood.
async fn spread_engine(shards: usize) -> std::sync::Arc<Engine> {
    let engine = engine(&settings(shards));
    let mut documents = acme_documents();
    let topics = ["expense", "report", "deadline", "travel", "receipt", "approval", "budget", "audit"];
    documents.extend((0..24).map(|index| {
        let words: Vec<&str> = (0..=index % 5).map(|offset| topics[(index * 3 + offset * 5) % topics.len()]).collect();
        let text = format!("Note {index} on {}. Filed by team {}.", words.join(" and "), index % 4);
        doc(&format!("note{index}"), &format!("Note {}", topics[index % topics.len()]), &text, &["staff"])
    }));
    documents.push(packed("board", &["exec"]));
    engine.upsert("acme", documents).await.unwrap();
    let flood: Vec<_> = (0..20).map(|index| packed(&format!("flood{index}"), &["staff"])).collect();
    engine.upsert("globex", flood).await.unwrap();
    engine
}

/// Regression: BM25 statistics were per shard, so a tenant's lexical scores (and with them the
/// order of hits merged from several shards) depended on how its chunks were spread over shards.
#[actix_web::test]
async fn lexical_scores_do_not_depend_on_the_shard_count() {
    let one = spread_engine(1).await;
    let four = spread_engine(4).await;
    let nonempty = four.stats().iter().filter(|shard| shard.lexical_docs > 0).count();
    assert!(nonempty > 1, "the corpus is spread over several shards");
    for query in [QUERY, "travel receipt", "audit budget approval", "note", "lunch"] {
        let expected = lexical_ranking(&one, query).await;
        let got = lexical_ranking(&four, query).await;
        assert!(!expected.is_empty(), "{query}");
        let order = |ranking: &[(String, u32, f32)]| -> Vec<(String, u32)> {
            ranking.iter().map(|(doc_id, ordinal, _)| (doc_id.clone(), *ordinal)).collect()
        };
        assert_eq!(order(&got), order(&expected), "{query}");
        for ((_, _, got_score), (doc_id, _, expected_score)) in got.iter().zip(&expected) {
            let tolerance = 1e-5 * expected_score.abs();
            assert!(
                (got_score - expected_score).abs() <= tolerance,
                "{query} {doc_id}: {got_score} vs {expected_score}"
            );
        }
    }
}
