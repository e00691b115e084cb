//! Extraction: the bytes of an uploaded file (PDF, DOCX, HTML, Markdown, plain text) become the
//! document text the chunker cuts, plus its [`Layout`] (page ranges, the heading path of every
//! range). Pure functions over bytes; [`extract_off_thread`] runs them on the blocking pool
//! under a time limit.
//!
//! Invariants:
//! - the format comes from the bytes, not from the declared type alone: a PDF starts with
//!   `%PDF-`, a DOCX is a zip holding `word/document.xml`, the text formats are valid UTF-8; a
//!   declared type the bytes contradict is refused ([`ExtractError::TypeMismatch`]);
//! - every cost is bounded by the input or a limit ([`ExtractLimits`]): decompression stops at
//!   `max_unpacked_bytes`, the text at `max_text_chars`, the work at the deadline; no parser
//!   here recurses on the input's nesting (HTML is tokenized, not built into a tree; DOCX and
//!   Markdown are read as event streams; lopdf bounds its own object nesting);
//! - the layout map satisfies [`Layout::check`] against the text returned;
//! - a failure is a typed error naming the reason, never a panic (a panic inside a parser crate
//!   is caught and reported as [`ExtractError::Malformed`]).

mod builder;
mod docx;
mod html;
mod markdown;
mod pdf;
mod prose;
pub mod samples;

use std::time::{Duration, Instant};

use crate::domain::Layout;

pub(crate) use builder::TextBuilder;

/// Errors of extraction. Messages are lowercase and never quote the document's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// The declared content type is not one this server extracts.
    #[error("content type {content_type} is not supported (pdf, docx, html, markdown, plain text)")]
    UnsupportedType {
        /// The declared type, as given (at most 100 characters).
        content_type: String,
    },
    /// The bytes are of another format than the declared type.
    #[error("declared {declared} but the content is {detected}")]
    TypeMismatch {
        /// The declared type.
        declared: String,
        /// What the bytes are.
        detected: String,
    },
    /// A text format's bytes are not UTF-8.
    #[error("content is not valid utf-8 (first invalid byte at offset {offset})")]
    InvalidUtf8 {
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// The PDF is encrypted.
    #[error("pdf is encrypted; upload it without a password")]
    Encrypted,
    /// The file cannot be parsed as its format (truncated, corrupted).
    #[error("{format} is malformed: {reason}")]
    Malformed {
        /// `pdf`, `docx`, ...
        format: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A size limit was reached (a zip bomb, an oversized text).
    #[error("{what} exceeds the limit of {limit}")]
    TooLarge {
        /// What grew too large.
        what: &'static str,
        /// The limit, with its unit.
        limit: String,
    },
    /// The file holds no text (an image-only PDF, an empty page).
    #[error("no extractable text")]
    NoText,
    /// Extraction ran past its time limit.
    #[error("extraction took longer than {milliseconds} ms")]
    TimedOut {
        /// The limit.
        milliseconds: u64,
    },
    /// No extraction slot came free within the file's time limit: the server is extracting as
    /// many files as it allows (or finishing ones that ran past their limit). Not the file's
    /// fault: retry later.
    #[error("the server is extracting as many files as it allows; retry later")]
    Busy,
}

impl ExtractError {
    /// Transport-neutral code (every failure but [`ExtractError::Busy`] is the client's file).
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsupportedType { .. } => "unsupported_content_type",
            Self::TypeMismatch { .. } => "content_type_mismatch",
            Self::InvalidUtf8 { .. } => "invalid_utf8",
            Self::Encrypted => "encrypted_document",
            Self::Malformed { .. } => "malformed_document",
            Self::TooLarge { .. } => "document_too_large",
            Self::NoText => "no_text",
            Self::TimedOut { .. } => "extraction_timeout",
            Self::Busy => "overloaded",
        }
    }
}

/// Result alias of this layer.
pub type ExtractResult<T> = Result<T, ExtractError>;

