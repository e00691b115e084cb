//! Glyph widths of the standard fonts a PDF may use without embedding or declaring them
//! (PDF 32000-1, 9.6.2.2: Helvetica, Times, Courier and their styles; reportlab writes its text
//! in them with no `/Widths`). Without widths a run's end is a guess (half an em a character),
//! and a guess long by a tenth ran a column's lines into the next column's (issue 60). The
//! tables are Adobe's font metrics (AFM) for codes 32-126, which WinAnsi and the standard
//! encoding share but for codes 39 and 96; other codes keep the guess.

/// Helvetica: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const HELVETICA: [u16; 95] = [
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556, 556, 556, 556, 556,
    556, 556, 556, 278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667, 611, 778, 722, 278, 500, 667, 556, 833,
    722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278, 278, 278, 469, 556, 333, 556, 556, 500, 556,
    556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556, 556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334,
    260, 334, 584,
];

/// Helvetica-Bold: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const HELVETICA_BOLD: [u16; 95] = [
    278, 333, 474, 556, 556, 889, 722, 238, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556, 556, 556, 556, 556,
    556, 556, 556, 333, 333, 584, 584, 584, 611, 975, 722, 722, 722, 722, 667, 611, 778, 722, 278, 556, 722, 611, 833,
    722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 333, 278, 333, 584, 556, 333, 556, 611, 556, 611,
    556, 333, 611, 611, 278, 278, 556, 278, 889, 611, 611, 611, 611, 389, 556, 333, 611, 556, 778, 556, 556, 500, 389,
    280, 389, 584,
];

/// Times-Roman: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const TIMES_ROMAN: [u16; 95] = [
    250, 333, 408, 500, 500, 833, 778, 180, 333, 333, 500, 564, 250, 333, 250, 278, 500, 500, 500, 500, 500, 500, 500,
    500, 500, 500, 278, 278, 564, 564, 564, 444, 921, 722, 667, 667, 722, 611, 556, 722, 722, 333, 389, 722, 611, 889,
    722, 722, 556, 722, 667, 556, 611, 722, 722, 944, 722, 722, 611, 333, 278, 333, 469, 500, 333, 444, 500, 444, 500,
    444, 333, 500, 500, 278, 278, 500, 278, 778, 500, 500, 500, 500, 333, 389, 278, 500, 500, 722, 500, 500, 444, 480,
    200, 480, 541,
];

/// Times-Bold: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const TIMES_BOLD: [u16; 95] = [
    250, 333, 555, 500, 500, 1000, 833, 278, 333, 333, 500, 570, 250, 333, 250, 278, 500, 500, 500, 500, 500, 500, 500,
    500, 500, 500, 333, 333, 570, 570, 570, 500, 930, 722, 667, 722, 722, 667, 611, 778, 778, 389, 500, 778, 667, 944,
    722, 778, 611, 778, 722, 556, 667, 722, 722, 1000, 722, 722, 667, 333, 278, 333, 581, 500, 333, 500, 556, 444, 556,
    444, 333, 500, 556, 278, 333, 556, 278, 833, 556, 500, 556, 556, 444, 389, 333, 556, 500, 722, 500, 500, 444, 394,
    220, 394, 520,
];

/// Times-Italic: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const TIMES_ITALIC: [u16; 95] = [
    250, 333, 420, 500, 500, 833, 778, 214, 333, 333, 500, 675, 250, 333, 250, 278, 500, 500, 500, 500, 500, 500, 500,
    500, 500, 500, 333, 333, 675, 675, 675, 500, 920, 611, 611, 667, 722, 611, 611, 722, 722, 333, 444, 667, 556, 833,
    667, 722, 611, 722, 611, 500, 556, 722, 611, 833, 611, 556, 556, 389, 278, 389, 422, 500, 333, 500, 500, 444, 500,
    444, 278, 500, 500, 278, 278, 444, 278, 722, 500, 500, 500, 500, 389, 389, 278, 500, 444, 667, 444, 444, 389, 400,
    275, 400, 541,
];

/// Times-BoldItalic: advance widths of codes 32-126 (WinAnsi), thousandths of an em (Adobe's AFM).
const TIMES_BOLD_ITALIC: [u16; 95] = [
    250, 389, 555, 500, 500, 833, 778, 278, 333, 333, 500, 570, 250, 333, 250, 278, 500, 500, 500, 500, 500, 500, 500,
    500, 500, 500, 333, 333, 570, 570, 570, 500, 832, 667, 667, 667, 722, 667, 667, 722, 778, 389, 500, 667, 611, 889,
    722, 722, 611, 722, 667, 556, 611, 722, 667, 889, 667, 611, 611, 333, 278, 333, 570, 500, 333, 500, 500, 444, 500,
    444, 333, 500, 556, 278, 278, 500, 278, 778, 556, 500, 500, 500, 389, 389, 278, 556, 444, 667, 500, 444, 389, 348,
    220, 348, 570,
];

/// The widths of codes 32-126 of the standard font `base_font` (a subset prefix `ABCDEF+` and
/// the metric-compatible Arial and Times New Roman names included), in thousandths of an em.
pub(super) fn widths(base_font: &[u8]) -> Option<Vec<f32>> {
    let name = match base_font.iter().position(|&byte| byte == b'+') {
        Some(plus) if plus == 6 => &base_font[plus + 1..],
        _ => base_font,
    };
    let table: &[u16; 95] = match name {
        b"Helvetica" | b"Helvetica-Oblique" | b"Arial" | b"ArialMT" | b"Arial-ItalicMT" | b"Arial,Italic" => &HELVETICA,
        b"Helvetica-Bold" | b"Helvetica-BoldOblique" | b"Arial-BoldMT" | b"Arial-BoldItalicMT" | b"Arial,Bold" => {
            &HELVETICA_BOLD
        }
        b"Times-Roman" | b"TimesNewRoman" | b"TimesNewRomanPSMT" => &TIMES_ROMAN,
        b"Times-Bold" | b"TimesNewRoman,Bold" | b"TimesNewRomanPS-BoldMT" => &TIMES_BOLD,
        b"Times-Italic" | b"TimesNewRoman,Italic" | b"TimesNewRomanPS-ItalicMT" => &TIMES_ITALIC,
        b"Times-BoldItalic" | b"TimesNewRoman,BoldItalic" | b"TimesNewRomanPS-BoldItalicMT" => &TIMES_BOLD_ITALIC,
        _ if name.starts_with(b"Courier") => return Some(vec![600.0; 95]),
        _ => return None,
    };
    Some(table.iter().map(|&width| f32::from(width)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_fonts_have_their_widths_and_others_none() {
        let helvetica = widths(b"Helvetica").expect("helvetica");
        assert_eq!(
            (helvetica[0], helvetica[usize::from(b'W' - 32)], helvetica[usize::from(b'i' - 32)]),
            (278.0, 944.0, 222.0)
        );
        assert_eq!(widths(b"ABCDEF+Times-Roman").expect("times")[usize::from(b'm' - 32)], 778.0);
        assert_eq!(widths(b"Courier-Bold").expect("courier")[10], 600.0);
        assert_eq!(widths(b"CMR10"), None);
        assert_eq!(widths(b"SampleSans"), None);
    }
}
