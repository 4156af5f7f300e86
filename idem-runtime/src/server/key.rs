//! Key validation and request fingerprints.

use axum::extract::FromRequestParts;
use axum::response::Response;
use http::request::Parts;
use http::{HeaderMap, HeaderName, Method};
use sha2::{Digest, Sha256};

use super::error::{KeyProblem, layer_missing};

/// Reads and validates the key header: `Ok(None)` when it is absent.
pub(crate) fn read_key(
    headers: &HeaderMap,
    name: &HeaderName,
    max_len: usize,
) -> Result<Option<String>, KeyProblem> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyProblem::Repeated);
    }
    validate(value.as_bytes(), max_len).map(Some)
}

/// The same checks for a header value and a body field: non-empty, at most
/// `max_len` bytes, visible ASCII only.
pub(crate) fn validate(bytes: &[u8], max_len: usize) -> Result<String, KeyProblem> {
    if bytes.is_empty() {
        return Err(KeyProblem::Empty);
    }
    if bytes.len() > max_len {
        return Err(KeyProblem::TooLong {
            len: bytes.len(),
            max: max_len,
        });
    }
    if let Some(position) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(KeyProblem::NotVisibleAscii { position });
    }
    // Every byte is visible ASCII, so this is valid UTF-8.
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Percent-encodes a key as one URL path segment. Everything but the
/// unreserved characters is escaped, so a key holding `/`, `?`, `#` or `%`
/// stays one segment and decodes back to itself.
pub(crate) fn encode_path_key(key: &str) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// Decodes a key from a percent-encoded URL path segment and validates it
/// exactly like a header key. A `%` without two hex digits after it is
/// refused rather than passed through, so one key has one spelling.
pub(crate) fn read_path_key(segment: &str, max_len: usize) -> Result<String, KeyProblem> {
    validate(&percent_decode(segment.as_bytes(), false)?, max_len)
}

/// `%XX` → the byte; with `plus_is_space` (form bodies), `+` → a space. A
/// `%` without two hex digits after it is refused, at its byte offset.
fn percent_decode(raw: &[u8], plus_is_space: bool) -> Result<Vec<u8>, KeyProblem> {
    let mut decoded = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if b == b'%' {
            let hi = raw.get(i + 1).and_then(|d| char::from(*d).to_digit(16));
            let lo = raw.get(i + 2).and_then(|d| char::from(*d).to_digit(16));
            match (hi, lo) {
                (Some(hi), Some(lo)) => {
                    // Two hex digits are at most 0xFF.
                    decoded.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                    i += 3;
                }
                _ => return Err(KeyProblem::MalformedEscape { position: i }),
            }
        } else {
            decoded.push(if plus_is_space && b == b'+' { b' ' } else { b });
            i += 1;
        }
    }
    Ok(decoded)
}

/// Where a key in the body stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyKey {
    /// A valid key.
    Found(String),
    /// A JSON object without the field.
    Absent,
    /// Not a JSON object (not JSON at all, or an array or scalar), so there
    /// is no field to read.
    NotAnObject,
}

/// Reads and validates the top-level string field `field` of a parsed body.
pub(crate) fn read_body_key(
    body: Option<&serde_json::Value>,
    field: &str,
    max_len: usize,
) -> Result<BodyKey, KeyProblem> {
    let Some(serde_json::Value::Object(map)) = body else {
        return Ok(BodyKey::NotAnObject);
    };
    match map.get(field) {
        None => Ok(BodyKey::Absent),
        Some(serde_json::Value::String(key)) => {
            validate(key.as_bytes(), max_len).map(BodyKey::Found)
        }
        Some(_) => Err(KeyProblem::NotAString),
    }
}

/// Reads and validates field `field` of a form-urlencoded body
/// (`a=1&IdempotencyKey=k-1`): `+` is a space and `%XX` a byte, as HTML
/// forms encode them. A field given twice is refused, like a repeated header.
pub(crate) fn read_form_key(
    body: &[u8],
    field: &str,
    max_len: usize,
) -> Result<BodyKey, KeyProblem> {
    let mut found: Option<Vec<u8>> = None;
    for pair in body.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => {
                let (name, rest) = pair.split_at(at);
                (name, rest.get(1..).unwrap_or_default())
            }
            None => (pair, &[][..]),
        };
        // A name that does not decode is not the field.
        if percent_decode(name, true).ok().as_deref() != Some(field.as_bytes()) {
            continue;
        }
        if found.is_some() {
            return Err(KeyProblem::Repeated);
        }
        found = Some(percent_decode(value, true)?);
    }
    match found {
        Some(value) => validate(&value, max_len).map(BodyKey::Found),
        None => Ok(BodyKey::Absent),
    }
}