/// The formats extracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `application/pdf`.
    Pdf,
    /// `application/vnd.openxmlformats-officedocument.wordprocessingml.document`.
    Docx,
    /// `text/html`, `application/xhtml+xml`.
    Html,
    /// `text/markdown`, `text/x-markdown`.
    Markdown,
    /// `text/plain`.
    Text,
}

/// The DOCX media type.
pub const DOCX_TYPE: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

impl Format {
    /// The format a declared media type names (parameters other than a UTF-8 `charset`
    /// ignored; the match is case-insensitive).
    pub fn from_content_type(content_type: &str) -> ExtractResult<Self> {
        let unsupported = || ExtractError::UnsupportedType { content_type: content_type.chars().take(100).collect() };
        let mut parts = content_type.split(';');
        let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        for parameter in parts {
            let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            let value = value.trim().trim_matches('"').to_ascii_lowercase();
            if name.trim().eq_ignore_ascii_case("charset") && !matches!(value.as_str(), "utf-8" | "utf8" | "us-ascii") {
                return Err(unsupported());
            }
        }
        match essence.as_str() {
            "application/pdf" => Ok(Self::Pdf),
            DOCX_TYPE => Ok(Self::Docx),
            "text/html" | "application/xhtml+xml" => Ok(Self::Html),
            "text/markdown" | "text/x-markdown" => Ok(Self::Markdown),
            "text/plain" => Ok(Self::Text),
            _ => Err(unsupported()),
        }
    }

    /// Short name (`pdf`, `docx`, `html`, `markdown`, `text`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Pdf => "pdf",
            Self::Docx => "docx",
            Self::Html => "html",
            Self::Markdown => "markdown",
            Self::Text => "text",
        }
    }

    /// The format a file name's extension suggests (`warrant ingest`, the console).
    pub fn from_extension(name: &str) -> Option<Self> {
        let extension = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match extension.as_str() {
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            "html" | "htm" | "xhtml" => Some(Self::Html),
            "md" | "markdown" => Some(Self::Markdown),
            "txt" | "text" => Some(Self::Text),
            _ => None,
        }
    }

    /// The media type uploads declare for this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Pdf => "application/pdf",
            Self::Docx => DOCX_TYPE,
            Self::Html => "text/html",
            Self::Markdown => "text/markdown",
            Self::Text => "text/plain",
        }
    }
}

/// Bounds on one file's extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Most characters of extracted text (the batch limit on a document's text).
    pub max_text_chars: usize,
    /// Most bytes any compressed part may decompress to (a DOCX's XML, a PDF stream).
    pub max_unpacked_bytes: usize,
    /// Most pages of a PDF.
    pub max_pages: usize,
    /// Most content-stream operators of one PDF page (a page of 60 MiB of `q` holds 31
    /// million; a dense text page a few thousand).
    pub max_operators_per_page: usize,
    /// Wall-clock limit of one file's extraction.
    pub time_limit: Duration,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        Self {
            max_text_chars: crate::retrieval::MAX_TEXT_CHARS,
            max_unpacked_bytes: 64 * 1024 * 1024,
            max_pages: 5_000,
            max_operators_per_page: 4_000_000,
            time_limit: Duration::from_secs(30),
        }
    }
}

/// What a file became: its text and layout map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The text (chunk offsets index into it).
    pub text: String,
    /// Pages and heading paths of its ranges.
    pub layout: Layout,
    /// Pages of a PDF (0 for other formats), for throughput figures.
    pub page_count: usize,
    /// The title the file gives itself, outside its text (a Markdown file's front matter), for
    /// an upload that names none.
    pub title: Option<String>,
}

/// What the bytes look like, whatever was declared.
fn sniff(bytes: &[u8]) -> &'static str {
    let head = &bytes[..bytes.len().min(1024)];
    if head.windows(5).any(|window| window == b"%PDF-") {
        "a pdf"
    } else if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        "a zip archive"
    } else {
        "text"
    }
}

