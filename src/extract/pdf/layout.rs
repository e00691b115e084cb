//! A page's fragments as a reader reads them: in column order, gathered into lines, and the
//! lines into paragraphs.
//!
//! - Columns: a page whose fragments leave a vertical gutter in the middle of the text (at most
//!   a tenth of them, and two at least, cross it: a title, a footer), with at least three
//!   prose fragments (twelve characters on average) on each side beside each other, reads down
//!   the left column, then down the right, zone by zone between the fragments that cross the
//!   gutter. A table's short cells make no columns, so its rows stay rows.
//! - Lines: fragments in reading order on one baseline ([`BASELINE`] of an em), each starting
//!   after the last one's end, are one line, a space apart (one word per text object is one
//!   line); fragments [`CELL`] ems apart or more make the line a table row, its cells joined by
//!   ` | ` as the other formats write a row.
//! - Paragraphs: a line continues the paragraph above unless the vertical gap grows past the
//!   page's usual leading, the font or its size changes, the line is a list item or a table row,
//!   the line above ended short of its column's right edge by more than this line's first word
//!   (it would have fit there: the break was meant), the line is indented after a line that
//!   ended a sentence, or the text jumps up (a new column) without continuing a sentence.

use super::walk::{BASELINE, Fragment, PageFragments};
use crate::extract::prose;

/// Fragments this many ems apart on one line make it a table row.
const CELL: f32 = 2.0;

/// What joins the cells of a table row: what the DOCX, HTML and Markdown extractors write
/// between cells, so a row reads as one (the extractive answer scores a row with its header).
const CELL_SEPARATOR: &str = " | ";

/// Buckets of the histogram of horizontal coverage that finds a gutter.
const BUCKETS: usize = 256;

/// A line of a page: its text and where it lies (see [`Fragment`] for the coordinates).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Line {
    pub text: String,
    /// Characters of `text`.
    pub chars: usize,
    pub x0: f32,
    pub x1: f32,
    pub y: f32,
    pub size: f32,
    pub font: Option<usize>,
    pub direction: u8,
    /// Made of fragments far apart: a table row, never joined with another line.
    pub cells: bool,
}

/// The fragments' indexes in reading order: column by column when the page shows two
/// columns, otherwise as drawn.
fn reading_order(page: &PageFragments) -> Vec<usize> {
    let fragments = &page.fragments;
    let drawn: Vec<usize> = (0..fragments.len()).collect();
    let Some(gutter) = gutter(page) else {
        return drawn;
    };
    let side = |fragment: &Fragment| {
        if fragment.direction != 0 {
            None
        } else if fragment.x1 <= gutter {
            Some(false)
        } else if fragment.x0 >= gutter {
            Some(true)
        } else {
            None
        }
    };
    let mut order = Vec::with_capacity(fragments.len());
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for (index, fragment) in fragments.iter().enumerate() {
        match side(fragment) {
            Some(false) => left.push(index),
            Some(true) => right.push(index),
            None => {
                order.append(&mut left);
                order.append(&mut right);
                order.push(index);
            }
        }
    }
    order.append(&mut left);
    order.append(&mut right);
    order
}

