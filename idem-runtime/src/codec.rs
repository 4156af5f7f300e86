//! Serde helpers that generated types call, so each generated type stays a
//! few lines.

use std::cell::Cell;

use serde::de::{Deserialize, DeserializeOwned, Deserializer, Error};
use serde_json::Value;

thread_local! {
    static STRICT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a synchronous decode) strictly: an optional property whose
/// schema is not nullable rejects an explicit `null` instead of reading it
/// as absent. Generated servers decode requests this way; generated
/// clients read responses leniently, as most servers send `null` for
/// properties they leave out.
pub fn strictly<R>(f: impl FnOnce() -> R) -> R {
    let before = STRICT.replace(true);
    let out = f();
    STRICT.set(before);
    out
}

/// The `deserialize_with` of an optional, non-nullable property: absent is
/// `None` (by `#[serde(default)]`), a value is `Some`, and `null` is an error
/// while decoding [`strictly`], `None` otherwise.
pub fn non_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    if STRICT.get() {
        T::deserialize(deserializer).map(Some)
    } else {
        Option::<T>::deserialize(deserializer)
    }
}

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

/// Rewrites every float in `value` with no fractional part (`1.0`, `2e3`)
/// as an integer, as JSON Schema reads them; says whether any changed.
///
/// ```
/// let mut v = serde_json::json!({"amount": 1.0, "rate": 0.5, "n": [2e3]});
/// assert!(idem_runtime::codec::integral_floats_as_integers(&mut v));
/// assert_eq!(v, serde_json::json!({"amount": 1, "rate": 0.5, "n": [2000]}));
/// ```
pub fn integral_floats_as_integers(value: &mut Value) -> bool {
    let mut stack = vec![value];
    let mut changed = false;
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                // Inside the range where an f64 holds every integer exactly.
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "checked whole and in range"
                    )]
                    let whole = f as i64;
                    *value = Value::from(whole);
                    changed = true;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
    changed
}
