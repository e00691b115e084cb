//! The walk of one page's content operators: the text it draws, as [`Fragment`]s placed on the
//! page (PDF 32000-1, 9.4: text space through the text matrix and the current transformation
//! matrix to the page's user space).
//!
//! A fragment is text drawn in one run along a baseline: a show operator continues the open
//! fragment when it starts on the same baseline (within [`BASELINE`] of an em, so a superscript
//! stays on its line) and at most [`SPLIT`] ems after its end; otherwise it starts a new one.
//! Inside a fragment a `TJ` offset wider than a tenth of an em is a word gap, a string drawn
//! with letter spacing of at least [`LETTER_SPACED`] of its font size (how ghostscript justifies
//! a line: "o o" drawn as "oo" spaced apart) gets a space between its characters, and a move
//! along the line is a word gap when it leaves more than [`GAP`] of an em after the text drawn
//! so far (glyph widths from the font's `/Widths` or a standard font's metrics, half an em a
//! character where neither is known): producers move inside words too (kerning, drop caps). Typographic ligatures
//! (U+FB00-FB06, "ﬁ" for "fi") come out as their letters.
//!
//! Invariants: the graphics state stack holds at most [`MAX_SAVED_STATES`] entries whatever the
//! count of `q` (deeper saves are counted, not stored); every coordinate kept is a finite
//! number; the text kept is counted against the caller's character budget as it grows.

use lopdf::{Encoding, Object};

use super::super::{ExtractError, ExtractResult};

/// A `TJ` offset below this (thousandths of an em; negative moves right) is a word gap.
const WORD_GAP: f32 = -100.0;

/// Letter spacing (`Tc`) of at least this fraction of the font size spaces a string's
/// characters as words.
const LETTER_SPACED: f32 = 0.15;

/// A move along the line leaving at least this fraction of the font size free is a word gap.
const GAP: f32 = 0.15;

/// A show this many ems or more after the open fragment's end starts a new fragment (a table
/// cell, the other column of a page drawn row by row: gutters of 0.9 em are common).
pub(super) const SPLIT: f32 = 0.6;

/// A show whose baseline lies within this fraction of the font size of the open fragment's
/// continues it (a superscript, a subscript, a rise).
pub(super) const BASELINE: f32 = 0.35;

/// Graphics states kept on the stack (PDF 32000-1 suggests 28 levels of nesting).
const MAX_SAVED_STATES: usize = 64;

/// A font's encoding and its one-byte glyph widths (`/FirstChar`, `/Widths` in thousandths of
/// an em; `None` for two-byte Type0 fonts and fonts without widths).
pub(super) type Font<'a> = (Encoding<'a>, Option<(u32, Vec<f32>)>);

/// An affine matrix `[a b c d e f]`, points as row vectors: `[x y 1] × M`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Matrix([f32; 6]);

impl Matrix {
    const IDENTITY: Matrix = Matrix([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]);

    fn of(operands: &[Object]) -> Matrix {
        let mut values = [0.0; 6];
        for (value, operand) in values.iter_mut().zip(operands) {
            *value = number(Some(operand));
        }
        Matrix(values)
    }

    fn translation(x: f32, y: f32) -> Matrix {
        Matrix([1.0, 0.0, 0.0, 1.0, x, y])
    }

    /// `self × other`: `self` applied first.
    fn then(self, other: Matrix) -> Matrix {
        let [a, b, c, d, e, f] = self.0;
        let [a2, b2, c2, d2, e2, f2] = other.0;
        Matrix([
            a * a2 + b * c2,
            a * b2 + b * d2,
            c * a2 + d * c2,
            c * b2 + d * d2,
            e * a2 + f * c2 + e2,
            e * b2 + f * d2 + f2,
        ])
    }

    fn apply(self, x: f32, y: f32) -> (f32, f32) {
        let [a, b, c, d, e, f] = self.0;
        (x * a + y * c + e, x * b + y * d + f)
    }
}

/// `value`, or 0 when it is not a finite number.
fn finite(value: f32) -> f32 {
    if value.is_finite() { value } else { 0.0 }
}

fn number(operand: Option<&Object>) -> f32 {
    finite(operand.and_then(|object| object.as_float().ok()).unwrap_or(0.0))
}

/// Text drawn in one run along a baseline, in the page's user space turned so the text runs
/// along x (`direction` quarter turns counterclockwise undone): `text[start..end]` of the
/// page's text, from `x0` to `x1` on the baseline `y`, in `size`-point type of font `font`
/// (`None` when the run changes font).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Fragment {
    pub start: usize,
    pub end: usize,
    pub x0: f32,
    pub x1: f32,
    pub y: f32,
    pub size: f32,
    pub font: Option<usize>,
    pub direction: u8,
}

/// The fragments of one page and the text they index.
#[derive(Debug, Default)]
pub(super) struct PageFragments {
    pub text: String,
    pub fragments: Vec<Fragment>,
}

