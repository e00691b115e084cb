//! Extraction throughput per format (`warrant-bench extract`): a corpus of each format made from
//! one seeded public-domain-style text (generated words; nothing fetched), extracted repeatedly;
//! MB/s of input and, for PDF, pages/s, as medians of the rounds. Every round asserts the
//! extracted text holds every generated paragraph's first word count, so a broken path cannot
//! be timed.
//!
//! On real files (`warrant-bench extract --corpus DIR`, [`run_corpus`]): every file of a folder,
//! its format from its extension as `warrant ingest` picks it, extracted under the server's
//! default limits; one row per format, and every file that fails named with its reason (a
//! failure is counted, never dropped). [`run_file`] extracts one file, for its peak memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::extract::samples::{self, Block};
use crate::extract::{DOCX_TYPE, ExtractLimits, Extracted, Format, extract};

/// What to extract.
#[derive(Clone, Debug)]
pub struct ExtractBenchConfig {
    /// Pages (PDF) or sections (other formats) per document.
    pub pages: usize,
    /// Words per page or section.
    pub words_per_page: usize,
    /// Timed rounds per format (the median is reported).
    pub rounds: usize,
    /// Seed of the generated words.
    pub seed: u64,
    /// Only this format (`pdf`, `docx`, ...), e.g. to read one format's peak memory.
    pub format: Option<String>,
}

/// One format's figures.
#[derive(Debug, Serialize)]
pub struct ExtractRow {
    /// `pdf`, `docx`, `html`, `markdown`, `text`.
    pub format: &'static str,
    /// Input bytes per document.
    pub bytes: usize,
    /// Pages (PDF) or sections per document.
    pub pages: usize,
    /// Characters extracted.
    pub chars: usize,
    /// Median seconds per document.
    pub median_seconds: f64,
    /// Input megabytes (10^6 bytes) per second at the median.
    pub mb_per_second: f64,
    /// Pages (or sections) per second at the median.
    pub pages_per_second: f64,
}

const WORDS: &[&str] = &[
    "the",
    "policy",
    "travel",
    "hotel",
    "receipt",
    "employee",
    "manager",
    "approval",
    "within",
    "days",
    "expense",
    "report",
    "flight",
    "train",
    "meal",
    "allowance",
    "country",
    "rate",
    "night",
    "submit",
    "before",
    "after",
    "company",
    "card",
    "booking",
    "portal",
    "limit",
    "exception",
    "director",
    "finance",
];

fn paragraph(random: &mut SmallRng, words: usize) -> String {
    let mut text = String::new();
    for index in 0..words {
        if index > 0 {
            text.push(if index % 14 == 0 { '.' } else { ' ' });
            if index % 14 == 0 {
                text.push(' ');
            }
        }
        text.push_str(WORDS[random.gen_range(0..WORDS.len())]);
    }
    text.push('.');
    text
}

/// The corpus: per format, (content type, bytes, pages or sections).
pub fn corpus(config: &ExtractBenchConfig) -> Vec<(&'static str, String, Vec<u8>, usize)> {
    let mut random = SmallRng::seed_from_u64(config.seed);
    let pages: Vec<String> = (0..config.pages).map(|_| paragraph(&mut random, config.words_per_page)).collect();
    // A PDF line holds about 12 words.
    let pdf_pages: Vec<Vec<String>> = pages
        .iter()
        .map(|page| {
            let words: Vec<&str> = page.split(' ').collect();
            words.chunks(12).map(|line| line.join(" ")).collect()
        })
        .collect();
    let pdf = samples::pdf(&pdf_pages);
    let mut blocks = Vec::new();
    let mut html = String::from("<html><head><script>var tracking = 1;</script></head><body><nav>Home</nav><main>");
    let mut markdown = String::new();
    let mut text = String::new();
    for (index, page) in pages.iter().enumerate() {
        let heading = format!("Section {index}");
        blocks.push(Block::Heading(1, heading.clone()));
        blocks.push(Block::Paragraph(page.clone()));
        html.push_str(&format!("<h1>{heading}</h1><p>{page}</p>"));
        markdown.push_str(&format!("# {heading}\n\n{page}\n\n"));
        text.push_str(&format!("{heading}\n\n{page}\n\n"));
    }
    html.push_str("</main></body></html>");
    vec![
        ("pdf", "application/pdf".to_owned(), pdf, config.pages),
        ("docx", DOCX_TYPE.to_owned(), samples::docx(&blocks), config.pages),
        ("html", "text/html".to_owned(), html.into_bytes(), config.pages),
        ("markdown", "text/markdown".to_owned(), markdown.into_bytes(), config.pages),
        ("text", "text/plain".to_owned(), text.into_bytes(), config.pages),
    ]
}

