//! What each operation is on the wire, settled once for every emitter: the
//! client, the server, the docs page and the probe read it here rather
//! than deciding it themselves.
//!
//! - its full path: [`full_path`], the first server's base path and the
//!   operation's (the path parameters a template names and nothing
//!   declares are added to the operation by the model, as required strings);
//! - how a body in each media type travels: [`encoding`];
//! - whether and how a list pages: [`paging`];
//! - whether it answers with an event stream: [`streams_events`];
//! - the sample request the docs page shows and the probe sends: [`sample`].

pub mod encoding;
pub mod paging;
pub mod sample;

use super::{Model, Operation};

/// The path the operation is called at: the first server's base path, then
/// the operation's own (`/v2` + `/reservations`). The client calls it, the
/// router serves it, the docs page shows it.
pub fn full_path(model: &Model, op: &Operation) -> String {
    format!("{}{}", model.base_path(), op.path)
}

/// A server URL's host and path: `https://api.example.com/v2` is
/// `(Some("api.example.com"), "/v2")`; a relative URL (`/v2`) has no host.
pub(crate) fn server_parts(url: &str) -> (Option<&str>, &str) {
    match url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    {
        Some(rest) => match rest.find('/') {
            Some(at) => (Some(&rest[..at]), &rest[at..]),
            None => (Some(rest), ""),
        },
        None => (None, url),
    }
}

/// The first server's host, which the docs page's examples call:
/// `None` when it is relative or templated, naming no host to show.
pub fn server_host(model: &Model) -> Option<String> {
    let (host, path) = server_parts(model.servers.first()?);
    let host = host?;
    (!host.is_empty() && !host.contains(['{', '}']) && !path.contains(['{', '}']))
        .then(|| host.to_owned())
}

/// Whether an operation's success answer declares `text/event-stream`.
pub fn streams_events(op: &Operation) -> bool {
    op.responses
        .iter()
        .filter(|r| r.status.starts_with('2'))
        .flat_map(|r| r.media.iter())
        .any(|m| m.media_type.eq_ignore_ascii_case("text/event-stream") && m.schema.is_some())
}
