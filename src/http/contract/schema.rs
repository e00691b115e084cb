//! JSON Schema fragments (OpenAPI 3.1) for the input rules the service enforces, so the schema
//! derives of the wire types declare exactly what the validators accept: clients are generated
//! from the OpenAPI document and schemathesis holds the running server to it.
//!
//! Invariant: each pattern means what the Rust predicate it stands for means, character for
//! character. Whitespace is `char::is_whitespace` (Unicode `White_Space`, what `str::trim`
//! strips), spelled out as an explicit class because `\s` differs between ECMA-262, Python and
//! Rust; a control character is `char::is_control` (general category `Cc`). Lengths count Unicode
//! scalar values like `str::chars` and like JSON Schema's `minLength`/`maxLength`. The tests
//! below check each pattern against its predicate with the `regex` crate.

use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
use utoipa::openapi::{Object, RefOr, Schema};

use crate::domain::schema::MAX_ACL_NAME_CHARS;

/// The members of a character class matching exactly what `char::is_whitespace` accepts.
pub const WHITESPACE_CLASS: &str = r"\t\n\x0B\f\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";

/// The members of a character class matching exactly what `char::is_control` accepts.
pub const CONTROL_CLASS: &str = r"\x00-\x1F\x7F-\x9F";

/// Matches a string that `str::trim` does not reduce to nothing (unanchored: it contains one
/// non-whitespace character).
pub fn not_blank_pattern() -> String {
    format!("[^{WHITESPACE_CLASS}]")
}

/// Matches a string whose trimmed form (`str::trim`) has 1..=`max_chars` characters.
pub fn trimmed_length_pattern(max_chars: usize) -> String {
    debug_assert!(max_chars >= 1, "a trimmed length bound below 1 admits nothing");
    let space = format!("[{WHITESPACE_CLASS}]");
    let solid = format!("[^{WHITESPACE_CLASS}]");
    match max_chars {
        0 | 1 => format!("^{space}*{solid}{space}*$"),
        _ => format!("^{space}*{solid}(?:[\\s\\S]{{0,{inner}}}{solid})?{space}*$", inner = max_chars - 2),
    }
}

/// Matches a string without control characters that is not blank.
pub fn identifier_pattern() -> String {
    format!("^[^{CONTROL_CLASS}]*[^{CONTROL_CLASS}{WHITESPACE_CLASS}][^{CONTROL_CLASS}]*$")
}

/// A string of 1..=`max_chars` characters that is not blank (validated as
/// `!text.trim().is_empty() && text.chars().count() <= max_chars`).
pub fn not_blank(max_chars: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max_chars))
        .pattern(Some(not_blank_pattern()))
        .description(Some(description))
        .build()
}

/// A string of 1..=`max_chars` characters, not blank, without control characters (validated as
/// `!id.trim().is_empty() && id.chars().count() <= max_chars && !id.chars().any(char::is_control)`).
pub fn identifier(max_chars: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max_chars))
        .pattern(Some(identifier_pattern()))
        .description(Some(description))
        .build()
}

/// A string whose trimmed form has 1..=`max_chars` characters (surrounding whitespace is
/// ignored, so the raw string may be longer).
pub fn trimmed_text(max_chars: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .pattern(Some(trimmed_length_pattern(max_chars)))
        .description(Some(description))
        .build()
}

/// An unsigned 64-bit integer of at least `minimum` (`null` too when `nullable`), read with
/// [`crate::domain::schema::integer`] or [`crate::domain::schema::optional_integer`]; without the `int64` format, which would claim a bound of
/// 2^63 - 1.
pub fn unsigned(minimum: u64, nullable: bool, description: &str) -> Object {
    let schema_type = if nullable { SchemaType::from_iter([Type::Integer, Type::Null]) } else { Type::Integer.into() };
    ObjectBuilder::new()
        .schema_type(schema_type)
        .minimum(Some(minimum))
        .maximum(Some(u64::MAX))
        .description(Some(description))
        .build()
}

/// An array of names (ACL groups or users), each 1..=256 characters and not blank; `null` too
/// when `nullable`.
pub fn acl_names(nullable: bool, description: &str) -> RefOr<Schema> {
    let schema_type = if nullable { SchemaType::from_iter([Type::Array, Type::Null]) } else { Type::Array.into() };
    ArrayBuilder::new()
        .schema_type(schema_type)
        .items(not_blank(MAX_ACL_NAME_CHARS, "a group or user name"))
        .description(Some(description))
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use regex::Regex;

    use super::*;

    /// Characters that stress the rules: every whitespace and some controls, letters, and
    /// characters that one regex dialect or another counts as space (U+001C, U+180E, U+200B,
    /// U+FEFF).
    fn tricky_char() -> impl Strategy<Value = char> {
        prop_oneof![
            proptest::sample::select(vec![
                '\t', '\n', '\u{b}', '\u{c}', '\r', ' ', '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}', '\u{200a}',
                '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}', '\u{0}', '\u{1c}', '\u{1f}', '\u{7f}',
                '\u{9f}', '\u{180e}', '\u{200b}', '\u{feff}', 'a', 'Z', '0', 'é', '字', '😀',
            ]),
            any::<char>(),
        ]
    }

    fn tricky_string(max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(tricky_char(), 0..max).prop_map(|chars| chars.into_iter().collect())
    }

    #[test]
    fn the_whitespace_class_is_exactly_char_is_whitespace() {
        let class = Regex::new(&format!("^[{WHITESPACE_CLASS}]$")).unwrap();
        let control = Regex::new(&format!("^[{CONTROL_CLASS}]$")).unwrap();
        // Every White_Space and Cc character is below U+3001; the rest spot-checks higher planes.
        let high = [0xFEFF, 0xFFFD, 0x1_F600, 0x10_FFFF];
        for character in (0..=0x3100).chain(high).filter_map(char::from_u32) {
            let text = character.to_string();
            assert_eq!(class.is_match(&text), character.is_whitespace(), "{:?}", character);
            assert_eq!(control.is_match(&text), character.is_control(), "{:?}", character);
        }
    }

    proptest! {
        #[test]
        fn not_blank_matches_what_trim_keeps(text in tricky_string(12)) {
            let pattern = Regex::new(&not_blank_pattern()).unwrap();
            prop_assert_eq!(pattern.is_match(&text), !text.trim().is_empty());
        }

        #[test]
        fn trimmed_length_matches_the_trimmed_count(text in tricky_string(12), max in 1usize..6) {
            let pattern = Regex::new(&trimmed_length_pattern(max)).unwrap();
            let count = text.trim().chars().count();
            prop_assert_eq!(pattern.is_match(&text), (1..=max).contains(&count), "{:?} max {}", text, max);
        }

        #[test]
        fn identifier_matches_no_control_and_not_blank(text in tricky_string(12)) {
            let pattern = Regex::new(&identifier_pattern()).unwrap();
            let valid = !text.trim().is_empty() && !text.chars().any(char::is_control);
            prop_assert_eq!(pattern.is_match(&text), valid, "{:?}", text);
        }
    }

    #[test]
    fn the_question_pattern_admits_2000_characters_after_trimming() {
        let pattern = Regex::new(&trimmed_length_pattern(2000)).unwrap();
        assert!(pattern.is_match(&format!("  {}\n", "x".repeat(2000))));
        assert!(!pattern.is_match(&"x".repeat(2001)));
        assert!(!pattern.is_match(" \u{3000}\t"));
    }
}
