//! Loader of BEIR-style labeled retrieval collections (the `../shared/data` layout) and the
//! ingestion of their corpus into a real [`Engine`].
//!
//! A dataset folder holds `corpus.jsonl` (`{"_id", "title", "text"[, "tenant"]}`),
//! `queries.jsonl` (`{"_id", "text"[, "tenant"]}`) and `qrels.tsv` (header
//! `query-id<TAB>corpus-id<TAB>score`). A split folder such as `scifact/train` holds only its own
//! queries and qrels and shares the parent's corpus: [`Dataset::load`] looks for `corpus.jsonl`
//! in the folder first, then in its parent. Every parse error names the file and the line.
//!
//! Ingestion puts every document of tenant `t` (or of the single tenant [`DEFAULT_TENANT`] when
//! the corpus names none) under the ACL group [`group_of`]`(t)`, which the evaluation principal
//! of that tenant holds; nothing else is readable by it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::domain::{DocAcl, Principal};
use crate::embedded::Engine;
use crate::retrieval::{DocumentInput, RetrievalError, RetrievalResult, UpsertOutcome};

/// Tenant of documents and queries that name none.
pub const DEFAULT_TENANT: &str = "eval";

/// Errors reading a dataset.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line could not be parsed.
    #[error("{path}:{line}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The folder does not look like a dataset.
    #[error("{0}")]
    Layout(String),
}

/// Result alias of the loader.
pub type DatasetResult<T> = Result<T, DatasetError>;

/// One corpus document.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct CorpusDocument {
    /// Document id (unique in the corpus).
    #[serde(rename = "_id")]
    pub id: String,
    /// Title (may be empty).
    #[serde(default)]
    pub title: String,
    /// Body text (may be empty; the title is indexed alone then).
    #[serde(default)]
    pub text: String,
    /// Owning tenant; [`DEFAULT_TENANT`] when absent.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl CorpusDocument {
    /// The owning tenant.
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }
}

/// One query.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct EvalQuery {
    /// Query id (the key of the qrels).
    #[serde(rename = "_id")]
    pub id: String,
    /// Question text.
    pub text: String,
    /// Asking tenant; [`DEFAULT_TENANT`] when absent.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl EvalQuery {
    /// The asking tenant.
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }
}

/// Graded judgments: query id → (document id → relevance > 0).
pub type Qrels = HashMap<String, HashMap<String, u32>>;

/// A loaded dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Folder name used in reports (e.g. `scifact/train`).
    pub name: String,
    /// The corpus file (its SHA-256 keys the embedding cache).
    pub corpus_path: PathBuf,
    /// Documents in file order.
    pub corpus: Vec<CorpusDocument>,
    /// Queries in file order.
    pub queries: Vec<EvalQuery>,
    /// Positive judgments.
    pub qrels: Qrels,
}

impl Dataset {
    /// Loads `dir`: queries and qrels from `queries_dir` (default `dir`), the corpus from `dir`
    /// or, for a split folder without one, from its parent.
    pub fn load(dir: &Path, queries_dir: Option<&Path>) -> DatasetResult<Self> {
        let corpus_path = [dir.join("corpus.jsonl"), dir.join("..").join("corpus.jsonl")]
            .into_iter()
            .find(|path| path.is_file())
            .ok_or_else(|| DatasetError::Layout(format!("no corpus.jsonl in {} or its parent", dir.display())))?;
        let queries_dir = queries_dir.unwrap_or(dir);
        let corpus: Vec<CorpusDocument> = read_jsonl(&corpus_path)?;
        let queries: Vec<EvalQuery> = read_jsonl(&queries_dir.join("queries.jsonl"))?;
        let qrels = read_qrels(&queries_dir.join("qrels.tsv"))?;
        let mut seen = std::collections::HashSet::new();
        if let Some(duplicate) = corpus.iter().find(|document| !seen.insert(document.id.as_str())) {
            return Err(DatasetError::Layout(format!(
                "{}: document id {} appears more than once",
                corpus_path.display(),
                duplicate.id
            )));
        }
        Ok(Self { name: dataset_name(queries_dir), corpus_path, corpus, queries, qrels })
    }

    /// SHA-256 of the corpus file, hex.
    pub fn corpus_sha256(&self) -> DatasetResult<String> {
        let bytes = std::fs::read(&self.corpus_path)
            .map_err(|source| DatasetError::Read { path: self.corpus_path.clone(), source })?;
        Ok(hex::encode(Sha256::digest(&bytes)))
    }

