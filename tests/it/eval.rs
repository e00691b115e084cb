//! `warrant eval retrieval` and `warrant ingest` end to end: the binary on a tiny two-tenant
//! BEIR-style dataset written here (never the shared data), on the hashed embedder.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Two tenants; both ask the same question, each must get only its own documents.
fn write_dataset(dir: &Path) {
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

fn warrant(arguments: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(arguments)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the warrant binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn eval_retrieval_scores_every_retriever_without_crossing_tenants() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let dataset = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = warrant(&["eval", "retrieval", "--dataset", dataset, "--embedder", "hashed", "--json"]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["queries"], 4, "the unjudged query is not scored");
    assert_eq!(report["cross_tenant_hits"], 0);
    assert!(report["embedder"].as_str().unwrap().starts_with("hashed"));
    for retriever in ["lexical", "vector", "hybrid"] {
        let metrics = &report[retriever];
        for measure in ["ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10"] {
            let value = metrics[measure].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&value), "{retriever} {measure} {value}");
        }
        // Each tenant holds at most three documents: all of them are within the top 10.
        assert_eq!(metrics["recall_at_10"], 1.0, "{retriever}");
    }
    assert_eq!(report["lexical"]["mrr_at_10"], 1.0);
    assert_eq!(report["hybrid"]["mrr_at_10"], 1.0);
}

#[test]
fn eval_retrieval_reads_a_split_folder_and_limits_queries() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let split = dir.path().join("train");
    let (ok, stdout, stderr) =
        warrant(&["eval", "retrieval", "--dataset", split.to_str().unwrap(), "--embedder", "hashed", "--json"]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["queries"], 1);
    assert!(report["dataset"].as_str().unwrap().ends_with("/train"), "{}", report["dataset"]);
    let dataset = dir.path().to_str().unwrap();
    let arguments =
        ["eval", "retrieval", "--dataset", dataset, "--embedder", "hashed", "--limit-queries", "2", "--json"];
    let (ok, stdout, stderr) = warrant(&arguments);
    assert!(ok, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["queries"], 2);
}

#[test]
fn ingest_reports_documents_chunks_and_skipped_empty_ones() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let (ok, stdout, stderr) =
        warrant(&["ingest", "--dataset", dir.path().to_str().unwrap(), "--embedder", "hashed", "--json"]);
    assert!(ok, "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["documents"], 5);
    assert_eq!(summary["skipped_empty"], 0, "an empty text is indexed by its title");
    assert_eq!(summary["tenants"], 2);
    assert!(summary["chunks"].as_u64().unwrap() >= 5);
}

#[test]
fn eval_retrieval_names_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    std::fs::write(dir.path().join("qrels.tsv"), "query-id\tcorpus-id\tscore\nacme:q1 acme:1 1\n").unwrap();
    let (ok, _, stderr) =
        warrant(&["eval", "retrieval", "--dataset", dir.path().to_str().unwrap(), "--embedder", "hashed"]);
    assert!(!ok);
    assert!(stderr.contains("qrels.tsv:2: expected 3 tab-separated fields"), "{stderr}");
}