/// Strict UTF-8 with an optional byte-order mark.
pub(crate) fn utf8(bytes: &[u8]) -> ExtractResult<&str> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|error| ExtractError::InvalidUtf8 { offset: error.valid_up_to() })
}

/// Extracts `bytes` declared as `content_type`, within `limits` (the time limit is checked
/// cooperatively here; [`extract_off_thread`] also stops waiting at it).
pub fn extract(bytes: &[u8], content_type: &str, limits: &ExtractLimits) -> ExtractResult<Extracted> {
    let format = Format::from_content_type(content_type)?;
    let detected = sniff(bytes);
    let agrees = match format {
        Format::Pdf => detected == "a pdf",
        Format::Docx => detected == "a zip archive",
        Format::Html | Format::Markdown | Format::Text => detected == "text",
    };
    if !agrees {
        return Err(ExtractError::TypeMismatch {
            declared: format.content_type().to_owned(),
            detected: detected.to_owned(),
        });
    }
    let deadline = Instant::now() + limits.time_limit;
    let builder = TextBuilder::new(limits.max_text_chars, deadline, limits.time_limit);
    let extracted = match format {
        Format::Pdf => pdf::extract(bytes, limits, builder)?,
        Format::Docx => docx::extract(bytes, limits, builder)?,
        Format::Html => html::extract(utf8(bytes)?, builder)?,
        Format::Markdown => markdown::extract(utf8(bytes)?, builder)?,
        Format::Text => {
            let mut builder = builder;
            builder.push_raw(&prose::unwrap_plain(utf8(bytes)?))?;
            builder.finish(0)?
        }
    };
    debug_assert!(extracted.layout.check(extracted.text.chars().count()).is_ok());
    Ok(extracted)
}

/// The extractions a process runs at once. Each holds its slot from its start to its real end:
/// a file past its time limit is answered at once, but its blocking thread cannot be stopped, so
/// it keeps the slot until the parser returns. Runaway files therefore cannot pile up threads
/// and memory (a PDF costs up to ~30 times its size while lopdf holds it) beyond the slots.
#[derive(Clone, Debug)]
pub struct ExtractionSlots(std::sync::Arc<tokio::sync::Semaphore>);

impl ExtractionSlots {
    /// `count` slots (at least one).
    pub fn new(count: usize) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(count.max(1))))
    }

    /// `server.max_concurrent_extractions`, or the machine's parallelism when it is 0.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self::new(match settings.server.max_concurrent_extractions {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            count => count,
        })
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// [`extract`] on the blocking pool (never on an async thread) in one of `slots`: waits at most
/// the time limit for a slot ([`ExtractError::Busy`]), then at most the time limit for the
/// extraction ([`ExtractError::TimedOut`]); a panic inside a parser is reported as a malformed
/// file.
pub async fn extract_off_thread(
    bytes: bytes::Bytes,
    content_type: String,
    limits: ExtractLimits,
    slots: &ExtractionSlots,
) -> ExtractResult<Extracted> {
    let milliseconds = limits.time_limit.as_millis() as u64;
    let format = Format::from_content_type(&content_type)?.name();
    let slot = match tokio::time::timeout(limits.time_limit, std::sync::Arc::clone(&slots.0).acquire_owned()).await {
        Ok(Ok(slot)) => slot,
        Ok(Err(_)) | Err(_) => return Err(ExtractError::Busy),
    };
    let work = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        extract(&bytes, &content_type, &limits)
    });
    match tokio::time::timeout(limits.time_limit, work).await {
        Err(_) => Err(ExtractError::TimedOut { milliseconds }),
        Ok(Ok(result)) => result,
        Ok(Err(_panicked)) => Err(ExtractError::Malformed { format, reason: "the parser failed on this file".into() }),
    }
}
