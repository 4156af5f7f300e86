//! The request a call is made while serving: its remaining deadline and,
//! on a keyed route, its idempotency key.
//!
//! Retries belong to one layer of a call chain: the outermost caller, the
//! only one that sees the whole operation. When a server handling a request
//! calls another service, a retry there multiplies with the caller's: three
//! layers of four attempts turn one user request into 64 calls on whatever
//! is failing at the bottom. So a [`RetryClient`](crate::client::RetryClient)
//! used while serving a request (inside [`serving`]) behaves as an inner
//! hop:
//!
//! - its deadline is the inbound one, less [`REPLY_MARGIN`] for the reply to
//!   travel back, whenever that is sooner than its own;
//! - it makes **no retries of its own**: one attempt, unless its policy opts
//!   in with [`RetryPolicy::inner_retries`](crate::client::RetryPolicy::inner_retries)
//!   (at most one). Not even a refused connection is retried: the outer
//!   retry reaches it anyway, and one rule keeps the bottom's load at one
//!   call per outer attempt;
//! - a keyed call without a caller-chosen key gets one derived from the
//!   outer key and the call's position among the request's keyed calls, so
//!   the outer retry reaches the inner effect with the same key.
//!
//! The context is a tokio task-local, set by the generated router's
//! deadline middleware (and, on keyed routes, with the key). A task-local
//! rather than an argument, because the client is called from handler code
//! idem does not generate, through any number of layers; the cost is that
//! `tokio::spawn` starts a task without it. [`spawn`] carries it over; a
//! task spawned otherwise acts as a top-level caller, retries included.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use http::HeaderMap;

/// The header carrying the caller's remaining deadline in milliseconds.
pub const TIMEOUT_HEADER: &str = "idem-timeout-ms";

/// gRPC's equivalent (`100m`, `5S`), read when [`TIMEOUT_HEADER`] is absent.
pub const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";

/// Taken off an inherited deadline so the inner call's failure still
/// reaches the outer caller before its own deadline.
pub const REPLY_MARGIN: Duration = Duration::from_millis(20);

/// The request being served.
#[derive(Debug, Clone, Default)]
pub struct Inbound {
    deadline: Option<Instant>,
    key: Option<(String, String)>,
    #[cfg_attr(
        not(feature = "client"),
        allow(dead_code, reason = "counted by the client's derived keys")
    )]
    keyed_calls: Arc<AtomicU32>,
}

