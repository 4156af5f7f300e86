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

/// An object schema as a Rust struct, with serde that reads and writes it
/// as a JSON object: each field carries its property's name and whether it
/// may be left out, as `#[json("name")]` or `#[json("name", optional)]`.
///
/// An optional field is an `Option`: absent (or `null`) reads as `None`,
/// and `None` is left out when writing. `optional, non_null` also refuses
/// an explicit `null` while decoding [`strictly`]. A property the struct
/// does not name is skipped; `closed_object!` refuses it instead
/// (`additionalProperties: false`). A property given twice is refused.
///
/// Generated types use this rather than serde's derives: the code it
/// expands to is a fraction of theirs, which is most of what a large API's
/// types cost rustc.
///
/// ```
/// idem_runtime::object! {
///     /// A payment.
///     #[derive(Debug, Clone, PartialEq)]
///     pub struct Payment {
///         /// In minor units.
///         #[json("amount")]
///         pub amount: i64,
///         #[json("customerId", optional)]
///         pub customer_id: Option<String>,
///     }
/// }
///
/// let read: Payment = serde_json::from_str(r#"{"amount": 5, "extra": 1}"#).unwrap();
/// assert_eq!(read, Payment { amount: 5, customer_id: None });
/// assert_eq!(serde_json::to_string(&read).unwrap(), r#"{"amount":5}"#);
/// assert!(serde_json::from_str::<Payment>(r#"{"customerId": "c"}"#).is_err());
/// ```
#[macro_export]
macro_rules! object {
    ($($item:tt)*) => {
        $crate::__object!(open; $($item)*);
    };
}

/// [`object!`] for an object that refuses properties it does not name.
#[macro_export]
macro_rules! closed_object {
    ($($item:tt)*) => {
        $crate::__object!(closed; $($item)*);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __object {
    (
        $mode:ident;
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:expr])*
                #[json($wire:literal $(, $how:ident)*)]
                $(#[$field_meta:meta])*
                pub $field:ident : $ty:ty
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        // A deprecated property is still read and written.
        #[allow(deprecated)]
        impl $crate::serde::Serialize for $name {
            fn serialize<__S: $crate::serde::Serializer>(
                &self,
                serializer: __S,
            ) -> ::core::result::Result<__S::Ok, __S::Error> {
                use $crate::serde::ser::SerializeMap as _;
                let mut map = serializer.serialize_map(::core::option::Option::None)?;
                $($crate::__object_field!(write map, &self.$field, $wire $(, $how)*);)*
                map.end()
            }
        }

        #[allow(deprecated)]
        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<__D: $crate::serde::Deserializer<'de>>(
                deserializer: __D,
            ) -> ::core::result::Result<Self, __D::Error> {
                struct __ObjectVisitor;

                impl<'de> $crate::serde::de::Visitor<'de> for __ObjectVisitor {
                    type Value = $name;

                    fn expecting(
                        &self,
                        f: &mut ::core::fmt::Formatter<'_>,
                    ) -> ::core::fmt::Result {
                        f.write_str(::core::concat!("an object (", ::core::stringify!($name), ")"))
                    }

                    fn visit_map<__A: $crate::serde::de::MapAccess<'de>>(
                        self,
                        mut map: __A,
                    ) -> ::core::result::Result<$name, __A::Error> {
                        $(let mut $field: ::core::option::Option<$ty> = ::core::option::Option::None;)*
                        while let ::core::option::Option::Some(key) =
                            map.next_key::<$crate::codec::Key<'de>>()?
                        {
                            match key.as_str() {
                                $($wire => $crate::__object_field!(read map, &mut $field, $wire $(, $how)*),)*
                                other => $crate::codec::other_property(
                                    &mut map,
                                    other,
                                    $crate::__object_mode!($mode),
                                    &[$($wire),*],
                                )?,
                            }
                        }
                        ::core::result::Result::Ok($name {
                            $($field: $crate::__object_field!(finish $field, $wire $(, $how)*),)*
                        })
                    }
                }

                deserializer.deserialize_map(__ObjectVisitor)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __object_mode {
    (open) => {
        false
    };
    (closed) => {
        true
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __object_field {
    (write $map:ident, $value:expr, $wire:literal) => {
        $map.serialize_entry($wire, $value)?
    };
    (write $map:ident, $value:expr, $wire:literal, optional $(, non_null)?) => {
        if let ::core::option::Option::Some(value) = $value {
            $map.serialize_entry($wire, value)?;
        }
    };
    (read $map:ident, $slot:expr, $wire:literal) => {
        $crate::codec::read_property(&mut $map, $slot, $wire)?
    };
    (read $map:ident, $slot:expr, $wire:literal, optional) => {
        $crate::codec::read_property(&mut $map, $slot, $wire)?
    };
    (read $map:ident, $slot:expr, $wire:literal, optional, non_null) => {
        $crate::codec::read_non_null_property(&mut $map, $slot, $wire)?
    };
    (finish $slot:ident, $wire:literal) => {
        $crate::codec::required_property($slot, $wire)?
    };
    (finish $slot:ident, $wire:literal, optional $(, non_null)?) => {
        $slot.flatten()
    };
}

/// A `oneOf`/`anyOf` schema as a Rust enum of one value per variant, with
/// serde that writes the value as it is and reads the first variant, in
/// order, that the value decodes as.
///
/// ```
/// idem_runtime::one_of! {
///     /// A customer, or its id.
///     #[derive(Debug, Clone, PartialEq)]
///     pub enum Customer {
///         Id(String),
///         Number(i64),
///     }
/// }
///
/// assert_eq!(serde_json::from_str::<Customer>(r#""cus_1""#).unwrap(), Customer::Id("cus_1".into()));
/// assert_eq!(serde_json::to_string(&Customer::Number(7)).unwrap(), "7");
/// assert!(serde_json::from_str::<Customer>("true").is_err());
/// ```
#[macro_export]
macro_rules! one_of {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($variant:ident($ty:ty $(,)?)),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($variant($ty),)*
        }

        impl $crate::serde::Serialize for $name {
            fn serialize<__S: $crate::serde::Serializer>(
                &self,
                serializer: __S,
            ) -> ::core::result::Result<__S::Ok, __S::Error> {
                match self {
                    $(Self::$variant(value) => $crate::serde::Serialize::serialize(value, serializer),)*
                }
            }
        }

        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<__D: $crate::serde::Deserializer<'de>>(
                deserializer: __D,
            ) -> ::core::result::Result<Self, __D::Error> {
                let value: $crate::serde_json::Value =
                    $crate::serde::Deserialize::deserialize(deserializer)?;
                $(
                    if let ::core::option::Option::Some(v) = $crate::codec::variant::<$ty>(&value) {
                        return ::core::result::Result::Ok(Self::$variant(v));
                    }
                )*
                ::core::result::Result::Err($crate::codec::unexpected::<__D::Error>(
                    ::core::concat!("one of the variants of ", ::core::stringify!($name)),
                ))
            }
        }
    };
}

