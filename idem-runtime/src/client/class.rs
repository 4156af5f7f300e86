//! Retry classes and the operations that carry them.

use std::fmt;
use std::str::FromStr;

/// How an operation may be retried, as the audit assigns it
/// (`docs/vocabulary.md`, "Retry classes"). Generated SDKs pass it per operation; hand-written
/// callers pick it by the same rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryClass {
    /// Idempotent by method and effect (GET, HEAD, OPTIONS, TRACE, replacing
    /// PUT, deleting DELETE): retried on the allowlist, 500 at most once.
    Safe,
    /// Accepts an idempotency key: a key is minted once per logical call and
    /// sent on every attempt; retried like `safe`.
    Keyed,
    /// Not idempotent, no key, documented as unsafe to retry: never re-sent
    /// once the request may have reached the server.
    UnsafeDocumented,
    /// Not idempotent, no key, no warning (the audit fails on these):
    /// handled like `unsafe-documented`.
    Unsafe,
}

impl RetryClass {
    /// Every class, in the order `docs/vocabulary.md` lists them.
    pub const ALL: [RetryClass; 4] = [
        RetryClass::Safe,
        RetryClass::Keyed,
        RetryClass::UnsafeDocumented,
        RetryClass::Unsafe,
    ];

    /// The class's name in the vocabulary: `safe`, `keyed`,
    /// `unsafe-documented`, `unsafe`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryClass::Safe => "safe",
            RetryClass::Keyed => "keyed",
            RetryClass::UnsafeDocumented => "unsafe-documented",
            RetryClass::Unsafe => "unsafe",
        }
    }

    /// Whether a request of this class may be sent again after it may have
    /// reached the server (`safe` and `keyed` only).
    pub const fn may_resend(self) -> bool {
        matches!(self, RetryClass::Safe | RetryClass::Keyed)
    }
}

impl fmt::Display for RetryClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A retry class name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown retry class {found:?}; expected safe, keyed, unsafe-documented or unsafe")]
pub struct UnknownRetryClass {
    /// The rejected text.
    pub found: String,
}

impl FromStr for RetryClass {
    type Err = UnknownRetryClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RetryClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownRetryClass {
                found: s.to_owned(),
            })
    }
}

/// One API operation as the retry client sees it: a name for logs and
/// errors, its retry class, and (for `unsafe-documented`) the documented
/// warning that "outcome unknown" errors repeat.
///
/// ```
/// use idem_runtime::client::{Operation, RetryClass};
/// const CREATE_ORDER: Operation = Operation::new("createOrder", RetryClass::Keyed);
/// const ADD_NOTE: Operation = Operation::new("addOrderNote", RetryClass::UnsafeDocumented)
///     .warning("Each call appends a note; check the activity log before retrying.");
/// assert_eq!(CREATE_ORDER.class, RetryClass::Keyed);
/// assert!(ADD_NOTE.warning.is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The operation id (or any stable name) used in events and errors.
    pub name: &'static str,
    /// How it may be retried.
    pub class: RetryClass,
    /// The operation's `unsafe-retry` text, if documented.
    pub warning: Option<&'static str>,
    /// The request-body field the key travels in (`key-in: body`, or a key
    /// field the spec shows, such as Square's `idempotency_key` or Twilio's
    /// `IdempotencyKey`); `None`: the key header.
    pub body_key: Option<&'static str>,
    /// The response header the spec declares for the request id, when it
    /// is not one of the common names
    /// ([`REQUEST_ID_HEADERS`](crate::client::support::REQUEST_ID_HEADERS)).
    pub request_id: Option<&'static str>,
}

impl Operation {
    /// An operation with a name and class.
    pub const fn new(name: &'static str, class: RetryClass) -> Self {
        Self {
            name,
            class,
            warning: None,
            body_key: None,
            request_id: None,
        }
    }

    /// Names the response header the server's request id comes in.
    pub const fn request_id_header(mut self, name: &'static str) -> Self {
        self.request_id = Some(name);
        self
    }

    /// Attaches the documented `unsafe-retry` warning.
    pub const fn warning(mut self, text: &'static str) -> Self {
        self.warning = Some(text);
        self
    }

    /// Carries the key in request-body field `field` instead of the key
    /// header: the attempt's headers then hold no key, and
    /// [`RetryClient::send_body_keyed`](super::RetryClient::send_body_keyed)
    /// hands the call's key to the code that builds each body.
    ///
    /// ```
    /// use idem_runtime::client::{Operation, RetryClass};
    /// const CREATE_PAYMENT: Operation =
    ///     Operation::new("CreatePayment", RetryClass::Keyed).body_key("idempotency_key");
    /// assert_eq!(CREATE_PAYMENT.body_key, Some("idempotency_key"));
    /// ```
    pub const fn body_key(mut self, field: &'static str) -> Self {
        self.body_key = Some(field);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for class in RetryClass::ALL {
            assert_eq!(class.as_str().parse::<RetryClass>(), Ok(class));
        }
        assert!("Unsafe".parse::<RetryClass>().is_err());
    }
}