    /// Documents grouped by tenant (sorted by tenant, file order inside).
    pub fn corpus_by_tenant(&self) -> BTreeMap<&str, Vec<&CorpusDocument>> {
        let mut tenants: BTreeMap<&str, Vec<&CorpusDocument>> = BTreeMap::new();
        for document in &self.corpus {
            tenants.entry(document.tenant()).or_default().push(document);
        }
        tenants
    }
}

/// `scifact`, or `scifact/train` for a split folder.
fn dataset_name(dir: &Path) -> String {
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name = |path: &Path| path.file_name().map(|name| name.to_string_lossy().into_owned());
    match (canonical.parent().and_then(name), name(&canonical)) {
        (Some(parent), Some(leaf)) if !canonical.join("corpus.jsonl").is_file() => format!("{parent}/{leaf}"),
        (_, Some(leaf)) => leaf,
        _ => canonical.display().to_string(),
    }
}

fn read_text(path: &Path) -> DatasetResult<String> {
    std::fs::read_to_string(path).map_err(|source| DatasetError::Read { path: path.to_path_buf(), source })
}

/// Parses a JSON-lines file (blank lines skipped).
pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> DatasetResult<Vec<T>> {
    parse_jsonl(path, &read_text(path)?)
}

fn parse_jsonl<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> DatasetResult<Vec<T>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|error| DatasetError::Parse {
                path: path.to_path_buf(),
                line: index + 1,
                reason: error.to_string(),
            })
        })
        .collect()
}

/// Parses `qrels.tsv`: a header line, then `query-id<TAB>corpus-id<TAB>score`; scores of 0 and
/// below are not relevant and are dropped.
pub fn read_qrels(path: &Path) -> DatasetResult<Qrels> {
    parse_qrels(path, &read_text(path)?)
}

fn parse_qrels(path: &Path, text: &str) -> DatasetResult<Qrels> {
    let parse_error = |line: usize, reason: String| DatasetError::Parse { path: path.to_path_buf(), line, reason };
    let mut lines = text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty());
    match lines.next() {
        Some((_, header)) if header.trim_start().starts_with("query-id") => {}
        Some((index, _)) => {
            return Err(parse_error(index + 1, "expected the header query-id<TAB>corpus-id<TAB>score".into()));
        }
        None => return Err(parse_error(1, "empty qrels file".into())),
    }
    let mut qrels = Qrels::new();
    for (index, line) in lines {
        let fields: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        let [query, document, score] = fields[..] else {
            return Err(parse_error(index + 1, format!("expected 3 tab-separated fields, found {}", fields.len())));
        };
        let score: i64 = score
            .trim()
            .parse()
            .map_err(|error| parse_error(index + 1, format!("score {score:?} is not an integer: {error}")))?;
        if score > 0 {
            let relevance = u32::try_from(score).unwrap_or(u32::MAX);
            qrels.entry(query.to_owned()).or_default().insert(document.to_owned(), relevance);
        }
    }
    Ok(qrels)
}

/// ACL group that reads every document of `tenant` in an evaluation.
pub fn group_of(tenant: &str) -> String {
    format!("eval-readers-{tenant}")
}

/// The evaluation principal of `tenant` (member of [`group_of`]`(tenant)` only).
pub fn principal_of(tenant: &str) -> Principal {
    Principal::new(tenant, "eval-user", [group_of(tenant)])
}

/// The document to ingest for a corpus entry: its text, or its title when the text is blank;
/// `None` when both are blank (such entries are skipped and counted).
pub fn document_input(document: &CorpusDocument, acl: &DocAcl) -> Option<DocumentInput> {
    let text = if document.text.trim().is_empty() { &document.title } else { &document.text };
    (!text.trim().is_empty()).then(|| DocumentInput {
        doc_id: document.id.clone(),
        title: document.title.clone(),
        text: text.clone(),
        acl: acl.clone(),
        version: None,
        layout: None,
    })
}

/// What an ingestion did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct IngestSummary {
    /// Documents written.
    pub documents: usize,
    /// Documents skipped because both title and text are empty.
    pub skipped_empty: usize,
    /// Chunks written.
    pub chunks: usize,
    /// Tenants written.
    pub tenants: usize,
    /// Wall time.
    pub seconds: f64,
}

impl IngestSummary {
    /// Chunks (passages) per second.
    pub fn passages_per_second(&self) -> f64 {
        if self.seconds > 0.0 { self.chunks as f64 / self.seconds } else { 0.0 }
    }
}

impl fmt::Display for IngestSummary {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} documents ({} empty skipped), {} chunks, {} tenants in {:.1} s ({:.1} passages/s)",
            self.documents,
            self.skipped_empty,
            self.chunks,
            self.tenants,
            self.seconds,
            self.passages_per_second()
        )
    }
}

