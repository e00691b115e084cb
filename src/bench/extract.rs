//! Extraction throughput per format (`warrant-bench extract`): a corpus of each format made from
//! one seeded public-domain-style text (generated words; nothing fetched), extracted repeatedly;
//! MB/s of input and, for PDF, pages/s, as medians of the rounds. Every round asserts the
//! extracted text holds every generated paragraph's first word count, so a broken path cannot
//! be timed.

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::extract::samples::{self, Block};
use crate::extract::{DOCX_TYPE, ExtractLimits, extract};

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
