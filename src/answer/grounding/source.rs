//! A source of the final context as the server keeps it, built once when the context is
//! grounded and read by every stage after: the prompt (its model text), the generator's schema
//! (its quote choices), validation (quotes located in it, the evidence the verifier reads, the
//! anchoring of answers) and the repair prompt (the sentences it offers).
//!
//! A source holds its label, its chunk, the text shown (the chunk's text, or the prefix the prompt
//! budget left), that text normalized as the model read it (`super::normalize`, with the map back
//! to the shown text), the model text (normalized, then neutralized: `super::normalize`) with the
//! offset of every normalized character in it, and, built on first use, the evidence the verifier
//! reads (the normalized text with instruction-like sentences masked: `crate::answer::text::instructions`) and
//! the quote choices (`super::quote::quote_choices` of the model text).
//!
//! Invariant: every view is derived from the shown text when the source is made and never
//! changes, so a quote located, a span verified and a sentence offered all refer to the text the
//! model was shown, whichever stage reads them.

use std::sync::{Arc, OnceLock};

use crate::domain::Chunk;

use super::normalize::{Normalized, neutralize_normalized, normalize};
use super::quote::{LocatedQuote, locate_in_model_text, quote_choices};
use crate::answer::providers::generator::SourceForModel;
use crate::answer::text::instructions::mask_instructions;

/// One labeled source of the final context; see the module docs.
#[derive(Debug)]
pub struct Source {
    label: String,
    chunk: Arc<Chunk>,
    shown: String,
    view: Normalized,
    model_text: String,
    /// Byte offset in `model_text` where each normalized character's output begins, then the end.
    model_offsets: Vec<usize>,
    evidence: OnceLock<String>,
    choices: OnceLock<Vec<String>>,
}

impl Source {
    /// The source labeled `label` showing `shown` (the chunk's text or a prefix of it).
    pub fn new(label: impl Into<String>, chunk: Arc<Chunk>, shown: impl Into<String>) -> Self {
        let shown = shown.into();
        let view = normalize(&shown);
        let mut model_offsets = Vec::new();
        let model_text = neutralize_normalized(&view.text, Some(&mut model_offsets));
        Self {
            label: label.into(),
            chunk,
            shown,
            view,
            model_text,
            model_offsets,
            evidence: OnceLock::new(),
            choices: OnceLock::new(),
        }
    }

    /// `S1`, `S2`, …
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The chunk (full provenance).
    pub fn chunk(&self) -> &Arc<Chunk> {
        &self.chunk
    }

    /// The exact text shown, before normalization: citation offsets and quotes refer to it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The shown text normalized as the model read it, with the map back to the shown text.
    pub fn view(&self) -> &Normalized {
        &self.view
    }

    /// What the model reads of the source (normalized, then neutralized).
    pub fn model_text(&self) -> &str {
        &self.model_text
    }

    /// Byte offset in the model text where each normalized character's output begins, then the
    /// end of the model text.
    pub fn model_offsets(&self) -> &[usize] {
        &self.model_offsets
    }

    /// The source as a generator receives it.
    pub fn for_model(&self) -> SourceForModel {
        SourceForModel { label: self.label.clone(), text: self.model_text.clone() }
    }

    /// What the support verifier reads: the normalized text with instruction-like sentences
    /// blanked (character offsets kept), so they never count as support.
    pub fn evidence(&self) -> &str {
        self.evidence.get_or_init(|| mask_instructions(&self.view.text).into_owned())
    }

    /// The verbatim pieces of the model text a generator may quote, in order.
    pub fn choices(&self) -> &[String] {
        self.choices.get_or_init(|| quote_choices(&self.model_text))
    }

    /// Locates a generator's `quote` in this source (`None` when it does not occur).
    pub fn locate(&self, quote: &str) -> Option<LocatedQuote> {
        locate_in_model_text(&self.shown, &self.view, &self.model_text, &self.model_offsets, quote)
    }
}
