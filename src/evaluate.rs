//! What a user runs on labeled data: dataset ingestion (`warrant ingest`) and the retrieval,
//! answer and verifier evaluations (`warrant eval …`); and on the review queue's verdicts:
//! `warrant eval reviews` and `warrant review export-fixtures`. The benchmarks are another binary
//! (`warrant-bench`, src/bin/warrant-bench).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use warrant::config::Settings;

use crate::cli::{EvalCommand, JudgeArgs, ReviewCommand, ReviewSource};

/// `warrant ingest`: a labeled dataset into an in-memory engine, with a summary.
pub(crate) async fn ingest(
    dataset: PathBuf,
    embedder: Option<warrant::config::EmbedderKind>,
    cache_dir: Option<PathBuf>,
    json: bool,
    config: Option<PathBuf>,
) -> Result<()> {
    let settings = warrant::eval::settings_with_embedder(config.as_deref(), embedder)?;
    let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;

    let mut embedder = warrant::providers::embedder(&settings).await?;
    let mut cache = None;
    if let Some(dir) = cache_dir {
        let cached = Arc::new(warrant::eval::cache::CachingEmbedder::open(embedder, &dir, &dataset.corpus_sha256()?));
        embedder = Arc::clone(&cached) as Arc<dyn warrant::embed::Embedder>;
        cache = Some(cached);
    }
    let params = warrant::embedded::EngineParams::from_settings(&settings, embedder.dimension());
    let engine = warrant::embedded::Engine::start(params, embedder)?;
    let progress = BarProgress::new("ingest");
    let batch = warrant::eval::retrieval::INGEST_BATCH;
    let summary = warrant::eval::dataset::ingest(&engine, &dataset, batch, &progress).await?;
    if let Some(cache) = cache {
        cache.save().with_context(|| format!("writing {}", cache.path().display()))?;
    }
    if json {
        let mut value = serde_json::to_value(&summary)?;
        value["passages_per_s"] = summary.passages_per_second().into();
        value["embedder"] = engine.embedder().name().into();
        value["dataset"] = dataset.name.clone().into();
        println!("{value}");
    } else {
        println!("{}: {summary} with {}", dataset.name, engine.embedder().name());
    }
    anyhow::Ok(())
}

