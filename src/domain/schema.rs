//! The input rules that the wire types and the validators share: JSON integers read the way
//! JSON Schema reads `integer` (for `#[serde(deserialize_with = "…")]`), and the bound on ACL
//! names. The JSON Schema fragments that declare these rules in the OpenAPI document are the
//! HTTP layer's (`crate::http::contract::schema`).

use serde::Deserializer;
use serde::de::{self, Unexpected, Visitor};

/// Longest accepted ACL group or user name, in characters.
pub const MAX_ACL_NAME_CHARS: usize = 256;

/// Reads a JSON `u64` the way JSON Schema reads `integer`: any number with a zero fractional
/// part (`3`, `3.0`, `3e0`) in 0..=`u64::MAX`, so a schema-valid `3.0` is not refused (a string
/// is). For `#[serde(deserialize_with = "…")]`.
pub fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(IntegerVisitor { text: false })
}

/// [`integer`] for an optional field (`null` and absence are `None`).
pub fn optional_integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_option(OptionalIntegerVisitor)
}

/// [`integer`] for a query parameter, whose values are text (`since=3`, `since=3.0`).
pub fn query_integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    deserializer.deserialize_any(IntegerVisitor { text: true })
}

struct IntegerVisitor {
    /// Whether the number comes as text (a query string).
    text: bool,
}

impl Visitor<'_> for IntegerVisitor {
    type Value = u64;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("an integer in 0..=18446744073709551615")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        // 2^64 is the first float above u64::MAX; every integral float below it converts exactly.
        if value.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&value) {
            Ok(value as u64)
        } else {
            Err(E::invalid_value(Unexpected::Float(value), &self))
        }
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
        if !self.text {
            return Err(E::invalid_type(Unexpected::Str(value), &self));
        }
        if let Ok(integer) = value.parse::<u64>() {
            return Ok(integer);
        }
        match value.parse::<f64>() {
            Ok(number) => self.visit_f64(number),
            Err(_) => Err(E::invalid_value(Unexpected::Str(value), &self)),
        }
    }
}

struct OptionalIntegerVisitor;

impl<'de> Visitor<'de> for OptionalIntegerVisitor {
    type Value = Option<u64>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("null or an integer in 0..=18446744073709551615")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(IntegerVisitor { text: false }).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Numbers {
        #[serde(default, deserialize_with = "optional_integer")]
        optional: Option<u64>,
        #[serde(default, deserialize_with = "integer")]
        required: u64,
    }

    #[test]
    fn integers_are_read_as_json_schema_reads_them() {
        let read =
            |json: &str| serde_json::from_str::<Numbers>(json).map(|numbers| (numbers.optional, numbers.required));
        assert_eq!(read("{}").unwrap(), (None, 0));
        assert_eq!(read(r#"{"optional": null, "required": 3}"#).unwrap(), (None, 3));
        assert_eq!(read(r#"{"optional": 3.0, "required": 1e3}"#).unwrap(), (Some(3), 1000));
        assert_eq!(read(r#"{"optional": 18446744073709551615}"#).unwrap().0, Some(u64::MAX));
        for bad in ["-1", "2.5", "18446744073709551616", "1e20", r#""3""#, "true", "[]"] {
            assert!(read(&format!(r#"{{"optional": {bad}}}"#)).is_err(), "{bad}");
            assert!(read(&format!(r#"{{"required": {bad}}}"#)).is_err(), "{bad}");
        }
    }

    #[test]
    fn query_integers_are_read_from_text() {
        use serde::de::value::{Error, StrDeserializer};
        let read = |text: &str| query_integer(StrDeserializer::<Error>::new(text));
        assert_eq!(read("7").unwrap(), 7);
        assert_eq!(read("7.0").unwrap(), 7);
        assert_eq!(read("18446744073709551615").unwrap(), u64::MAX);
        for bad in ["-1", "x", "7.5", "", "18446744073709551616", "inf", "NaN"] {
            assert!(read(bad).is_err(), "{bad}");
        }
        assert!(integer(StrDeserializer::<Error>::new("7")).is_err(), "json integers are never strings");
    }
}