/// The state a page's operators move through: the graphics state's matrix and its saved
/// copies, the text matrices, the text state (font, size, spacing, scaling, leading, rise) and
/// the fragments so far.
pub(super) struct Walk<'a> {
    /// The page's fonts by resource name, sorted by name (the index is the font's id).
    fonts: &'a [(Vec<u8>, Font<'a>)],
    ctm: Matrix,
    saved: Vec<Matrix>,
    /// `q` past [`MAX_SAVED_STATES`] not yet matched by `Q`.
    unsaved: usize,
    text_matrix: Matrix,
    line_matrix: Matrix,
    font: Option<usize>,
    font_size: f32,
    letter_spacing: f32,
    word_spacing: f32,
    scaling: f32,
    leading: f32,
    /// A line move (`T*`, `'`, `"`) was made: the next show starts a fragment.
    new_line: bool,
    /// Characters the page may still add.
    budget: usize,
    /// The text limit, for the error that names it.
    max_chars: usize,
    page: PageFragments,
}

/// The letters of a typographic ligature (NFKC of U+FB00-FB06); any other character as it is.
fn ligature_letters(character: char) -> String {
    match character {
        '\u{FB00}' => "ff".into(),
        '\u{FB01}' => "fi".into(),
        '\u{FB02}' => "fl".into(),
        '\u{FB03}' => "ffi".into(),
        '\u{FB04}' => "ffl".into(),
        '\u{FB05}' | '\u{FB06}' => "st".into(),
        other => other.into(),
    }
}

/// The quarter turn nearest to the direction `(dx, dy)` (0: left to right).
fn direction(dx: f32, dy: f32) -> u8 {
    if dx.abs() >= dy.abs() {
        if dx >= 0.0 { 0 } else { 2 }
    } else if dy > 0.0 {
        1
    } else {
        3
    }
}

/// A point of user space turned so text of `direction` runs along x.
fn turn(direction: u8, (x, y): (f32, f32)) -> (f32, f32) {
    match direction {
        1 => (y, -x),
        2 => (-x, -y),
        3 => (-y, x),
        _ => (x, y),
    }
}

