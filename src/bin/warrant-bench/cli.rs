//! The command line of `warrant-bench`: one subcommand per benchmark.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "warrant-bench", version, about = "warrant's benchmarks: each prints its figures (JSON)")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Filtered vector search at several selectivities: strategy, recall@10, latency percentiles.
    Filtered {
        /// Vectors in the index.
        #[arg(long, default_value_t = 50_000)]
        vectors: usize,
        /// Dimension.
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Queries per selectivity.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Print one JSON object per line (the only output form; kept for the documented command).
        #[arg(long)]
        json: bool,
        /// Also print the rows of hnsw_rs' own filtered walk, of the old best-first walk over
        /// hnsw_rs nodes with the scalar dot, and of the one-hop walk without its cache prefetch
        /// (`frozen_plain`), all measured side by side with the production walk (`frozen`) and
        /// the one-hop walk (`one_hop`, always printed) on the same queries.
        #[arg(long)]
        compare_walks: bool,
        /// Configuration file (index parameters).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Directory of the raw files `shared/peers/export_vectors.py --data-dir` writes: search
        /// those vectors and queries, filter by their buckets, score against their ground truth,
        /// beside pgvector's best figures (`--vectors` and `--queries` are then ignored).
        #[arg(long)]
        vectors_file: Option<PathBuf>,
        /// Fractions of the vectors allowed, one row each (synthetic data only: the peer's
        /// files carry ground truth for their own five).
        #[arg(long, value_delimiter = ',', default_value = "0.001,0.01,0.1,0.5,1.0")]
        selectivities: Vec<f64>,
        /// Hits asked of each search, and of the ground truth its recall is measured against
        /// (synthetic data only; the rows' `recall_at_10` is then recall at this k; the
        /// server's default `retrieval.vector_candidates` is 30).
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
    /// Durable writes (ACL changes with fsync, document batches) and restart from the data
    /// directory versus re-ingestion, side by side with an in-memory engine (hashed embedder).
    Durability {
        /// ACL changes timed.
        #[arg(long, default_value_t = 400)]
        acl_changes: usize,
        /// Document batches timed.
        #[arg(long, default_value_t = 20)]
        batches: usize,
        /// Documents per batch.
        #[arg(long, default_value_t = 50)]
        batch_documents: usize,
        /// Concurrent uploaders of 500-document batches while ACL changes are timed (0: skip).
        #[arg(long, default_value_t = 4)]
        uploaders: usize,
        /// Batches each uploader sends.
        #[arg(long, default_value_t = 2)]
        upload_batches: usize,
        #[command(flatten)]
        corpus: SyntheticCorpus,
    },
    /// Fills a data directory as a steadily ingesting server does (one-chunk documents, index
    /// sets as checkpoints write them), prints the write figures as JSON, then ends without
    /// closing anything, as `kill -9` would (`benches/recovery.sh` times the restart).
    RecoveryFill {
        /// The data directory (created; must not hold a store yet).
        #[arg(long)]
        dir: PathBuf,
        /// One-chunk documents to write.
        #[arg(long, default_value_t = 100_000)]
        chunks: usize,
        /// Tenants (one per batch, in turn).
        #[arg(long, default_value_t = 20)]
        tenants: usize,
        /// Words per document.
        #[arg(long, default_value_t = 60)]
        words: usize,
        /// Documents per batch.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Batches in flight.
        #[arg(long, default_value_t = 2)]
        in_flight: usize,
        /// A checkpoint (ACL checkpoint + index set, as the server's checkpointer writes them)
        /// after every this many chunks (0: none).
        #[arg(long, default_value_t = 0)]
        checkpoint_every: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Configuration file (shards, index, embedder.dim).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Snapshot create and restore versus re-ingestion on a synthetic corpus (hashed embedder).
    Snapshot {
        #[command(flatten)]
        corpus: SyntheticCorpus,
    },
    /// Embedding throughput (passages/s) and query latency (cache miss p50/p99, cache hit p50) of
    /// the selected embedder on seeded synthetic texts.
    Embed {
        /// Embedder (default: embedder.kind of the configuration).
        #[arg(long, value_parser = warrant::eval::local_embedder)]
        embedder: Option<warrant::config::EmbedderKind>,
        /// Passages per throughput round.
        #[arg(long, default_value_t = 64)]
        passages: usize,
        /// Throughput rounds (median reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Distinct queries timed.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Print JSON (default: also JSON; kept for the documented form).
        #[arg(long)]
        json: bool,
        /// Configuration file (embedder).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Extraction throughput per format (MB/s, pages/s) on generated documents of each format
    /// (PDF, DOCX, HTML, Markdown, text) holding the same seeded text; one JSON line per format.
    /// With `--corpus DIR`: on every file of a folder instead (format from the extension), one
    /// line per format and one per failed file; with `--file PATH`: one file, with peak memory.
    Extract {
        /// Pages (PDF) or sections (other formats) per document.
        #[arg(long, default_value_t = 200)]
        pages: usize,
        /// Words per page or section.
        #[arg(long, default_value_t = 400)]
        words: usize,
        /// Timed rounds per format (median reported).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Random seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Only this format: pdf, docx, html, markdown or text (one format's peak memory).
        #[arg(long)]
        format: Option<String>,
        /// Instead of timing, write the corpus into this folder (`copies` times, seeds apart)
        /// for `warrant ingest`.
        #[arg(long)]
        write: Option<PathBuf>,
        /// Copies of the corpus `--write` makes.
        #[arg(long, default_value_t = 1)]
        copies: usize,
        /// Time every file of this folder (`.pdf`, `.docx`, `.html`, `.md`, `.txt`, ...) instead
        /// of the generated corpus: one JSON line per format, one per file that failed (named
        /// with its reason) and one of the files skipped for their extension.
        #[arg(long, conflicts_with_all = ["write", "format", "file"])]
        corpus: Option<PathBuf>,
        /// Time this one file and print its peak resident set (`VmHWM`) before and after.
        #[arg(long, conflicts_with_all = ["write", "format"])]
        file: Option<PathBuf>,
        /// With `--file`: write the extracted text here (to compare with the source text).
        #[arg(long, requires = "file")]
        text_out: Option<PathBuf>,
    },
}

/// The synthetic corpus (and output and configuration flags) of `durability` and
/// `snapshot`.
#[derive(clap::Args)]
pub(crate) struct SyntheticCorpus {
    /// Documents in the synthetic corpus (about three chunks each).
    #[arg(long, default_value_t = 3000)]
    pub(crate) documents: usize,
    /// Words per document.
    #[arg(long, default_value_t = 300)]
    pub(crate) words: usize,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    pub(crate) seed: u64,
    /// Print JSON (the only output format; kept for the documented form).
    #[arg(long)]
    pub(crate) json: bool,
    /// Configuration file (shards, index, chunking, embedder.dim).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

impl SyntheticCorpus {
    /// The corpus as the benchmarks take it.
    pub(crate) fn bench_config(&self) -> warrant::bench::snapshot::SnapshotBenchConfig {
        warrant::bench::snapshot::SnapshotBenchConfig {
            documents: self.documents,
            words_per_document: self.words,
            seed: self.seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_embedder_flag_takes_local_embedders_only() {
        assert!(Cli::try_parse_from(["warrant-bench", "embed", "--embedder", "minilm"]).is_ok());
        assert!(Cli::try_parse_from(["warrant-bench", "embed", "--embedder", "openai"]).is_err());
    }

    #[test]
    fn the_corpus_flag_excludes_the_generated_corpus_flags() {
        assert!(Cli::try_parse_from(["warrant-bench", "extract", "--corpus", "/tmp/c"]).is_ok());
        assert!(Cli::try_parse_from(["warrant-bench", "extract", "--corpus", "/tmp/c", "--format", "pdf"]).is_err());
        assert!(Cli::try_parse_from(["warrant-bench", "extract", "--text-out", "/tmp/t"]).is_err());
    }
}