/// The x of the gutter between two columns, when the page has two.
fn gutter(page: &PageFragments) -> Option<f32> {
    let fragments: Vec<&Fragment> = page
        .fragments
        .iter()
        .filter(|fragment| fragment.direction == 0 && !page.text[fragment.start..fragment.end].trim().is_empty())
        .collect();
    if fragments.len() < 8 {
        return None;
    }
    let left_edge = fragments.iter().map(|fragment| fragment.x0).fold(f32::INFINITY, f32::min);
    let right_edge = fragments.iter().map(|fragment| fragment.x1).fold(f32::NEG_INFINITY, f32::max);
    let width = right_edge - left_edge;
    if !(width > 0.0 && width.is_finite()) {
        return None;
    }
    let bucket = |x: f32| (((x - left_edge) / width * BUCKETS as f32) as usize).min(BUCKETS);
    let mut changes = vec![0i64; BUCKETS + 1];
    for fragment in &fragments {
        let (first, last) = (bucket(fragment.x0), bucket(fragment.x1));
        if first < last {
            changes[first] += 1;
            changes[last] -= 1;
        }
    }
    let mut coverage = Vec::with_capacity(BUCKETS);
    let mut running = 0i64;
    for change in &changes[..BUCKETS] {
        running += change;
        coverage.push(running);
    }
    let middle = BUCKETS / 4..BUCKETS * 3 / 4;
    let least = coverage[middle.clone()].iter().copied().min()?;
    // The longest run of least-covered buckets in the middle; the gutter is its centre.
    let (mut best, mut run_start) = ((0, 0), None);
    for index in middle.clone().chain([middle.end]) {
        let low = index < middle.end && coverage[index] == least;
        match (low, run_start) {
            (true, None) => run_start = Some(index),
            (false, Some(start)) => {
                if index - start > best.1 - best.0 {
                    best = (start, index);
                }
                run_start = None;
            }
            _ => {}
        }
    }
    let gutter = left_edge + (best.0 + best.1) as f32 / 2.0 / BUCKETS as f32 * width;
    let crossing = fragments.iter().filter(|fragment| fragment.x0 < gutter && gutter < fragment.x1).count();
    if crossing > (fragments.len() / 10).max(2) {
        return None;
    }
    let chars = |fragment: &&&Fragment| page.text[fragment.start..fragment.end].trim().chars().count();
    let left: Vec<&&Fragment> = fragments.iter().filter(|fragment| fragment.x1 <= gutter).collect();
    let right: Vec<&&Fragment> = fragments.iter().filter(|fragment| fragment.x0 >= gutter).collect();
    let prose = |side: &[&&Fragment]| side.len() >= 3 && side.iter().map(chars).sum::<usize>() >= 12 * side.len();
    if !prose(&left) || !prose(&right) {
        return None;
    }
    let span = |side: &[&&Fragment]| {
        let low = side.iter().map(|fragment| fragment.y).fold(f32::INFINITY, f32::min);
        let high = side.iter().map(|fragment| fragment.y).fold(f32::NEG_INFINITY, f32::max);
        (low, high)
    };
    let ((left_low, left_high), (right_low, right_high)) = (span(&left), span(&right));
    let overlap = left_high.min(right_high) - left_low.max(right_low);
    let shorter = (left_high - left_low).min(right_high - right_low);
    (shorter > 0.0 && overlap >= 0.5 * shorter).then_some(gutter)
}

/// The page's lines in reading order (lines of whitespace only dropped).
pub(super) fn lines(page: &PageFragments) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for index in reading_order(page) {
        let fragment = page.fragments[index];
        let text = page.text[fragment.start..fragment.end].trim();
        if text.is_empty() {
            continue;
        }
        if let Some(line) = lines.last_mut() {
            let em = line.size.max(fragment.size);
            let gap = fragment.x0 - line.x1;
            if line.direction == fragment.direction && (fragment.y - line.y).abs() <= BASELINE * em && gap >= -0.5 * em
            {
                let cell = gap >= CELL * em;
                let separator = if cell { CELL_SEPARATOR } else { " " };
                line.text.push_str(separator);
                line.text.push_str(text);
                line.chars += separator.len() + text.chars().count();
                line.x1 = line.x1.max(fragment.x1);
                line.size = line.size.max(fragment.size);
                line.cells |= cell;
                if line.font != fragment.font {
                    line.font = None;
                }
                continue;
            }
        }
        lines.push(Line {
            text: text.to_owned(),
            chars: text.chars().count(),
            x0: fragment.x0,
            x1: fragment.x1,
            y: fragment.y,
            size: fragment.size,
            font: fragment.font,
            direction: fragment.direction,
            cells: false,
        });
    }
    lines
}