/// `warrant eval …`.
pub(crate) async fn eval(command: EvalCommand) -> Result<()> {
    match command {
        EvalCommand::Retrieval {
            dataset,
            queries,
            embedder,
            limit_queries,
            cache_dir,
            no_cache,
            backend,
            per_query,
            json,
            config,
        } => {
            let mut settings = warrant::eval::settings_with_embedder(config.as_deref(), embedder)?;
            match backend.as_deref() {
                Some("postgres") => settings.storage.backend = warrant::config::StorageBackend::Postgres,
                Some(_) => settings.storage.backend = warrant::config::StorageBackend::Embedded,
                None => {}
            }
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, queries.as_deref())?;
            let options =
                warrant::eval::retrieval::RunOptions { limit_queries, cache_dir: (!no_cache).then_some(cache_dir) };
            (async move {
                let progress = BarProgress::new("ingest");
                let (summary, report) = warrant::eval::retrieval::run(&settings, &dataset, &options, &progress).await?;
                eprintln!("{}: {summary}", dataset.name);
                if let Some(path) = &per_query {
                    write_per_query(path, &report.per_query)?;
                }
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_report(&report);
                }
                if report.cross_tenant_hits > 0 {
                    bail!("{} retrieved chunks crossed tenants", report.cross_tenant_hits);
                }
                anyhow::Ok(())
            })
            .await
        }
        EvalCommand::Reviews { source, json } => {
            let (_, items, since_ms) = reviewed(&source).await?;
            let items: Vec<_> = items.into_iter().map(|(_, stored)| stored).collect();
            let report = warrant::eval::reviews::report(&items, since_ms);
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print_reviews_report(&report);
            }
            Ok(())
        }
        EvalCommand::Answers {
            dataset,
            n,
            seed,
            offset,
            embedder,
            per_query,
            cache_dir,
            no_cache,
            json,
            config,
            judge,
        } => {
            let settings = warrant::eval::settings_with_embedder(config.as_deref(), embedder)?;
            let judge_verifier = claim_judge(&judge)?;
            let answers_path = dataset.join("answers.jsonl");
            let dataset = warrant::eval::dataset::Dataset::load(&dataset, None)?;
            let gold = if answers_path.is_file() {
                warrant::eval::answers::read_gold(&answers_path)?
            } else {
                Default::default()
            };
            let options = warrant::eval::answers::AnswersOptions {
                gold,
                offset,
                checkpoint: per_query,
                cache_dir: (!no_cache).then_some(cache_dir),
                judge: judge_verifier.clone(),
                ..warrant::eval::answers::AnswersOptions::new(n, seed)
            };
            (async move {
                let progress = BarProgress::new("ingest");
                let (summary, mut report) =
                    warrant::eval::answers::run(&settings, &dataset, &options, &progress).await?;
                eprintln!("{}: {summary}", dataset.name);
                if let Some(judge_verifier) = &judge_verifier
                    && judge.judge_agreement_rows > 0
                {
                    let agreement = warrant::eval::judge::judge_agreement(
                        &judge.judge_agreement_data,
                        judge.judge_agreement_rows,
                        AGREEMENT_SEED,
                        judge_verifier.as_ref(),
                    )
                    .await
                    .map_err(anyhow::Error::msg)?;
                    report.judge_agreement = Some(agreement);
                }
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print_answers_report(&report);
                }
                if report.unanchored_quotes > 0 {
                    bail!("{} returned quotes lie outside their chunk", report.unanchored_quotes);
                }
                anyhow::Ok(())
            })
            .await
        }
        EvalCommand::Verifier { data, sweep, quoted, config, sample, seed, exclude_seed } => {
            use warrant::eval::verifier::Evidence;
            let evidence = if quoted { Evidence::Quoted } else { Evidence::Abstract };
            let settings = Settings::load(config.as_deref())?;
            (async {
                let embedder = warrant::providers::verifier_embedder(&settings).await?;
                if sweep {
                    return print_verifier_sweep(&data, embedder, evidence).await;
                }
                let verifier = warrant::providers::verifier(&settings, embedder)?;
                let mut rows = warrant::eval::verifier::read_rows(&data).map_err(anyhow::Error::msg)?;
                if let Some(sample) = sample {
                    if let Some(excluded) = exclude_seed {
                        warrant::eval::verifier::exclude_sample(&mut rows, sample, excluded);
                    }
                    warrant::eval::verifier::sample_rows(&mut rows, sample, seed);
                }
                let report = warrant::eval::verifier::evaluate_rows(&rows, verifier.as_ref(), evidence).await;
                let summary = serde_json::json!({
                    "verifier": verifier.name(),
                    "rows": rows.len(),
                    "min_coverage": settings.verifier.min_coverage,
                    "min_similarity": settings.verifier.min_similarity,
                    "precision": report.precision(),
                    "recall": report.recall(),
                    "f1": report.f1(),
                    "quoted": quoted,
                    "intervals": report.intervals(),
                    "report": report,
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
                anyhow::Ok(())
            })
            .await
        }
    }
}

/// Seed of the sample of labeled claims a judge's agreement is measured on.
const AGREEMENT_SEED: u64 = 13;

/// The model judge of `eval answers --judge` (the model alone, no lexical stage), if asked for.
fn claim_judge(args: &JudgeArgs) -> Result<Option<Arc<dyn warrant::answer::providers::verifier::SupportVerifier>>> {
    let (true, Some(url), Some(model)) = (args.judge, &args.judge_url, &args.judge_model) else {
        return Ok(None);
    };
    let settings = warrant::config::JudgeSettings {
        base_url: url.clone(),
        model: model.clone(),
        api_key_env: args.judge_key_env.clone().unwrap_or_default(),
        timeout_ms: args.judge_timeout_ms,
        ..warrant::config::JudgeSettings::default()
    };
    // The lexical stage is never used by a model-only judge; its thresholds do not matter.
    let lexical = warrant::answer::providers::lexical_verifier::LexicalSupportVerifier::new(1.0, 1.0, None);
    let judge = warrant::answer::providers::judge_verifier::JudgeSupportVerifier::from_settings(lexical, &settings)
        .map_err(anyhow::Error::msg)?
        .model_only();
    Ok(Some(Arc::new(judge)))
}

