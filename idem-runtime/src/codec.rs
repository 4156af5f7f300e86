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

/// A string `enum` of a spec: a Rust enum with `Copy`, `Eq`, `Ord` and
/// `Hash`, `ALL` (every value, in the spec's order), `as_str` (the value as
/// the API spells it), `Display`, and serde that reads and writes those
/// spellings.
///
/// ```
/// idem_runtime::string_enum! {
///     /// Where a payment is.
///     pub enum Status {
///         Pending = "pending",
///         RequiresAction = "requires_action",
///     }
/// }
///
/// assert_eq!(Status::RequiresAction.as_str(), "requires_action");
/// assert_eq!(serde_json::to_string(&Status::Pending).unwrap(), r#""pending""#);
/// let read: Status = serde_json::from_str(r#""requires_action""#).unwrap();
/// assert_eq!(read, Status::RequiresAction);
/// assert!(serde_json::from_str::<Status>(r#""lost""#).is_err());
/// ```
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($variant:ident = $wire:literal),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $(#[doc = concat!("`", $wire, "`")] $variant,)*
        }

        impl $name {
            /// Every value, in the spec's order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The value as the API spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)*
                }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl $crate::serde::Serialize for $name {
            fn serialize<S: $crate::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::core::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::core::result::Result<Self, D::Error> {
                $crate::codec::string_enum(deserializer, Self::ALL, Self::as_str)
            }
        }
    };
}

/// The `Deserialize` of a generated string enum: the one of `all` whose
/// `as_str` is the string read. Anything else is an error listing the
/// values the spec allows.
pub fn string_enum<'de, D, T>(
    deserializer: D,
    all: &'static [T],
    as_str: fn(T) -> &'static str,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Copy + 'static,
{
    struct Values<T: 'static> {
        all: &'static [T],
        as_str: fn(T) -> &'static str,
    }

    impl<T: Copy> serde::de::Visitor<'_> for Values<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("one of ")?;
            for (i, value) in self.all.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "`{}`", (self.as_str)(*value))?;
            }
            Ok(())
        }

        fn visit_str<E: Error>(self, text: &str) -> Result<T, E> {
            self.all
                .iter()
                .copied()
                .find(|value| (self.as_str)(*value) == text)
                .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
        }
    }

    deserializer.deserialize_str(Values { all, as_str })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum State {
        Open,
        Shut,
    }

    impl State {
        const ALL: &[Self] = &[Self::Open, Self::Shut];

        fn as_str(self) -> &'static str {
            match self {
                Self::Open => "open",
                Self::Shut => "shut",
            }
        }
    }

    impl<'de> Deserialize<'de> for State {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            string_enum(d, Self::ALL, Self::as_str)
        }
    }

    #[test]
    fn string_enums_read_their_spellings_only() {
        assert_eq!(
            serde_json::from_str::<State>("\"shut\"").unwrap(),
            State::Shut
        );
        let error = serde_json::from_str::<State>("\"ajar\"").unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid value: string \"ajar\", expected one of `open`, `shut` at line 1 column 6"
        );
        assert!(serde_json::from_str::<State>("3").is_err());
        // As a map key, and inside an untagged choice.
        let map: std::collections::BTreeMap<State, u8> =
            serde_json::from_str(r#"{"open": 1}"#).unwrap();
        assert_eq!(map.get(&State::Open), Some(&1));
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(untagged)]
        enum Either {
            State(State),
            Other(String),
        }
        assert_eq!(
            serde_json::from_str::<Either>("\"open\"").unwrap(),
            Either::State(State::Open)
        );
        assert_eq!(
            serde_json::from_str::<Either>("\"ajar\"").unwrap(),
            Either::Other("ajar".into())
        );
    }
}