/// Observes ingestion progress (documents done so far, out of a total).
pub trait Progress: Send + Sync {
    /// Called once with the total number of documents.
    fn start(&self, total: usize);
    /// Called after every batch with the number of documents it held.
    fn advance(&self, documents: usize);
    /// Called once at the end.
    fn finish(&self);
}

/// A [`Progress`] that reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _total: usize) {}
    fn advance(&self, _documents: usize) {}
    fn finish(&self) {}
}

/// Where a corpus is ingested: a backend's all-or-nothing batch upsert into one tenant (the
/// embedded [`Engine`] or [`crate::postgres::PostgresBackend`]).
#[async_trait::async_trait]
pub trait DocumentSink: Send + Sync {
    /// Upserts `inputs` into `tenant` as one batch.
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome>;
}

#[async_trait::async_trait]
impl DocumentSink for Engine {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        Engine::upsert(self, tenant, inputs).await
    }
}

#[async_trait::async_trait]
impl DocumentSink for crate::postgres::PostgresBackend {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        crate::postgres::PostgresBackend::upsert(self, tenant, inputs).await
    }
}

#[async_trait::async_trait]
impl<T: DocumentSink + ?Sized> DocumentSink for Arc<T> {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        T::upsert(self, tenant, inputs).await
    }
}

/// Upserts the whole corpus into `engine` (either backend), `batch` documents per upsert (each
/// upsert embeds its chunks in the backend's embedding batches). A document with an empty text
/// is indexed by its title; one with neither is skipped and counted.
pub async fn ingest<S: DocumentSink + ?Sized>(
    engine: &S,
    dataset: &Dataset,
    batch: usize,
    progress: &dyn Progress,
) -> Result<IngestSummary, RetrievalError> {
    let started = Instant::now();
    let tenants = dataset.corpus_by_tenant();
    progress.start(dataset.corpus.len());
    let mut summary = IngestSummary { documents: 0, skipped_empty: 0, chunks: 0, tenants: tenants.len(), seconds: 0.0 };
    for (tenant, documents) in &tenants {
        let acl = DocAcl { groups: vec![group_of(tenant)], users: Vec::new() };
        for group in documents.chunks(batch.max(1)) {
            let inputs: Vec<DocumentInput> =
                group.iter().filter_map(|document| document_input(document, &acl)).collect();
            summary.skipped_empty += group.len() - inputs.len();
            if !inputs.is_empty() {
                let outcome = engine.upsert(tenant, inputs).await?;
                summary.documents += outcome.documents;
                summary.chunks += outcome.chunks;
            }
            progress.advance(group.len());
        }
    }
    progress.finish();
    summary.seconds = started.elapsed().as_secs_f64().max(Duration::from_nanos(1).as_secs_f64());
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qrels_keep_graded_positive_judgments() {
        let text = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq1\td3\t0\nq2\td1\t1\n";
        let qrels = parse_qrels(Path::new("qrels.tsv"), text).unwrap();
        assert_eq!(qrels["q1"].len(), 2);
        assert_eq!(qrels["q1"]["d1"], 2);
        assert_eq!(qrels["q2"]["d1"], 1);
    }

    #[test]
    fn qrels_errors_name_file_and_line() {
        let error = parse_qrels(Path::new("x/qrels.tsv"), "query-id\tcorpus-id\tscore\nq1\td1\n").unwrap_err();
        assert_eq!(error.to_string(), "x/qrels.tsv:2: expected 3 tab-separated fields, found 2");
        let error = parse_qrels(Path::new("q.tsv"), "q1\td1\t1\n").unwrap_err();
        assert!(error.to_string().starts_with("q.tsv:1: expected the header"));
        let error = parse_qrels(Path::new("q.tsv"), "query-id\tcorpus-id\tscore\nq\td\tx\n").unwrap_err();
        assert!(error.to_string().starts_with("q.tsv:2: score \"x\""));
    }

    #[test]
    fn jsonl_errors_name_file_and_line() {
        let text = "{\"_id\": \"1\", \"text\": \"a\"}\n\n{\"_id\": 2}\n";
        let error = parse_jsonl::<EvalQuery>(Path::new("queries.jsonl"), text).unwrap_err();
        assert!(error.to_string().starts_with("queries.jsonl:3: "), "{error}");
    }

    #[test]
    fn tenant_defaults_to_eval() {
        let document: CorpusDocument = serde_json::from_str(r#"{"_id": "d", "title": "t", "text": "x"}"#).unwrap();
        assert_eq!(document.tenant(), DEFAULT_TENANT);
        let query: EvalQuery = serde_json::from_str(r#"{"_id": "q", "text": "x", "tenant": "acme"}"#).unwrap();
        assert_eq!(query.tenant(), "acme");
    }
}