impl Inbound {
    /// A request that must be answered by `deadline` (`None`: no deadline).
    pub fn new(deadline: Option<Instant>) -> Self {
        Inbound {
            deadline,
            key: None,
            keyed_calls: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The same request, known to carry `key` in `scope`.
    pub fn with_key(mut self, scope: &str, key: &str) -> Self {
        self.key = Some((scope.to_owned(), key.to_owned()));
        self
    }

    /// When the caller stops waiting.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left before the deadline (`None`: no deadline).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The inbound request's scope and key, on a keyed route.
    pub fn key(&self) -> Option<(&str, &str)> {
        self.key.as_ref().map(|(s, k)| (s.as_str(), k.as_str()))
    }

    /// The key for the next keyed inner call of `operation`: derived from
    /// the inbound scope and key, the operation and the call's position
    /// among this request's keyed calls. The same on every outer retry that
    /// makes the same calls in the same order.
    #[cfg(feature = "client")]
    pub(crate) fn next_inner_key(&self, operation: &str) -> Option<String> {
        use sha2::{Digest, Sha256};
        use std::sync::atomic::Ordering;
        let (scope, key) = self.key.as_ref()?;
        let n = self.keyed_calls.fetch_add(1, Ordering::Relaxed);
        let mut hash = Sha256::new();
        for part in [
            scope.as_bytes(),
            key.as_bytes(),
            operation.as_bytes(),
            &n.to_be_bytes(),
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        let digest = hash.finalize();
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        Some(format!("inner-{hex}"))
    }
}

tokio::task_local! {
    static INBOUND: Inbound;
}

/// The request this task is serving, if any.
pub fn current() -> Option<Inbound> {
    INBOUND.try_with(Inbound::clone).ok()
}

/// Runs `f` as part of serving `inbound`: clients called inside act as
/// inner hops.
pub async fn serving<F: Future>(inbound: Inbound, f: F) -> F::Output {
    scoped(inbound, f).await
}

/// `f` inside `inbound`, as a future that can be named (and boxed without an
/// `async` wrapper around it).
pub(crate) fn scoped<F: Future>(
    inbound: Inbound,
    f: F,
) -> tokio::task::futures::TaskLocalFuture<Inbound, F> {
    INBOUND.scope(inbound, f)
}

/// `tokio::spawn`, carrying the current request's context into the task
/// (a plain `tokio::spawn` starts it without one).
pub fn spawn<F>(f: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match current() {
        Some(inbound) => tokio::spawn(INBOUND.scope(inbound, f)),
        None => tokio::spawn(f),
    }
}

/// A remaining-deadline header that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{header}: {value}` is not a timeout (milliseconds as digits, or gRPC's `100m`)")]
pub struct BadTimeout {
    /// The header.
    pub header: &'static str,
    /// What it held.
    pub value: String,
}

/// The caller's remaining deadline from `Idem-Timeout-Ms`, or from
/// `grpc-timeout` when that is absent.
///
/// ```
/// use idem_runtime::context::inbound_timeout;
/// let mut headers = http::HeaderMap::new();
/// headers.insert("idem-timeout-ms", "250".parse().unwrap());
/// assert_eq!(inbound_timeout(&headers), Ok(Some(std::time::Duration::from_millis(250))));
/// headers.clear();
/// headers.insert("grpc-timeout", "2S".parse().unwrap());
/// assert_eq!(inbound_timeout(&headers), Ok(Some(std::time::Duration::from_secs(2))));
/// ```
pub fn inbound_timeout(headers: &HeaderMap) -> Result<Option<Duration>, BadTimeout> {
    if let Some(value) = headers.get(TIMEOUT_HEADER) {
        let text = value.to_str().unwrap_or_default().trim();
        let bad = || BadTimeout {
            header: TIMEOUT_HEADER,
            value: text.to_owned(),
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 12 {
            return Err(bad());
        }
        return text
            .parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| bad());
    }
    let Some(value) = headers.get(GRPC_TIMEOUT_HEADER) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    let bad = || BadTimeout {
        header: GRPC_TIMEOUT_HEADER,
        value: text.to_owned(),
    };
    let (digits, unit) = text.split_at(text.len().saturating_sub(1));
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let duration = match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return Err(bad()),
    };
    Ok(Some(duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_timeouts_are_refused() {
        for (header, value) in [
            (TIMEOUT_HEADER, "-5"),
            (TIMEOUT_HEADER, "1e3"),
            (TIMEOUT_HEADER, ""),
            (GRPC_TIMEOUT_HEADER, "5x"),
            (GRPC_TIMEOUT_HEADER, "S"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(
                header,
                value.parse().unwrap_or(http::HeaderValue::from_static("?")),
            );
            assert!(inbound_timeout(&headers).is_err(), "{header}: {value}");
        }
    }

    #[cfg(feature = "client")]
    #[tokio::test]
    async fn inner_keys_are_stable_per_position_and_distinct() {
        let a = Inbound::new(None).with_key("acct", "k1");
        let first = a.next_inner_key("charge");
        let second = a.next_inner_key("charge");
        assert_ne!(first, second);
        let again = Inbound::new(None).with_key("acct", "k1");
        assert_eq!(again.next_inner_key("charge"), first);
        let other_caller = Inbound::new(None).with_key("acct-2", "k1");
        assert_ne!(other_caller.next_inner_key("charge"), first);
        assert_eq!(Inbound::new(None).next_inner_key("charge"), None);
    }

    #[tokio::test]
    async fn spawn_carries_the_context() {
        let inbound = Inbound::new(Some(Instant::now() + Duration::from_secs(5)));
        let inside = serving(inbound, async {
            spawn(async { current().and_then(|c| c.deadline()).is_some() }).await
        })
        .await;
        assert!(matches!(inside, Ok(true)));
        assert!(current().is_none());
    }
}
