//! `warrant eval retrieval` and `warrant ingest` end to end, in process: the command's library
//! path (loader, real engine, ingestion, three retrievers, metrics) on a tiny two-tenant
//! BEIR-style dataset written here (never the shared data), on the hashed embedder.

use std::path::Path;

use warrant::config::Settings;
use warrant::eval::dataset::{Dataset, NoProgress, ingest};
use warrant::eval::retrieval::{RetrievalReport, RunOptions, run};

use crate::support;

/// Two tenants; both ask the same question, each must get only its own documents.
pub(crate) fn write_dataset(dir: &Path) {
    let corpus = [
        r#"{"_id": "acme:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 250 euros per night in London.", "tenant": "acme"}"#,
        r#"{"_id": "acme:2", "title": "Laptop guide", "text": "Laptops are replaced every three years by the helpdesk.", "tenant": "acme"}"#,
        r#"{"_id": "acme:3", "title": "Parking", "text": "The garage opens at seven and closes at nine in the evening.", "tenant": "acme"}"#,
        r#"{"_id": "globex:1", "title": "Travel policy", "text": "Hotel stays are reimbursed up to 210 euros per night in London.", "tenant": "globex"}"#,
        r#"{"_id": "globex:2", "title": "Cafeteria", "text": "Lunch is served from noon in the cafeteria on the second floor.", "tenant": "globex"}"#,
        r#"{"_id": "globex:3", "title": "Empty", "text": "", "tenant": "globex"}"#,
    ];
    let queries = [
        r#"{"_id": "acme:q1", "text": "How much is a hotel night in London reimbursed?", "tenant": "acme"}"#,
        r#"{"_id": "acme:q2", "text": "When are laptops replaced?", "tenant": "acme"}"#,
        r#"{"_id": "globex:q1", "text": "How much is a hotel night in London reimbursed?", "tenant": "globex"}"#,
        r#"{"_id": "globex:q2", "text": "Where is lunch served?", "tenant": "globex"}"#,
        r#"{"_id": "globex:q3", "text": "A question nobody judged", "tenant": "globex"}"#,
    ];
    let qrels = "query-id\tcorpus-id\tscore\nacme:q1\tacme:1\t1\nacme:q2\tacme:2\t2\nglobex:q1\tglobex:1\t1\nglobex:q2\tglobex:2\t1\n";
    std::fs::write(dir.join("corpus.jsonl"), corpus.join("\n")).unwrap();
    std::fs::write(dir.join("queries.jsonl"), queries.join("\n")).unwrap();
    std::fs::write(dir.join("qrels.tsv"), qrels).unwrap();
    // A split folder with its own queries and qrels that shares the parent's corpus.
    let split = dir.join("train");
    std::fs::create_dir(&split).unwrap();
    std::fs::write(split.join("queries.jsonl"), queries[1]).unwrap();
    std::fs::write(split.join("qrels.tsv"), "query-id\tcorpus-id\tscore\nacme:q2\tacme:2\t1\n").unwrap();
}

/// Settings of the tests: the default configuration on the hashed embedder.
pub(crate) fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.embedder.kind = warrant::config::EmbedderKind::Hashed;
    settings.embedder.dim = 64;
    settings
}

/// Runs `warrant eval retrieval`'s library path (what the command calls after parsing).
fn eval(dataset: &Path, queries: Option<&Path>, limit_queries: Option<usize>) -> RetrievalReport {
    let dataset = Dataset::load(dataset, queries).expect("dataset loads");
    let options = RunOptions { limit_queries, cache_dir: None };
    actix_rt::System::new().block_on(async move {
        let (summary, report) = run(&settings(), &dataset, &options, &NoProgress).await.expect("evaluation runs");
        assert_eq!(summary.documents, 6);
        report
    })
}

#[test]
fn eval_retrieval_scores_every_retriever_without_crossing_tenants() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let report = eval(dir.path(), None, None);
    assert_eq!(report.queries, 4, "the unjudged query is not scored");
    assert_eq!(report.cross_tenant_hits, 0);
    assert!(report.embedder.starts_with("hashed"));
    for (name, metrics) in [("lexical", report.lexical), ("vector", report.vector), ("hybrid", report.hybrid)] {
        for value in [metrics.ndcg_at_10, metrics.recall_at_10, metrics.recall_at_100, metrics.mrr_at_10] {
            assert!((0.0..=1.0).contains(&value), "{name} {value}");
        }
        // Each tenant holds at most three documents: all of them are within the top 10.
        assert_eq!(metrics.recall_at_10, 1.0, "{name}");
    }
    assert_eq!(report.lexical.mrr_at_10, 1.0);
    assert_eq!(report.hybrid.mrr_at_10, 1.0);
    // Per-query scores average to the report's means and feed its intervals.
    assert_eq!(report.per_query.len(), report.queries);
    let mean = report.per_query.iter().map(|query| query.hybrid).sum::<f64>() / report.queries as f64;
    assert!((mean - report.hybrid.ndcg_at_10).abs() < 1e-12);
    let confidence = report.confidence;
    assert!((confidence.hybrid.mean - report.hybrid.ndcg_at_10).abs() < 1e-12);
    assert!(confidence.hybrid.low <= confidence.hybrid.mean && confidence.hybrid.mean <= confidence.hybrid.high);
    let gain = report.hybrid.ndcg_at_10 - report.lexical.ndcg_at_10;
    assert!((confidence.hybrid_minus_lexical.mean - gain).abs() < 1e-12);
    let json = serde_json::to_value(&report).unwrap();
    for key in ["embedder", "dataset", "queries", "lexical", "vector", "hybrid", "confidence", "cross_tenant_hits"] {
        assert!(json.get(key).is_some(), "{key}");
    }
    assert!(json.get("per_query").is_none(), "per-query scores go to --per-query, not the report");
}

#[test]
fn eval_retrieval_reads_a_split_folder_and_limits_queries() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let report = eval(&dir.path().join("train"), None, None);
    assert_eq!(report.queries, 1);
    assert!(report.dataset.ends_with("/train"), "{}", report.dataset);
    assert_eq!(eval(dir.path(), Some(&dir.path().join("train")), None).queries, 1);
    assert_eq!(eval(dir.path(), None, Some(2)).queries, 2);
}

#[test]
fn ingest_reports_documents_chunks_and_indexes_an_empty_text_by_its_title() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let dataset = Dataset::load(dir.path(), None).unwrap();
    let settings = settings();
    let summary = actix_rt::System::new().block_on(async move {
        let engine = support::engine(&settings);
        ingest(&engine, &dataset, 2, &NoProgress).await.unwrap()
    });
    assert_eq!(summary.documents, 6);
    assert_eq!(summary.skipped_empty, 0);
    assert_eq!(summary.tenants, 2);
    assert!(summary.chunks >= 6);
}

#[test]
fn eval_retrieval_names_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    std::fs::write(dir.path().join("qrels.tsv"), "query-id\tcorpus-id\tscore\nacme:q1 acme:1 1\n").unwrap();
    let error = Dataset::load(dir.path(), None).unwrap_err().to_string();
    assert!(error.ends_with("qrels.tsv:2: expected 3 tab-separated fields, found 1"), "{error}");
}