impl<'a> Walk<'a> {
    /// A walk over a page with `fonts` (sorted by name) that may add `budget` characters of the
    /// document's `max_chars`.
    pub(super) fn new(fonts: &'a [(Vec<u8>, Font<'a>)], budget: usize, max_chars: usize) -> Self {
        Self {
            fonts,
            ctm: Matrix::IDENTITY,
            saved: Vec::new(),
            unsaved: 0,
            text_matrix: Matrix::IDENTITY,
            line_matrix: Matrix::IDENTITY,
            font: None,
            font_size: 0.0,
            letter_spacing: 0.0,
            word_spacing: 0.0,
            scaling: 1.0,
            leading: 0.0,
            new_line: false,
            budget,
            max_chars,
            page: PageFragments::default(),
        }
    }

    /// The fragments walked.
    pub(super) fn finish(self) -> PageFragments {
        self.page
    }

    /// Applies one operator; an error only when the page's text passes the budget.
    pub(super) fn apply(&mut self, operator: &str, operands: &[Object]) -> ExtractResult<()> {
        match operator {
            "q" => {
                if self.saved.len() < MAX_SAVED_STATES {
                    self.saved.push(self.ctm);
                } else {
                    self.unsaved += 1;
                }
            }
            "Q" => {
                if self.unsaved > 0 {
                    self.unsaved -= 1;
                } else if let Some(matrix) = self.saved.pop() {
                    self.ctm = matrix;
                }
            }
            "cm" => self.ctm = Matrix::of(operands).then(self.ctm),
            "BT" => (self.text_matrix, self.line_matrix) = (Matrix::IDENTITY, Matrix::IDENTITY),
            "Tf" => {
                self.font = operands
                    .first()
                    .and_then(|name| name.as_name().ok())
                    .and_then(|name| self.fonts.binary_search_by(|(key, _)| key.as_slice().cmp(name)).ok());
                self.font_size = number(operands.get(1)).abs();
            }
            "Tc" => self.letter_spacing = number(operands.first()),
            "Tw" => self.word_spacing = number(operands.first()),
            "Tz" => self.scaling = number(operands.first()) / 100.0,
            "TL" => self.leading = number(operands.first()),
            "Td" => self.move_line(number(operands.first()), number(operands.get(1))),
            "TD" => {
                self.leading = -number(operands.get(1));
                self.move_line(number(operands.first()), number(operands.get(1)));
            }
            "Tm" => {
                self.line_matrix = Matrix::of(operands);
                self.text_matrix = self.line_matrix;
            }
            "T*" => self.next_line(),
            "Tj" => self.show(operands.first())?,
            "TJ" => {
                for element in operands.first().and_then(|array| array.as_array().ok()).into_iter().flatten() {
                    if let Object::String(..) = element {
                        self.show(Some(element))?;
                        continue;
                    }
                    let offset = number(Some(element));
                    self.advance(-offset / 1000.0 * self.font_size * self.scaling);
                    if offset < WORD_GAP {
                        self.space();
                    }
                }
            }
            "'" => {
                self.next_line();
                self.show(operands.first())?;
            }
            "\"" => {
                self.word_spacing = number(operands.first());
                self.letter_spacing = number(operands.get(1));
                self.next_line();
                self.show(operands.get(2))?;
            }
            _ => {}
        }
        Ok(())
    }

    fn move_line(&mut self, x: f32, y: f32) {
        self.line_matrix = Matrix::translation(x, y).then(self.line_matrix);
        self.text_matrix = self.line_matrix;
    }

    fn next_line(&mut self) {
        self.move_line(0.0, -self.leading);
        self.new_line = true;
    }

    /// Moves the text matrix `distance` text space units along the line.
    fn advance(&mut self, distance: f32) {
        self.text_matrix = Matrix::translation(finite(distance), 0.0).then(self.text_matrix);
    }

    /// A space at the end of the open fragment (none at its start or after whitespace).
    fn space(&mut self) {
        let Some(open) = self.page.fragments.last() else { return };
        if self.new_line || open.start == self.page.text.len() || self.page.text.ends_with(char::is_whitespace) {
            return;
        }
        self.push(" ");
    }

    fn push(&mut self, text: &str) {
        self.page.text.push_str(text);
        if let Some(open) = self.page.fragments.last_mut() {
            open.end = self.page.text.len();
        }
    }

    /// Draws a string operand: its characters continue the open fragment or start one, and the
    /// text matrix advances past them (nothing when the font's encoding is unknown or the bytes
    /// do not decode).
    fn show(&mut self, operand: Option<&Object>) -> ExtractResult<()> {
        let (Some(font_id), Some(Object::String(bytes, _))) = (self.font, operand) else {
            return Ok(());
        };
        let Some((_, (encoding, widths))) = self.fonts.get(font_id) else {
            return Ok(());
        };
        let Ok(mut decoded) = encoding.bytes_to_string(bytes) else {
            return Ok(());
        };
        if decoded.contains(|character| ('\u{FB00}'..='\u{FB06}').contains(&character)) {
            decoded = decoded.chars().map(ligature_letters).collect();
        }
        let decoded_chars = decoded.chars().count();
        let advance = match widths {
            Some((first, widths)) => bytes
                .iter()
                .map(|&code| {
                    let width = u32::from(code).checked_sub(*first).and_then(|index| widths.get(index as usize));
                    let word = if code == b' ' { self.word_spacing } else { 0.0 };
                    width.copied().unwrap_or(500.0) / 1000.0 * self.font_size + self.letter_spacing + word
                })
                .sum::<f32>(),
            None => decoded_chars as f32 * (0.5 * self.font_size + self.letter_spacing),
        } * self.scaling;
        let rendering = self.text_matrix.then(self.ctm);
        let [a, b, c, d, ..] = rendering.0;
        let turned = direction(a, b);
        let (x0, y) = turn(turned, rendering.apply(0.0, 0.0));
        let (x1, _) = turn(turned, rendering.apply(finite(advance), 0.0));
        let size = finite(self.font_size * (c * c + d * d).sqrt());
        let (x0, x1, y) = (finite(x0), finite(x1), finite(y));
        self.advance(advance);
        if decoded.is_empty() {
            return Ok(());
        }
        let open = self.page.fragments.last().copied().filter(|open| {
            let em = size.max(open.size);
            !self.new_line
                && open.direction == turned
                && (y - open.y).abs() <= BASELINE * em
                && x0 - open.x1 >= -0.5 * em
                && x0 - open.x1 < SPLIT * em
        });
        if let Some(open) = open {
            if x0 - open.x1 > GAP * size.max(open.size) {
                self.space();
            }
            if let Some(last) = self.page.fragments.last_mut() {
                last.x1 = open.x1.max(x1);
                if open.font != Some(font_id) {
                    last.font = None;
                }
            }
        } else {
            let start = self.page.text.len();
            self.page.fragments.push(Fragment {
                start,
                end: start,
                x0,
                x1,
                y,
                size,
                font: Some(font_id),
                direction: turned,
            });
        }
        self.new_line = false;
        let before = self.page.text.len();
        if self.font_size > 0.0 && self.letter_spacing >= LETTER_SPACED * self.font_size {
            for (index, character) in decoded.chars().enumerate() {
                if index > 0 && !character.is_whitespace() {
                    self.space();
                }
                self.push(character.encode_utf8(&mut [0; 4]));
            }
        } else {
            self.push(&decoded);
        }
        let added = if self.page.text.len() - before == decoded.len() {
            decoded_chars
        } else {
            self.page.text[before..].chars().count()
        };
        self.budget = self.budget.checked_sub(added).ok_or_else(|| ExtractError::TooLarge {
            what: "extracted text",
            limit: format!("{} characters", self.max_chars),
        })?;
        Ok(())
    }
}
