//! Strict JSON reading of generator output: a JSON object that repeats a key is refused.
//!
//! `serde_json::Value` keeps the last of two equal keys, so `{"answerable": false, …,
//! "answerable": true}` would silently read as answerable, and a validator and a downstream
//! consumer could disagree about what the model said. [`parse_unique_keys`] builds the same
//! `Value` through a visitor that fails on the first repeated key at any depth.
//!
//! Invariants: a document without repeated keys parses to exactly what `serde_json::from_str`
//! gives (same nesting limit, trailing characters refused); a repeated key is reported apart
//! from a syntax error, so the caller can name it.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a text is not an acceptable JSON document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StrictJsonError {
    /// Not JSON (syntax, truncation, trailing characters, nesting too deep).
    Syntax,
    /// Valid JSON in which some object repeats a key.
    DuplicateKey,
}

/// Parses `text` as one JSON document, refusing any object that repeats a key.
pub(crate) fn parse_unique_keys(text: &str) -> Result<Value, StrictJsonError> {
    let duplicate = Cell::new(false);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = UniqueKeys { duplicate: &duplicate }.deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match parsed {
        Ok(value) => Ok(value),
        Err(_) if duplicate.get() => Err(StrictJsonError::DuplicateKey),
        Err(_) => Err(StrictJsonError::Syntax),
    }
}

/// Seed and visitor building a [`Value`]; sets `duplicate` and fails on a repeated key.
#[derive(Clone, Copy)]
struct UniqueKeys<'a> {
    duplicate: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value without repeated object keys")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = access.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if object.contains_key(&key) {
                self.duplicate.set(true);
                return Err(A::Error::custom("repeated object key"));
            }
            let value = access.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_without_repeated_keys_parse_like_serde_json() {
        for text in [
            r#"{"answerable": true, "claims": [{"text": "a", "citations": ["S1", "S1"]}]}"#,
            r#"[1, -2, 3.5, 1e400, "x", null, true, {"a": {"a": {"a": []}}}, {}]"#,
            r#"  "plain string"  "#,
            r#"{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}"#,
        ] {
            let expected: Result<Value, _> = serde_json::from_str(text);
            match expected {
                Ok(expected) => assert_eq!(parse_unique_keys(text), Ok(expected), "{text}"),
                Err(_) => assert_eq!(parse_unique_keys(text), Err(StrictJsonError::Syntax), "{text}"),
            }
        }
    }

    #[test]
    fn a_repeated_key_at_any_depth_is_refused() {
        for text in [
            r#"{"answerable": true, "answerable": false, "claims": []}"#,
            r#"{"answerable": true, "claims": [], "claims": []}"#,
            r#"{"answerable": true, "claims": [{"text": "a", "citations": ["S1"], "citations": []}]}"#,
            r#"[{"x": 1}, {"y": {"z": 1, "z": 1}}]"#,
            r#"{"a": 1, "\u0061": 2}"#,
        ] {
            assert_eq!(parse_unique_keys(text), Err(StrictJsonError::DuplicateKey), "{text}");
        }
    }

    #[test]
    fn syntax_errors_are_not_reported_as_duplicates() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for text in ["", "{", r#"{"a": 1} trailing"#, r#"{"a": 1,}"#, "Sure! {claims: oops", deep.as_str()] {
            assert_eq!(parse_unique_keys(text), Err(StrictJsonError::Syntax), "{text}");
        }
    }
}