/// The settings and the reviewed items `source` names (its backend's review store, read
/// offline), with the `--since` cutoff in ms.
async fn reviewed(source: &ReviewSource) -> Result<(Settings, Vec<(String, warrant::review::StoredItem)>, u64)> {
    let mut settings = Settings::load(source.config.as_deref())?;
    match source.backend.as_deref() {
        Some("postgres") => settings.storage.backend = warrant::config::StorageBackend::Postgres,
        Some(_) => settings.storage.backend = warrant::config::StorageBackend::Embedded,
        None => {}
    }
    let since_ms = match &source.since {
        Some(since) => {
            warrant::eval::reviews::parse_since(since, warrant::review::now_ms()).map_err(anyhow::Error::msg)?
        }
        None => 0,
    };
    let store: Arc<dyn warrant::review::ReviewStore> = match settings.storage.backend {
        warrant::config::StorageBackend::Embedded => {
            if settings.storage.dir.is_empty() {
                bail!("storage.dir is empty: the review queue of such a server lives in its memory only");
            }
            let directory = PathBuf::from(&settings.storage.dir);
            let opened = tokio::task::spawn_blocking(move || {
                warrant::review::embedded::EmbeddedReviews::open_to_read(&directory)
            })
            .await??;
            Arc::new(opened)
        }
        warrant::config::StorageBackend::Postgres => {
            let params = warrant::postgres::PostgresParams::from_settings(&settings)?;
            let embedder = warrant::providers::embedder(&settings).await?;
            warrant::postgres::PostgresBackend::connect(params, embedder).await?
                as Arc<dyn warrant::review::ReviewStore>
        }
    };
    let items = warrant::review::reviewed_items(store.as_ref(), source.tenant.as_deref(), since_ms).await?;
    Ok((settings, items, since_ms))
}

/// `warrant review …`.
pub(crate) async fn review(command: ReviewCommand) -> Result<()> {
    match command {
        ReviewCommand::ExportFixtures { to, source } => {
            let (settings, items, _) = reviewed(&source).await?;
            let items: Vec<_> = items.into_iter().map(|(_, stored)| stored).collect();
            let exported = warrant::review::export::write_fixtures(&items, &settings, &to)
                .with_context(|| format!("writing fixtures to {}", to.display()))?;
            println!(
                "{}",
                serde_json::json!({"directory": to, "written": exported.written.len(), "skipped": exported.skipped})
            );
            Ok(())
        }
    }
}

fn print_reviews_report(report: &warrant::eval::reviews::ReviewsReport) {
    println!("{} reviewed items, {} verdicts (answered since {} ms)", report.items, report.verdicts, report.since_ms);
    let share = |name: &str, share: Option<&warrant::eval::reviews::Share>| match share {
        Some(share) => println!(
            "{name:<40} {:.3} [{:.3}, {:.3}] of {}",
            share.rate.mean, share.rate.low, share.rate.high, share.judged
        ),
        None => println!("{name:<40} -"),
    };
    share("human-judged groundedness", report.groundedness.as_ref());
    share("citation precision (not wrong_citation)", report.citation_precision.as_ref());
    println!("{:<40} {:?}", "labels of returned claims", report.returned_labels);
    println!("{:<40} {:?}", "labels of withheld claims", report.withheld_labels);
    for (reason, correct) in &report.abstention_correctness {
        share(&format!("correct abstentions: {reason}"), Some(correct));
    }
    if let Some(server) = &report.server_checks {
        println!(
            "{:<40} precision {:.3} [{:.3}, {:.3}] recall {:.3} [{:.3}, {:.3}] over {} claims",
            "server checks against the verdicts",
            server.precision.mean,
            server.precision.low,
            server.precision.high,
            server.recall.mean,
            server.recall.low,
            server.recall.high,
            server.claims
        );
    }
    for (name, kappa) in [("claims", &report.claim_agreement), ("abstentions", &report.abstention_agreement)] {
        if let Some(kappa) = kappa {
            println!(
                "{:<40} kappa {:.3} [{:.3}, {:.3}], observed {:.3}, {} pairs",
                format!("two reviewers on {name}"),
                kappa.kappa.mean,
                kappa.kappa.low,
                kappa.kappa.high,
                kappa.observed,
                kappa.pairs
            );
        }
    }
}

/// `warrant eval verifier --sweep`: precision, recall and F1 over the threshold grid.
async fn print_verifier_sweep(
    data: &Path,
    embedder: Option<Arc<dyn warrant::embed::Embedder>>,
    evidence: warrant::eval::verifier::Evidence,
) -> Result<()> {
    let coverages: Vec<f64> = (10..=20).map(|step| f64::from(step) * 0.05).collect();
    let similarities: Vec<f64> = (0..=5).map(|step| f64::from(step) * 0.1).collect();
    let name = embedder.as_ref().map_or("lexical".to_owned(), |embedder| format!("lexical+{}", embedder.name()));
    let points = warrant::eval::verifier::sweep(data, &coverages, &similarities, embedder, evidence)
        .await
        .map_err(anyhow::Error::msg)?;
    println!("{name}: min_cov min_sim polarity | precision recall f1 | passed SUPPORT/CONTRADICT/NEI");
    for point in points {
        println!("{point}");
    }
    Ok(())
}