/// Writes the corpus into `directory` as `document.pdf`, `document.docx`, ... (what `warrant
/// ingest` reads), `copies` times each (`copy-N/`); returns the files written.
pub fn write_corpus(config: &ExtractBenchConfig, directory: &std::path::Path, copies: usize) -> std::io::Result<usize> {
    let extension = |format: &str| {
        match format {
            "markdown" => "md",
            "text" => "txt",
            other => other,
        }
        .to_owned()
    };
    let mut written = 0;
    for copy in 0..copies.max(1) {
        let folder = directory.join(format!("copy-{copy}"));
        std::fs::create_dir_all(&folder)?;
        for (format, _, bytes, _) in corpus(&ExtractBenchConfig { seed: config.seed + copy as u64, ..config.clone() }) {
            std::fs::write(folder.join(format!("document.{}", extension(format))), bytes)?;
            written += 1;
        }
    }
    Ok(written)
}

/// Extracts each format's document `rounds` times; one row per format.
pub fn run(config: &ExtractBenchConfig) -> Result<Vec<ExtractRow>, String> {
    let limits = ExtractLimits { time_limit: std::time::Duration::from_secs(600), ..ExtractLimits::default() };
    let mut rows = Vec::new();
    for (format, content_type, bytes, pages) in corpus(config) {
        if config.format.as_deref().is_some_and(|only| only != format) {
            continue;
        }
        let mut seconds = Vec::with_capacity(config.rounds);
        let mut chars = 0;
        for _ in 0..config.rounds.max(1) {
            let started = Instant::now();
            let extracted = extract(&bytes, &content_type, &limits).map_err(|error| format!("{format}: {error}"))?;
            seconds.push(started.elapsed().as_secs_f64());
            chars = extracted.text.chars().count();
            // Every page's or section's text came out (a broken path is never timed).
            let expected_words = config.pages * config.words_per_page;
            let words = extracted.text.split_whitespace().count();
            if words < expected_words {
                return Err(format!("{format}: {words} words extracted of {expected_words}"));
            }
        }
        seconds.sort_by(f64::total_cmp);
        let median = seconds[seconds.len() / 2];
        rows.push(ExtractRow {
            format,
            bytes: bytes.len(),
            pages,
            chars,
            median_seconds: median,
            mb_per_second: bytes.len() as f64 / 1e6 / median,
            pages_per_second: pages as f64 / median,
        });
    }
    Ok(rows)
}

/// One format's figures over the files of a folder ([`run_corpus`]).
#[derive(Debug, Serialize)]
pub struct CorpusRow {
    /// `pdf`, `docx`, `html`, `markdown`, `text`.
    pub format: &'static str,
    /// Files of this format extracted without error (the figures are theirs).
    pub files: usize,
    /// Files of this format that failed (named in the failure lines).
    pub failed: usize,
    /// Input bytes of the files extracted.
    pub bytes: u64,
    /// Pages of the PDFs (the layout map's page spans counted; pages without text have none),
    /// or sections of the other formats (the layout map's heading spans).
    pub pages: usize,
    /// Pages the PDFs declare (their page tree; 0 for other formats).
    pub declared_pages: usize,
    /// Characters extracted.
    pub chars: usize,
    /// Median over the rounds of the seconds extracting all these files took.
    pub median_seconds: f64,
    /// Input megabytes (10^6 bytes) per second at the median.
    pub mb_per_second: f64,
    /// Pages (PDF: declared pages; others: sections) per second at the median.
    pub pages_per_second: f64,
}

/// A file that did not extract.
#[derive(Debug, Serialize)]
pub struct CorpusFailure {
    /// Its path.
    pub file: PathBuf,
    /// The format its extension names.
    pub format: &'static str,
    /// Its size.
    pub bytes: u64,
    /// The error code and message.
    pub reason: String,
}

/// [`run_corpus`]'s result: rows per format, failures, and files with no known extension.
#[derive(Debug, Serialize)]
pub struct CorpusReport {
    /// One row per format found.
    pub rows: Vec<CorpusRow>,
    /// Every failed file.
    pub failures: Vec<CorpusFailure>,
    /// Files whose extension names no format (not extracted, as `warrant ingest` skips them).
    pub skipped: Vec<PathBuf>,
}

