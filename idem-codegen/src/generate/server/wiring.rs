//! How an operation is wired into the router (plain, keyed, phased), and the
//! runtime path the generated server names.

use proc_macro2::TokenStream;

use crate::model::{Operation, RetryClass};

pub(super) const RT: &str = "::idem_runtime::rt::server";

pub(super) fn rt() -> TokenStream {
    RT.parse().unwrap_or_default()
}

/// How an operation's method is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wiring {
    /// No key: a plain handler.
    Plain,
    /// Behind the idempotency layer, given the key's transaction.
    Keyed,
    /// A phased operation: steps recorded one by one, resumable.
    Phased,
}

pub(super) fn wiring(op: &Operation) -> Wiring {
    let unsafe_method = !matches!(op.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE");
    if op.class != RetryClass::Keyed || !unsafe_method || op.key.source.is_none() {
        return Wiring::Plain;
    }
    match &op.phases {
        Some(phases) if !phases.value.is_empty() => Wiring::Phased,
        _ => Wiring::Keyed,
    }
}
