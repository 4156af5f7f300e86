//! The canonical form of a JSON body, for its fingerprint: object members
//! sorted by key (the last of a repeated key wins), no insignificant
//! whitespace, strings and numbers written as `serde_json` writes them.
//!
//! It is written while the body is parsed, without building a
//! `serde_json::Value`: scalars and arrays go straight to the output, and an
//! object writes its members' canonical forms into one scratch buffer, then
//! copies them out in key order. Keys are borrowed from the body unless
//! they contain escapes.

use std::borrow::Cow;
use std::fmt;
use std::io::Write as _;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The canonical form of `body`, or `None` when it is not one JSON value
/// (the caller then hashes the raw bytes).
pub(crate) fn canonical_json(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let mut de = serde_json::Deserializer::from_slice(body);
    Canonical { out: &mut out }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(out)
}

/// Writes the canonical form of one value to `out`.
struct Canonical<'o> {
    out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// A JSON string as `serde_json` escapes it.
fn write_str<E: de::Error>(out: &mut Vec<u8>, s: &str) -> Result<(), E> {
    serde_json::to_writer(out, s).map_err(E::custom)
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write!(self.out, "{v}").map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write!(self.out, "{v}").map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // The parser never yields a non-finite number; `Value` would keep
        // one as `null`, and so does this.
        if v.is_finite() {
            serde_json::to_writer(&mut *self.out, &v).map_err(E::custom)
        } else {
            self.visit_unit()
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write_str(self.out, v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            if seq
                .next_element_seed(Canonical {
                    out: &mut *self.out,
                })?
                .is_none()
            {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut scratch = Vec::new();
        let mut members: Vec<(Cow<'de, str>, Range<usize>)> = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let start = scratch.len();
            map.next_value_seed(Canonical { out: &mut scratch })?;
            members.push((key, start..scratch.len()));
        }
        // Stable, so of a repeated key the last member is the last of its run.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        self.out.push(b'{');
        let mut written = 0;
        for (i, (key, range)) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if written > 0 {
                self.out.push(b',');
            }
            write_str(self.out, key)?;
            self.out.push(b':');
            self.out
                .extend_from_slice(scratch.get(range.clone()).unwrap_or_default());
            written += 1;
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// An object key, borrowed from the body where it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::canonical_json;

    /// The canonical form as earlier releases computed it, through a
    /// `serde_json::Value`: stored fingerprints were made with it, so the
    /// streaming form must agree byte for byte.
    fn through_value(body: &[u8]) -> Option<Vec<u8>> {
        fn write(value: &serde_json::Value, out: &mut String) {
            use serde_json::Value;
            match value {
                Value::Object(map) => {
                    let mut entries: Vec<_> = map.iter().collect();
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                    out.push('{');
                    for (i, (k, v)) in entries.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&Value::String(k.clone()).to_string());
                        out.push(':');
                        write(v, out);
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write(v, out);
                    }
                    out.push(']');
                }
                scalar => out.push_str(&scalar.to_string()),
            }
        }
        let value = serde_json::from_slice::<serde_json::Value>(body).ok()?;
        let mut out = String::new();
        write(&value, &mut out);
        Some(out.into_bytes())
    }

    #[test]
    fn agrees_with_the_value_form_byte_for_byte() {
        let bodies: &[&str] = &[
            r#"{"order_id":"o-1","amount":1999,"currency":"usd"}"#,
            r#" { "b" : [ 1 , 2.50 , -0 , -0.0 , 1e3 , 1E-7 , 18446744073709551615 , -9223372036854775808 ] ,
                "a" : { "z" : null , "y" : true , "x" : false } } "#,
            r#"{"a":1,"a":2,"b":{"c":3,"c":4},"a":3}"#,
            r#"{"\u00e9":"caf\u00e9","é":"x","\"q\"":"line\nbreak\t\u0001","":[]}"#,
            r#"["\ud83d\ude00", "😀", {}, [], [[]], {"a":{}}]"#,
            r#"{"B":1,"a":2,"_":3,"Z":4,"ä":5,"aa":6,"a0":7}"#,
            "1.7976931348623157e308",
            "123456789012345678901234567890",
            "0.1",
            "\"just a string\"",
            "null",
            "[]",
            "{}",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\":1} trailing",
            "",
            "not json",
            "1e400",
        ];
        for body in bodies {
            assert_eq!(
                canonical_json(body.as_bytes()).map(String::from_utf8),
                through_value(body.as_bytes()).map(String::from_utf8),
                "{body}"
            );
        }
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canonical_json(br#"{ "b": [1, {"d": 1, "c": 2}], "a": "x" }"#).as_deref(),
            Some(br#"{"a":"x","b":[1,{"c":2,"d":1}]}"#.as_slice())
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(canonical_json(deep.as_bytes()), None);
        assert_eq!(through_value(deep.as_bytes()), None);
    }
}
