//! PDF: the text of each page in page order (lopdf: a pure-Rust parser that decodes content
//! streams and the standard font encodings, bounds stream decompression and object nesting),
//! one page span per page. Encrypted files are refused; a page whose content does not decode
//! is skipped, and a file where no page decodes is malformed.

use lopdf::{Document, LoadOptions};

use super::{ExtractError, ExtractLimits, ExtractResult, Extracted, TextBuilder};

fn malformed(reason: impl std::fmt::Display) -> ExtractError {
    let reason: String = reason.to_string().chars().take(200).collect();
    ExtractError::Malformed { format: "pdf", reason }
}

pub(super) fn extract(bytes: &[u8], limits: &ExtractLimits, mut builder: TextBuilder) -> ExtractResult<Extracted> {
    let options = LoadOptions { max_decompressed_size: Some(limits.max_unpacked_bytes), ..LoadOptions::default() };
    let document = match Document::load_mem_with_options(bytes, options) {
        Ok(document) => document,
        Err(lopdf::Error::Decryption(_)) => return Err(ExtractError::Encrypted),
        Err(error) => {
            let encrypted = bytes.windows(8).any(|window| window == b"/Encrypt");
            return Err(if encrypted { ExtractError::Encrypted } else { malformed(error) });
        }
    };
    if document.is_encrypted() || document.was_encrypted() {
        return Err(ExtractError::Encrypted);
    }
    let pages = document.get_pages();
    if pages.is_empty() {
        return Err(malformed("no pages"));
    }
    if pages.len() > limits.max_pages {
        return Err(ExtractError::TooLarge { what: "pdf", limit: format!("{} pages", limits.max_pages) });
    }
    let mut decoded = 0;
    for &number in pages.keys() {
        builder.start_page(number)?;
        let mut any = false;
        for fragment in document.extract_text_chunks_with_limit(&[number], limits.max_unpacked_bytes) {
            match fragment {
                Ok(text) => {
                    any = true;
                    builder.push_raw(&text)?;
                }
                Err(lopdf::Error::Decompress(_)) => {
                    return Err(ExtractError::TooLarge {
                        what: "a pdf content stream",
                        limit: format!("{} bytes decompressed", limits.max_unpacked_bytes),
                    });
                }
                Err(_) => {}
            }
        }
        decoded += usize::from(any);
    }
    if decoded == 0 {
        return Err(ExtractError::NoText);
    }
    builder.finish(pages.len())
}