/// The usual distance between the baselines of consecutive lines (the median of those between
/// half an em and three ems), if any.
fn leading(lines: &[Line]) -> Option<f32> {
    let mut gaps: Vec<f32> = lines
        .windows(2)
        .filter(|pair| pair[0].direction == pair[1].direction)
        .map(|pair| (pair[0].y - pair[1].y, pair[0].size.max(pair[1].size)))
        .filter(|&(gap, em)| gap > 0.5 * em && gap < 3.0 * em)
        .map(|(gap, _)| gap)
        .collect();
    if gaps.is_empty() {
        return None;
    }
    gaps.sort_by(f32::total_cmp);
    Some(gaps[gaps.len() / 2])
}

/// Whether the line `next` starts a new paragraph after `previous` (`right` is the right edge
/// of the lines they are among, `left` the current paragraph's left edge).
fn breaks(previous: &Line, next: &Line, leading: Option<f32>, right: f32, left: f32) -> bool {
    let em = previous.size.max(next.size);
    if previous.direction != next.direction || previous.cells || next.cells {
        return true;
    }
    if next.y > previous.y + BASELINE * em {
        return !prose::continues(&previous.text, &next.text);
    }
    let gap = previous.y - next.y;
    let usual = leading.unwrap_or(1.2 * em);
    if gap > 1.4 * usual + 0.1 * em || gap < 0.5 * em {
        return true;
    }
    if (previous.size - next.size).abs() > 0.12 * em {
        return true;
    }
    if let (Some(before), Some(after)) = (previous.font, next.font)
        && before != after
    {
        return true;
    }
    if prose::starts_item(&next.text) {
        return true;
    }
    // The first word of `next` (and a space) would have fit after `previous`.
    let chars = next.chars.max(1) as f32;
    let per_char = (next.x1 - next.x0).max(0.0) / chars;
    let first_word = next.text.split_whitespace().next().map_or(0, |word| word.chars().count()) as f32;
    let free = right - previous.x1;
    if free > 0.5 * em && free > (first_word + 1.0) * per_char {
        return true;
    }
    // Indented after a line that ended a sentence: a first-line indent.
    let ended = !prose::continues(&previous.text, "x");
    next.x0 > left + 0.8 * em && ended
}

/// The paragraphs of `lines` (in reading order), each one line of text.
pub(super) fn paragraphs(lines: &[Line]) -> Vec<String> {
    let leading = leading(lines);
    // The right edge of each run of lines in one size that goes down the page (a column, a
    // zone; a title in a larger size, over both columns, is a run of its own).
    let mut rights = vec![f32::NEG_INFINITY; lines.len()];
    let mut start = 0;
    for index in 0..=lines.len() {
        let jumps = index == lines.len()
            || (index > start && {
                let (previous, line) = (&lines[index - 1], &lines[index]);
                let em = previous.size.max(line.size).max(1.0);
                line.y > previous.y + BASELINE * em || (previous.size - line.size).abs() > 0.12 * em
            });
        if jumps {
            let right = lines[start..index].iter().map(|line| line.x1).fold(f32::NEG_INFINITY, f32::max);
            rights[start..index].fill(right);
            start = index;
        }
    }
    // Where each paragraph starts, then each joined into a string of its size.
    let mut starts = Vec::new();
    let mut left = f32::INFINITY;
    for (index, line) in lines.iter().enumerate() {
        if index == 0 || breaks(&lines[index - 1], line, leading, rights[index - 1], left) {
            starts.push(index);
            left = f32::INFINITY;
        }
        left = left.min(line.x0);
    }
    starts.push(lines.len());
    starts
        .windows(2)
        .map(|range| {
            let lines = &lines[range[0]..range[1]];
            let mut paragraph = String::with_capacity(lines.iter().map(|line| line.text.len() + 1).sum());
            for line in lines {
                prose::join_line(&mut paragraph, &line.text);
            }
            paragraph
        })
        .filter(|paragraph| !paragraph.is_empty())
        .collect()
}