/// SHA-256 over method, path (with query) and the canonical body, hex-encoded.
///
/// A JSON body is canonicalized (object keys sorted, insignificant whitespace
/// dropped) so that a retry serialized by a different library still matches;
/// any other body is hashed as raw bytes. Each part is length-prefixed so no
/// two different requests can concatenate to the same input.
///
/// `canonical` is the body's canonical form when it is to be canonicalised
/// (a JSON content type and a body that parses).
pub(crate) fn fingerprint(
    method: &Method,
    path: &str,
    canonical: Option<&[u8]>,
    body: &[u8],
) -> String {
    let body = canonical.unwrap_or(body);
    let mut hasher = Sha256::new();
    for part in [method.as_str().as_bytes(), path.as_bytes(), body] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hex(&hasher.finalize())
}

/// The longest step name a provider key spells out; a longer one, or one with
/// characters outside `[A-Za-z0-9_.-]`, is replaced by a digest of itself.
const PROVIDER_STEP_MAX: usize = 64;

/// The key a phased operation hands a foreign system for `step`.
///
/// Format: `{claim}:{step}`, where `{claim}` is 32 lowercase hex digits, the
/// first 128 bits of SHA-256 over the length-prefixed caller scope, key and
/// claim time. It is therefore
/// - unique per claim: two callers sending the same key value, or one caller
///   re-using a key after its replay window (a new claim, a new claim time),
///   never hand a provider the same key;
/// - stable across the claim's retries, takeovers and the completer, which
///   all resume the same record.
///
/// At most 97 bytes of visible ASCII, inside common provider limits (Stripe
/// accepts 255). A step name over 64 bytes or outside `[A-Za-z0-9_.-]` is
/// written as the first 16 hex digits of its own SHA-256.
pub(crate) fn provider_key(scope: &str, key: &str, claimed_at: i64, step: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [scope.as_bytes(), key.as_bytes(), &claimed_at.to_be_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let claim = hex(&hasher.finalize()[..16]);
    let plain = step.len() <= PROVIDER_STEP_MAX
        && !step.is_empty()
        && step
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if plain {
        format!("{claim}:{step}")
    } else {
        let digest = Sha256::digest(step.as_bytes());
        format!("{claim}:{}", hex(&digest[..8]))
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The key of the current request, for handlers that pass a derived key on
/// to another system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// The caller's scope.
    pub scope: String,
    /// The key; `None` for an unkeyed request where the key is optional.
    pub key: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<IdempotencyKey>()
            .cloned()
            .ok_or_else(layer_missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(value: &[u8]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("idempotency-key", HeaderValue::from_bytes(value).unwrap());
        map
    }

    #[test]
    fn read_key_accepts_visible_ascii_and_rejects_the_rest() {
        let name = HeaderName::from_static("idempotency-key");
        assert_eq!(
            read_key(&headers(b"order-739"), &name, 255),
            Ok(Some("order-739".into()))
        );
        assert_eq!(read_key(&HeaderMap::new(), &name, 255), Ok(None));
        assert_eq!(read_key(&headers(b""), &name, 255), Err(KeyProblem::Empty));
        assert_eq!(
            read_key(&headers(b"a b"), &name, 255),
            Err(KeyProblem::NotVisibleAscii { position: 1 })
        );
        assert_eq!(
            read_key(&headers(b"caf\xc3\xa9"), &name, 255),
            Err(KeyProblem::NotVisibleAscii { position: 3 })
        );
        assert_eq!(
            read_key(&headers(&[b'k'; 256]), &name, 255),
            Err(KeyProblem::TooLong { len: 256, max: 255 })
        );
    }

    #[test]
    fn path_keys_round_trip_and_hostile_ones_are_refused() {
        for key in ["order-739", "a/b?c#d%e", "~!$&'()*+,;=:@", "k"] {
            let encoded = encode_path_key(key);
            assert!(!encoded.contains(['/', '?', '#']), "{encoded}");
            assert_eq!(read_path_key(&encoded, 255), Ok(key.to_owned()));
        }
        assert_eq!(encode_path_key("a/b c"), "a%2Fb%20c");
        assert_eq!(read_path_key("", 255), Err(KeyProblem::Empty));
        assert_eq!(
            read_path_key("ab%2", 255),
            Err(KeyProblem::MalformedEscape { position: 2 })
        );
        assert_eq!(
            read_path_key("%zz", 255),
            Err(KeyProblem::MalformedEscape { position: 0 })
        );
        assert_eq!(
            read_path_key("a%20b", 255),
            Err(KeyProblem::NotVisibleAscii { position: 1 })
        );
        assert_eq!(
            read_path_key("caf%C3%A9", 255),
            Err(KeyProblem::NotVisibleAscii { position: 3 })
        );
        assert_eq!(
            read_path_key(&"k".repeat(256), 255),
            Err(KeyProblem::TooLong { len: 256, max: 255 })
        );
    }

    fn fingerprint(method: &Method, path: &str, is_json: bool, body: &[u8]) -> String {
        let canonical = if is_json {
            crate::server::canonical::canonical_json(body)
        } else {
            None
        };
        super::fingerprint(method, path, canonical.as_deref(), body)
    }

    #[test]
    fn read_form_key_decodes_one_field() {
        let read = |body: &str| read_form_key(body.as_bytes(), "IdempotencyKey", 16);
        assert_eq!(
            read("Body=hi&IdempotencyKey=k-1"),
            Ok(BodyKey::Found("k-1".into()))
        );
        assert_eq!(
            read("IdempotencyKey=k%2D2&To=x"),
            Ok(BodyKey::Found("k-2".into()))
        );
        assert_eq!(read("Idempotency%4Bey=k3"), Ok(BodyKey::Found("k3".into())));
        assert_eq!(read("Body=hi"), Ok(BodyKey::Absent));
        assert_eq!(read(""), Ok(BodyKey::Absent));
        assert_eq!(read("IdempotencyKey="), Err(KeyProblem::Empty));
        assert_eq!(
            read("IdempotencyKey=a+b"),
            Err(KeyProblem::NotVisibleAscii { position: 1 })
        );
        assert_eq!(
            read("IdempotencyKey=a&IdempotencyKey=b"),
            Err(KeyProblem::Repeated)
        );
        assert_eq!(
            read("IdempotencyKey=%zz"),
            Err(KeyProblem::MalformedEscape { position: 0 })
        );
    }

    #[test]
    fn read_body_key_takes_a_top_level_string_only() {
        let read = |body: &str| {
            let json = serde_json::from_str::<serde_json::Value>(body).ok();
            read_body_key(json.as_ref(), "idempotency_key", 8)
        };
        assert_eq!(
            read(r#"{"idempotency_key":"k-1","n":1}"#),
            Ok(BodyKey::Found("k-1".into()))
        );
        assert_eq!(
            read(r#"{"n":{"idempotency_key":"k"}}"#),
            Ok(BodyKey::Absent)
        );
        assert_eq!(read("not json"), Ok(BodyKey::NotAnObject));
        assert_eq!(read(r#"["idempotency_key"]"#), Ok(BodyKey::NotAnObject));
        assert_eq!(
            read(r#"{"idempotency_key":7}"#),
            Err(KeyProblem::NotAString)
        );
        assert_eq!(
            read(r#"{"idempotency_key":null}"#),
            Err(KeyProblem::NotAString)
        );
        assert_eq!(read(r#"{"idempotency_key":""}"#), Err(KeyProblem::Empty));
        assert_eq!(
            read(r#"{"idempotency_key":"a b"}"#),
            Err(KeyProblem::NotVisibleAscii { position: 1 })
        );
        assert_eq!(
            read(r#"{"idempotency_key":"123456789"}"#),
            Err(KeyProblem::TooLong { len: 9, max: 8 })
        );
    }

    #[test]
    fn fingerprint_ignores_json_key_order_and_whitespace() {
        let a = fingerprint(
            &Method::POST,
            "/t",
            true,
            br#"{"a":1,"b":[1,{"y":2,"x":1}]}"#,
        );
        let b = fingerprint(
            &Method::POST,
            "/t",
            true,
            b"{ \"b\": [1, {\"x\":1,\"y\":2}], \"a\": 1 }",
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint(
                &Method::POST,
                "/t",
                true,
                br#"{"a":2,"b":[1,{"y":2,"x":1}]}"#
            )
        );
        assert_ne!(
            a,
            fingerprint(
                &Method::POST,
                "/u",
                true,
                br#"{"a":1,"b":[1,{"y":2,"x":1}]}"#
            )
        );
        assert_ne!(
            a,
            fingerprint(
                &Method::PUT,
                "/t",
                true,
                br#"{"a":1,"b":[1,{"y":2,"x":1}]}"#
            )
        );
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn provider_keys_name_the_claim_not_the_key_value() {
        let a = provider_key("acct-A", "k", 1_700_000_000_000, "charge_card");
        let b = provider_key("acct-B", "k", 1_700_000_000_000, "charge_card");
        let later = provider_key("acct-A", "k", 1_700_086_400_001, "charge_card");
        assert_ne!(a, b);
        assert_ne!(a, later);
        assert_eq!(
            a,
            provider_key("acct-A", "k", 1_700_000_000_000, "charge_card")
        );
        assert!(a.ends_with(":charge_card"), "{a}");
        assert_eq!(a.len(), 32 + 1 + "charge_card".len());
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            provider_key("ab", "c", 1, "s"),
            provider_key("a", "bc", 1, "s")
        );
        let long = provider_key("s", "k", 1, &"x".repeat(500));
        let odd = provider_key("s", "k", 1, "charge card/ü");
        for derived in [&long, &odd] {
            assert_eq!(derived.len(), 32 + 1 + 16, "{derived}");
            assert!(derived.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        }
        assert_ne!(long, odd);
    }

    #[test]
    fn fingerprint_hashes_non_json_bodies_raw() {
        let a = fingerprint(&Method::POST, "/t", false, b"{ \"a\": 1 }");
        let b = fingerprint(&Method::POST, "/t", false, b"{\"a\":1}");
        assert_ne!(a, b);
    }
}
