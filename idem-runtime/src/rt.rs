//! What generated code names, in one place.
//!
//! Code that `idem` generates reaches the runtime only through this module:
//! a change here is a change to what generated crates compile against,
//! and anything else in the runtime can move without breaking them. A
//! generated module imports what it uses from here once
//! (`use idem_runtime::rt::client::{ApiClient, Call};`), so its items read
//! with short names.
//!
//! - The root: the crates the types are made of (`serde`, `chrono`,
//!   `uuid`, `bytes`, `serde_json`, `http`), the macros that define them,
//!   their validation and their codecs.
//! - [`client`]: what a generated client calls (with the `client` feature).
//! - [`server`]: what a generated server calls (with the `server` feature).

pub use crate::codec;
pub use crate::validate::{Validate, Validator};
pub use crate::{bytes, chrono, http, serde, serde_json, uuid};
pub use crate::{closed_object, object, one_of, string_enum};

/// What a generated client calls: the request it builds, the call that
/// runs it under the operation's retry class, and the errors and pages it
/// returns.
#[cfg(feature = "client")]
pub mod client {
    pub use crate::client::support::{
        ApiClient, ApiError, Call, Credential, Defaults, InvalidBaseUrl, KeyLocation, Multipart,
        NoBody, OperationSpec, PolicyOverride, Raw, Request, Style, segment,
    };
    pub use crate::client::{
        BudgetConfig, Events, IdempotencyKey, NextPage, Operation, PageError, PageSpec, Paged,
        Resume, RetryClass, RetryClient, StreamExt,
    };
    pub use crate::reqwest;
}

/// What a generated server calls: the typed inputs it reads, the replies it
/// builds, the key protocol's policy per operation, and the router's
/// layers.
#[cfg(feature = "server")]
pub mod server {
    pub use crate::axum;
    pub use crate::protocol::DEFAULT_MAX_IN_FLIGHT;
    pub use crate::server::support::{
        Context, DEFAULT_BODY_LIMIT, Deadlines, Inbound, Input, Rejection, Route, Style, Upload,
        acceptable, admit, admit_route, bytes, empty, header, json, keyed, media_type,
        method_not_allowed, mount, not_found, status_in, text,
    };
    pub use crate::server::{
        Backend, BoxFuture, ClaimAt, ConfigError, Credential, FailureReplay, Fault, ForeignCall,
        IdemTx, Idempotency, InFlight, KeyIn, KeyRequirement, MismatchStatus, Operation,
        PhaseError, Policy, Reject, Reply, ResumePolicy, Run, StepError, observed,
    };
}
