//! What idem-generated code links to.
//!
//! - [`client`] (feature `client`): bounded, key-aware retries for reqwest callers.
//! - [`server`] (feature `server`): the idempotency-key protocol over sqlx, with an
//!   axum/tower layer.
//! - [`protocol`] (always): the codes, statuses and bodies both halves and the
//!   generated docs page share.
//!
//! Both halves are usable by hand-written code today; idem's generators emit code
//! that calls the same items through this one path.

#[cfg(feature = "client")]
pub mod client;
pub mod protocol;
#[cfg(feature = "server")]
pub mod server;
