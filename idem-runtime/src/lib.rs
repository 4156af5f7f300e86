//! What idem-generated code links to.
//!
//! - [`client`] (feature `client`): bounded, key-aware retries for reqwest callers.
//! - [`server`] (feature `server`): the idempotency-key protocol over sqlx, with an
//!   axum/tower layer.
//! - [`protocol`] (always): the codes, statuses and bodies both halves and the
//!   generated docs page share.
//! - [`context`] (always): the request a call is made while serving — its
//!   deadline and key — so a client inside a server is an inner hop that
//!   fails fast instead of a retrying layer of its own.
//!
//! Both halves are usable by hand-written code today; idem's generators emit code
//! that calls the same items through this one path.

#[cfg(feature = "client")]
pub mod client;
pub mod context;
pub mod metric;
pub mod protocol;
pub mod rt;
#[cfg(feature = "server")]
pub mod server;

pub mod codec;
pub mod validate;

// What generated code names, re-exported so a generated crate depends on
// `idem-runtime` alone and always agrees with it on versions.
#[cfg(feature = "server")]
pub use axum;
pub use bytes;
pub use chrono;
pub use http;
#[cfg(feature = "client")]
pub use reqwest;
pub use serde;
pub use serde_json;
#[cfg(feature = "server")]
pub use sqlx;
pub use uuid;

/// Includes the API that `idem_codegen::build` generated into `OUT_DIR`.
///
/// ```ignore
/// // build.rs: idem_codegen::build::compile("openapi.yaml")?;
/// idem_runtime::include_api!();
/// ```
#[macro_export]
macro_rules! include_api {
    () => {
        ::core::include!(::core::concat!(::core::env!("OUT_DIR"), "/idem_api.rs"));
    };
    ($name:literal) => {
        ::core::include!(::core::concat!(::core::env!("OUT_DIR"), "/", $name, ".rs"));
    };
}