/// Writes one JSON object per query (temporary file renamed over `path`).
fn write_per_query<T: serde::Serialize>(path: &Path, scores: &[T]) -> Result<()> {
    let mut lines = String::new();
    for score in scores {
        lines.push_str(&serde_json::to_string(score)?);
        lines.push('\n');
    }
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, lines).with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn print_report(report: &warrant::eval::retrieval::RetrievalReport) {
    println!("{} with {} on {}: {} queries", report.dataset, report.embedder, report.backend, report.queries);
    println!("{:<8} {:>8} {:>17} {:>8} {:>9} {:>8}", "", "nDCG@10", "95% CI", "R@10", "R@100", "MRR@10");
    let confidence = report.confidence;
    for (name, metrics, interval) in [
        ("lexical", report.lexical, confidence.lexical),
        ("vector", report.vector, confidence.vector),
        ("hybrid", report.hybrid, confidence.hybrid),
    ] {
        println!(
            "{name:<8} {:>8.4} [{:.4}, {:.4}] {:>8.4} {:>9.4} {:>8.4}",
            metrics.ndcg_at_10,
            interval.low,
            interval.high,
            metrics.recall_at_10,
            metrics.recall_at_100,
            metrics.mrr_at_10
        );
    }
    for (name, interval) in [("lexical", confidence.hybrid_minus_lexical), ("vector", confidence.hybrid_minus_vector)] {
        println!(
            "hybrid - {name}: {:+.4} [{:+.4}, {:+.4}] (paired, 95% bootstrap)",
            interval.mean, interval.low, interval.high
        );
    }
    println!("cross_tenant_hits {}", report.cross_tenant_hits);
}

fn print_answers_report(report: &warrant::eval::answers::AnswersReport) {
    println!(
        "{} with generator {} and embedder {}: {} questions (seed {}, offset {})",
        report.dataset, report.generator, report.embedder, report.questions, report.seed, report.offset
    );
    let interval = |name: &str, value: &warrant::eval::stats::Interval| {
        println!("{name:<32} {:.3} [{:.3}, {:.3}]", value.mean, value.low, value.high);
    };
    interval("answer rate", &report.answer_rate);
    println!("{:<32} {:?}", "abstentions", report.abstentions);
    println!("{:<32} {}", "partial answers", report.partial_answers);
    println!("{:<32} {:.3} ({} citations)", "citation precision (micro)", report.citation_precision, report.citations);
    interval("citation precision per answer", &report.citation_precision_per_answer);
    interval("answers citing a relevant doc", &report.answers_citing_relevant);
    if let Some(correct) = &report.correct_of_answered {
        interval("correct of answered", correct);
    }
    if let Some(correct) = &report.correct_of_questions {
        interval("correct of questions", correct);
    }
    if let Some(held) = &report.context_holds_gold {
        interval("context holds a gold answer", held);
    }
    if let Some(answered) = &report.answer_rate_given_gold_in_context {
        interval("  of those: answered", answered);
    }
    if let Some(correct) = &report.correct_given_gold_in_context {
        interval("  of those: answered correctly", correct);
    }
    if let (Some(judge), Some(grounded)) = (&report.judge, &report.judge_labelled_groundedness) {
        interval(&format!("judge-labelled groundedness ({judge})"), grounded);
        println!("{:<32} {}", "  claims judged", report.judged_claims.unwrap_or_default());
        if let Some(agreement) = &report.judge_agreement {
            println!(
                "  the judge on {} SciFact claims: precision {:.3} [{:.3}, {:.3}] recall {:.3} [{:.3}, {:.3}]",
                agreement.rows,
                agreement.precision.mean,
                agreement.precision.low,
                agreement.precision.high,
                agreement.recall.mean,
                agreement.recall.low,
                agreement.recall.high
            );
        }
    }
    println!("{:<32} {}", "quotes outside their chunk", report.unanchored_quotes);
    println!("{:<32} {}", "claims anchored by the server", report.claims_anchored);
    println!("{:<32} {:?}", "citations rejected", report.citations_rejected);
    for (stage, latency) in &report.latency_ms {
        println!("latency {stage:<24} p50 {:>9.1} ms  p95 {:>9.1} ms", latency.p50, latency.p95);
    }
}

/// Ingestion progress on stderr.
struct BarProgress(indicatif::ProgressBar);

impl BarProgress {
    fn new(label: &'static str) -> Self {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} docs ({per_sec}, eta {eta})",
            )
            .expect("valid template"),
        );
        bar.set_prefix(label);
        Self(bar)
    }
}

impl warrant::eval::dataset::Progress for BarProgress {
    fn start(&self, total: usize) {
        self.0.set_length(total as u64);
    }

    fn advance(&self, documents: usize) {
        self.0.inc(documents as u64);
    }

    fn finish(&self) {
        self.0.finish();
    }
}
