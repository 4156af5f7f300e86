//! Serde helpers that generated types call, so each generated type stays a
//! few lines.

use serde::de::{DeserializeOwned, Deserializer, Error};
use serde_json::Value;

/// Reads any JSON value and the string at its top-level `property`: the
/// first step of deserializing a tagged union.
pub fn tagged<'de, D: Deserializer<'de>>(
    deserializer: D,
    property: &str,
) -> Result<(Option<String>, Value), D::Error> {
    let value: Value = serde::Deserialize::deserialize(deserializer)?;
    let tag = value
        .get(property)
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((tag, value))
}

/// `T` from a JSON value, with the error in the deserializer's type.
pub fn from_value<T: DeserializeOwned, E: Error>(value: Value) -> Result<T, E> {
    serde_json::from_value(value).map_err(E::custom)
}

/// The error of a value that matched no variant.
pub fn unexpected<E: Error>(expected: &str) -> E {
    E::custom(format!("the value matches no variant: expected {expected}"))
}
