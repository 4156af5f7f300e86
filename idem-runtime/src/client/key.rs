//! Idempotency keys: minted once per logical call, sent unchanged on every attempt.

use std::fmt;
use std::sync::Arc;

use http::HeaderValue;

/// A validated idempotency key.
///
/// A key names one *logical* operation, not one HTTP attempt: build it before
/// the first attempt and keep it (on the job row, in the outbox) until the
/// operation has a definite outcome. The retry client sends the same key on
/// every attempt and hands it back inside every error, so a caller can try
/// again later without risking a second side effect.
///
/// Valid keys are 1–255 characters of visible ASCII (`!` to `~`): the
/// server rejects anything else with `400`, so the client refuses it first.
///
/// Derivation, best first:
/// 1. from an identifier the caller already holds ([`IdempotencyKey::derived`],
///    e.g. `order-739-confirm`): deterministic, survives restarts by construction;
/// 2. request-scoped (`reset-<user>-<request id>`);
/// 3. a random UUIDv4 ([`IdempotencyKey::new_v4`]) minted once and stored.
///
/// A fresh value per attempt is the anti-pattern that defeats the mechanism.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    // Shared, so keys are cheap to clone into every attempt and error.
    inner: Arc<Inner>,
}

#[derive(PartialEq, Eq, Hash)]
struct Inner {
    text: Box<str>,
    header: HeaderValue,
}

/// Why a string is not an acceptable idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// The key (or, for a derived key, one of its parts) is empty.
    #[error("idempotency key is empty")]
    Empty,
    /// Longer than [`IdempotencyKey::MAX_LEN`].
    #[error("idempotency key is {len} characters long, the limit is {max}")]
    TooLong {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A character outside visible ASCII (`!` to `~`): spaces, control
    /// characters and non-ASCII text are refused.
    #[error(
        "idempotency key has {found:?} at byte {position}; only visible ASCII (! to ~) is allowed"
    )]
    NotVisibleAscii {
        /// Byte offset of the first offending character.
        position: usize,
        /// The offending character.
        found: char,
    },
    /// A part passed to [`IdempotencyKey::derived`] is empty.
    #[error("part {index} of the derived idempotency key is empty")]
    EmptyPart {
        /// Zero-based index of the empty part.
        index: usize,
    },
}

impl IdempotencyKey {
    /// Longest key accepted, the limit idem's servers enforce by default.
    pub const MAX_LEN: usize = 255;

    /// A random UUIDv4 key: the fallback when the caller holds no identifier
    /// of its own. Store it with the operation if the process may restart.
    ///
    /// ```
    /// let key = idem_runtime::client::IdempotencyKey::new_v4();
    /// assert_eq!(key.as_str().len(), 36);
    /// ```
    pub fn new_v4() -> Self {
        let text = uuid::Uuid::new_v4().hyphenated().to_string();
        // A hyphenated UUID is 36 visible-ASCII characters, so validation
        // cannot fail; falling back keeps this path free of panics anyway.
        match Self::new(text) {
            Ok(key) => key,
            Err(_) => Self::from_validated("00000000-0000-4000-8000-000000000000"),
        }
    }

    /// Validates a caller-supplied key.
    ///
    /// ```
    /// use idem_runtime::client::IdempotencyKey;
    /// assert!(IdempotencyKey::new("payout-2024-11-30-0042").is_ok());
    /// assert!(IdempotencyKey::new("has space").is_err());
    /// ```
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidKey> {
        let text: String = key.into();
        validate(&text)?;
        Ok(Self::from_validated(&text))
    }

    /// Builds a key from identifiers the caller already holds, joined with
    /// `-`: the recommended derivation, because the same logical operation
    /// always yields the same key, even after a restart.
    ///
    /// ```
    /// use idem_runtime::client::IdempotencyKey;
    /// let key = IdempotencyKey::derived(["order", "739", "confirm"])?;
    /// assert_eq!(key.as_str(), "order-739-confirm");
    /// # Ok::<(), idem_runtime::client::InvalidKey>(())
    /// ```
    pub fn derived<I, S>(parts: I) -> Result<Self, InvalidKey>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut text = String::new();
        for (index, part) in parts.into_iter().enumerate() {
            let part = part.as_ref();
            if part.is_empty() {
                return Err(InvalidKey::EmptyPart { index });
            }
            if index > 0 {
                text.push('-');
            }
            text.push_str(part);
        }
        Self::new(text)
    }

    /// The key as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.inner.text
    }

    pub(crate) fn header_value(&self) -> HeaderValue {
        self.inner.header.clone()
    }

    fn from_validated(text: &str) -> Self {
        // Visible ASCII is always a valid header value.
        let header =
            HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        Self {
            inner: Arc::new(Inner {
                text: text.into(),
                header,
            }),
        }
    }
}

fn validate(text: &str) -> Result<(), InvalidKey> {
    if text.is_empty() {
        return Err(InvalidKey::Empty);
    }
    if let Some((position, found)) = text.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(InvalidKey::NotVisibleAscii { position, found });
    }
    if text.len() > IdempotencyKey::MAX_LEN {
        return Err(InvalidKey::TooLong {
            len: text.len(),
            max: IdempotencyKey::MAX_LEN,
        });
    }
    Ok(())
}

impl std::str::FromStr for IdempotencyKey {
    type Err = InvalidKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.text)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey")
            .field(&&*self.inner.text)
            .finish()
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.inner.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_join_parts_with_hyphens() {
        let key = IdempotencyKey::derived(["order", "739", "confirm"]).unwrap();
        assert_eq!(key.as_str(), "order-739-confirm");
        assert_eq!(key.header_value(), "order-739-confirm");
    }

    #[test]
    fn derived_keys_refuse_empty_parts() {
        assert_eq!(
            IdempotencyKey::derived(["order", "", "confirm"]),
            Err(InvalidKey::EmptyPart { index: 1 })
        );
    }

    #[test]
    fn keys_are_validated() {
        assert_eq!(IdempotencyKey::new(""), Err(InvalidKey::Empty));
        assert_eq!(
            IdempotencyKey::new("a b"),
            Err(InvalidKey::NotVisibleAscii {
                position: 1,
                found: ' '
            })
        );
        assert!(matches!(
            IdempotencyKey::new("clé"),
            Err(InvalidKey::NotVisibleAscii { position: 2, .. })
        ));
        assert!(IdempotencyKey::new("x".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::new("x".repeat(256)),
            Err(InvalidKey::TooLong { len: 256, max: 255 })
        );
    }

    #[test]
    fn minted_keys_are_distinct_uuids() {
        let a = IdempotencyKey::new_v4();
        let b = IdempotencyKey::new_v4();
        assert_ne!(a, b);
        assert!(uuid::Uuid::parse_str(a.as_str()).is_ok());
    }
}