/// `value` as variant type `T`, if it decodes as one.
#[doc(hidden)]
pub fn variant<T: DeserializeOwned>(value: &Value) -> Option<T> {
    T::deserialize(value).ok()
}

/// A property name as [`object!`] reads it: borrowed from the input when
/// it can be.
#[doc(hidden)]
#[derive(Debug)]
pub struct Key<'de>(std::borrow::Cow<'de, str>);

impl Key<'_> {
    #[doc(hidden)]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;

        impl<'de> serde::de::Visitor<'de> for Name {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a property name")
            }

            fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E: Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(Name)
    }
}

/// Reads the value of property `name` into `slot`; a second one is refused.
#[doc(hidden)]
pub fn read_property<'de, A, T>(
    map: &mut A,
    slot: &mut Option<T>,
    name: &'static str,
) -> Result<(), A::Error>
where
    A: serde::de::MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(A::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

/// [`read_property`] of an optional, non-nullable property (see
/// [`non_null`]).
#[doc(hidden)]
pub fn read_non_null_property<'de, A, T>(
    map: &mut A,
    slot: &mut Option<Option<T>>,
    name: &'static str,
) -> Result<(), A::Error>
where
    A: serde::de::MapAccess<'de>,
    T: Deserialize<'de>,
{
    struct NonNull<T>(Option<T>);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for NonNull<T> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            non_null(deserializer).map(NonNull)
        }
    }

    if slot.is_some() {
        return Err(A::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value::<NonNull<T>>()?.0);
    Ok(())
}

/// The value of a required property, or the error naming it.
#[doc(hidden)]
pub fn required_property<T, E: Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

/// A property an [`object!`] does not name: skipped, or refused when the
/// object is closed.
#[doc(hidden)]
pub fn other_property<'de, A>(
    map: &mut A,
    name: &str,
    closed: bool,
    known: &'static [&'static str],
) -> Result<(), A::Error>
where
    A: serde::de::MapAccess<'de>,
{
    if closed {
        return Err(A::Error::unknown_field(name, known));
    }
    map.next_value::<serde::de::IgnoredAny>()?;
    Ok(())
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