/// Every file under `directory`, sorted (links followed, hidden entries included).
fn walk(directory: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if std::fs::metadata(&path)?.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The limits the server applies by default, with no wall-clock limit of its own beyond a
/// generous one (a file past the server's 30 s still counts: its time is the figure).
fn bench_limits() -> ExtractLimits {
    ExtractLimits { time_limit: std::time::Duration::from_secs(600), ..ExtractLimits::default() }
}

/// The format of `path` by its extension, as `warrant ingest` picks it.
fn format_of(path: &Path) -> Option<Format> {
    Format::from_extension(&path.file_name()?.to_string_lossy())
}

/// Pages (PDF) or sections (other formats) of an extraction, from its layout map.
fn units(extracted: &Extracted, format: Format) -> usize {
    if format == Format::Pdf { extracted.layout.pages.len() } else { extracted.layout.sections.len() }
}

/// Extracts every file of `directory` `rounds` times (the server's default limits except the
/// time limit); one row per format, timed over its files that extract, medians of the rounds.
pub fn run_corpus(directory: &Path, rounds: usize) -> std::io::Result<CorpusReport> {
    let limits = bench_limits();
    // Per format name: the format and its files (path, bytes).
    type Files = Vec<(PathBuf, Vec<u8>)>;
    let mut by_format: BTreeMap<&'static str, (Format, Files)> = BTreeMap::new();
    let mut skipped = Vec::new();
    for path in walk(directory)? {
        match format_of(&path) {
            Some(format) => {
                let bytes = std::fs::read(&path)?;
                by_format.entry(format.name()).or_insert_with(|| (format, Vec::new())).1.push((path, bytes));
            }
            None => skipped.push(path),
        }
    }
    let mut report = CorpusReport { rows: Vec::new(), failures: Vec::new(), skipped };
    for (name, (format, files)) in by_format {
        let mut row = CorpusRow {
            format: name,
            files: 0,
            failed: 0,
            bytes: 0,
            pages: 0,
            declared_pages: 0,
            chars: 0,
            median_seconds: 0.0,
            mb_per_second: 0.0,
            pages_per_second: 0.0,
        };
        // The first round sorts the files into those that extract and those that fail.
        let mut good = Vec::new();
        for (path, bytes) in &files {
            match extract(bytes, format.content_type(), &limits) {
                Ok(extracted) => {
                    row.files += 1;
                    row.bytes += bytes.len() as u64;
                    row.pages += units(&extracted, format);
                    row.declared_pages += extracted.page_count;
                    row.chars += extracted.text.chars().count();
                    good.push(bytes);
                }
                Err(error) => {
                    row.failed += 1;
                    report.failures.push(CorpusFailure {
                        file: path.clone(),
                        format: name,
                        bytes: bytes.len() as u64,
                        reason: format!("{}: {error}", error.code()),
                    });
                }
            }
        }
        let mut seconds = Vec::with_capacity(rounds.max(1));
        for _ in 0..rounds.max(1) {
            let started = Instant::now();
            for bytes in &good {
                // The same bytes extracted a moment ago: a failure now is a defect, not noise.
                let extracted = extract(bytes, format.content_type(), &limits)
                    .map_err(|error| std::io::Error::other(format!("{name}: {error} on a second extraction")))?;
                std::hint::black_box(extracted);
            }
            seconds.push(started.elapsed().as_secs_f64());
        }
        seconds.sort_by(f64::total_cmp);
        row.median_seconds = seconds[seconds.len() / 2];
        let counted = if format == Format::Pdf { row.declared_pages } else { row.pages };
        if row.median_seconds > 0.0 {
            row.mb_per_second = row.bytes as f64 / 1e6 / row.median_seconds;
            row.pages_per_second = counted as f64 / row.median_seconds;
        }
        report.rows.push(row);
    }
    Ok(report)
}

/// One file's extraction ([`run_file`]): its figures and the process's peak memory.
#[derive(Debug, Serialize)]
pub struct FileReport {
    /// The file.
    pub file: PathBuf,
    /// Its format.
    pub format: &'static str,
    /// Its size.
    pub bytes: u64,
    /// Pages (PDF) or sections from the layout map.
    pub pages: usize,
    /// Pages the PDF declares (0 for other formats).
    pub declared_pages: usize,
    /// Characters extracted.
    pub chars: usize,
    /// Median seconds of the rounds.
    pub median_seconds: f64,
    /// Peak resident set (`VmHWM`) before the file was read, bytes.
    pub peak_rss_before_bytes: Option<u64>,
    /// Peak resident set after the extractions, bytes.
    pub peak_rss_bytes: Option<u64>,
}

/// The process's peak resident set so far (`VmHWM` of `/proc/self/status`), in bytes.
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kilobytes: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kilobytes * 1024)
}

/// Extracts one file `rounds` times; `text_out` receives its extracted text (a quality check
/// against the text it was made from). A failure is an error naming the file and the reason.
pub fn run_file(path: &Path, rounds: usize, text_out: Option<&Path>) -> Result<FileReport, String> {
    let before = peak_resident_bytes();
    let format = format_of(path).ok_or_else(|| format!("{}: no known extension", path.display()))?;
    let bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let limits = bench_limits();
    let mut seconds = Vec::with_capacity(rounds.max(1));
    let mut last = None;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let extracted = extract(&bytes, format.content_type(), &limits)
            .map_err(|error| format!("{}: {}: {error}", path.display(), error.code()))?;
        seconds.push(started.elapsed().as_secs_f64());
        last = Some(extracted);
    }
    let extracted = last.unwrap_or_default();
    if let Some(out) = text_out {
        std::fs::write(out, &extracted.text).map_err(|error| format!("{}: {error}", out.display()))?;
    }
    seconds.sort_by(f64::total_cmp);
    Ok(FileReport {
        file: path.to_path_buf(),
        format: format.name(),
        bytes: bytes.len() as u64,
        pages: units(&extracted, format),
        declared_pages: extracted.page_count,
        chars: extracted.text.chars().count(),
        median_seconds: seconds[seconds.len() / 2],
        peak_rss_before_bytes: before,
        peak_rss_bytes: peak_resident_bytes(),
    })
}
